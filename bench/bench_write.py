"""Batch write: lakesink's two paths vs Spark's own Parquet writer, same DataFrame, one run.

Runs are interleaved (parquet, fast, native, drain, parquet, ...) so machine noise
hits all alike; each figure is the median of `repeats`.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

import lakesink


def _frame(spark, rows: int):
    return spark.range(rows, numPartitions=4).selectExpr(
        "id", "cast(id % 1000 as int) as customer", "cast(id * 7 % 100000 as decimal(12,2)) as amount",
        "concat('order-', cast(id as string)) as note", "cast(id as double) / 3 as score",
        "timestamp'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 86400) as ts")


def run(spark, rows: int = 10_000_000, repeats: int = 3) -> dict:
    from .drain import DrainDataSource
    spark.dataSource.register(DrainDataSource)
    df = _frame(spark, rows)
    root = tempfile.mkdtemp(prefix="lakesink-bench-write-")
    times: dict[str, list[float]] = {"spark parquet": [], "lakesink.write": [], "format(paimon)": [],
                                     "drain-only DS": []}

    def timed(name, fn):
        start = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - start)

    try:
        for i in range(repeats + 1):  # round 0 warms up the JVM and Python workers
            timed("spark parquet", lambda: df.write.mode("overwrite").parquet(f"{root}/pq{i}"))
            timed("lakesink.write", lambda: lakesink.write(df, f"{root}/wh/db.db/fast{i}"))
            timed("format(paimon)", lambda: df.write.format("paimon").mode("append").save(f"{root}/wh/db.db/native{i}"))
            timed("drain-only DS", lambda: df.write.format("lakesink_drain").mode("append").save())
            shutil.rmtree(f"{root}/pq{i}", ignore_errors=True)
            shutil.rmtree(f"{root}/wh", ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v[1:]) for k, v in times.items()}
    result = {
        "rows": rows, "repeats": repeats, "median_s": med,
        "fast_vs_parquet": med["lakesink.write"] / med["spark parquet"],
        "native_vs_parquet": med["format(paimon)"] / med["spark parquet"],
        "drain_vs_parquet": med["drain-only DS"] / med["spark parquet"],
        "native_overhead_vs_drain": med["format(paimon)"] / med["drain-only DS"],
    }
    print(f"\nbatch write, {rows:,} rows, median of {repeats} interleaved runs")
    for name, seconds in med.items():
        print(f"  {name:<16} {seconds:7.2f} s   {seconds / med['spark parquet']:5.2f}x parquet")
    print(f"  fast path / parquet          {result['fast_vs_parquet']:.2f}x   (target <= 1.25x)")
    print(f"  format(paimon) / drain-only  {result['native_overhead_vs_drain']:.2f}x   (target <= 1.15x)")
    return result
