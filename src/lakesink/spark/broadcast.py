"""When a row-level statement may broadcast one side of a join instead of shuffling both.

A MERGE's source, or the keys a DELETE / UPDATE condition picks, is usually small beside the
target: broadcast, it lets Spark stream the target past it (no shuffle or sort of the whole
target). Broadcasting goes through the driver, so the size is bounded: at most
`BROADCAST_BYTES` and an eighth of the driver's heap.
"""

from __future__ import annotations

BROADCAST_BYTES = 512 * 1024 * 1024


def fits(spark, size_bytes: int) -> bool:
    """Whether `size_bytes` of rows may be broadcast (False where the driver cannot be asked,
    as under Spark Connect)."""
    try:
        heap = int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())
    except Exception:  # noqa: BLE001 - no JVM in this process
        return False
    return size_bytes <= min(BROADCAST_BYTES, heap // 8)


def estimated_bytes(df) -> int | None:
    """Spark's estimate of `df`'s size (exact for a persisted, materialised one)."""
    try:
        return int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001 - Spark Connect
        return None


def fits_frame(df) -> bool:
    size = estimated_bytes(df)
    return size is not None and fits(df.sparkSession, size)
