"""Session settings that lakesink's own Spark jobs need for a while: set while any job of the
session needs them, put back as they were when the last one ends (one session's jobs may run
in several threads)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import contextmanager

_lock = threading.Lock()
_users: dict[tuple, dict] = {}  # (session, key) -> {"previous": the session's own value, "needs": [...]}


def _session_key(spark):
    """One key per Spark session: its JVM object, or its Connect session id (no JVM here)."""
    try:
        return ("jvm", spark._jsparkSession.hashCode())
    except Exception:  # noqa: BLE001 - Spark Connect refuses JVM attributes
        return ("connect", getattr(spark, "session_id", id(spark)))


@contextmanager
def setting(spark, key: str, value: str, keep: Callable[[str, str], bool] = lambda current, value: False):
    """`key` is `value` while this block runs (`keep(current, value)`: leave a current value that
    already serves, e.g. a larger limit)."""
    users_key = (_session_key(spark), key)
    with _lock:
        users = _users.setdefault(users_key, {"previous": spark.conf.get(key, None), "needs": []})
        users["needs"].append(value)
        current = spark.conf.get(key, None)
        if current is None or not keep(current, value):
            spark.conf.set(key, value)
    try:
        yield
    finally:
        with _lock:
            users["needs"].remove(value)
            if not users["needs"]:
                del _users[users_key]
                if users["previous"] is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, users["previous"])


@contextmanager
def uncompressed_cache(spark):
    """Frames a job persists and reads back soon are cached without compressing their columns
    (`spark.sql.inMemoryColumnarStorage.compressed`, read when a cache is filled): on 2 cores,
    compressing a 10M-row MERGE's 1.6M joined rows took half of the CPU of the job filling it."""
    with setting(spark, "spark.sql.inMemoryColumnarStorage.compressed", "false"):
        yield


@contextmanager
def concurrent_writers(spark, count: int):
    """For this write: Spark's tasks keep up to `count` files open instead of sorting their rows
    by the partitionBy columns first (`spark.sql.maxConcurrentOutputFileWriters`, a session
    setting read when the write is planned and run; a larger one is left as it is); a task with
    more files to write sorts the rest. 0: leave the setting alone."""
    if not count:
        yield
        return
    with setting(spark, "spark.sql.maxConcurrentOutputFileWriters", str(count),
                 keep=lambda current, value: int(current) >= int(value)):
        yield


_MIB = 1 << 20
_UNITS = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def _mib(text: str) -> float:
    """Spark's memory sizes ("1g", "512m", "2048": MiB)."""
    text = str(text).strip().lower().rstrip("b")
    return float(text[:-1]) * _UNITS[text[-1]] if text and text[-1] in _UNITS else float(text)


def row_group_bytes(spark, open_files: int) -> int:
    """`row_group_mib` for this session's JVMs, in bytes: the driver in local mode, else an
    executor (`spark.executor.memory`, `spark.executor.cores`)."""
    from .session import cores

    local = str(spark.conf.get("spark.master", "local")).startswith("local")
    heap = _mib(spark.conf.get("spark.driver.memory" if local else "spark.executor.memory", "1g"))
    tasks = cores(spark) if local else int(spark.conf.get("spark.executor.cores", "1"))
    block = int(spark.conf.get("spark.hadoop.parquet.block.size", str(128 * _MIB))) / _MIB
    return int(row_group_mib(open_files, heap, tasks, block) * _MIB)


def row_group_mib(open_files: int, heap_mib: float, tasks: int, block_mib: float = 128) -> float:
    """The row group size (at most `parquet.block.size`) at which `tasks` tasks of one JVM, each
    with `open_files` Parquet writers and one more for the rows it sorts past them, fit in the
    95% of the heap Parquet's writers share (90% here: the heap a JVM reports is a little under
    its -Xmx). Parquet would shrink them to about that size anyway, but with a warning for each
    writer it opens (a DELETE of a 50-partition table logged 150)."""
    return min(block_mib, 0.9 * heap_mib / ((open_files + 1) * max(tasks, 1)))
