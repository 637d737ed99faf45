"""Batch read: lakesink.read and format("paimon") vs spark.read.parquet over the same data files.

One table of `rows` rows written by lakesink.write in 20 files of contiguous ids.
Each measured read ends in Spark's `noop` sink, which materialises every row of
every selected column (a `count()` would let Parquet skip the columns).
Runs are interleaved so machine noise hits all alike; each figure is the median
of `repeats` after a warm-up round.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

import lakesink
from lakesink.spark.read import plan

FILES = 20


def _frame(spark, rows: int):
    return spark.range(rows, numPartitions=FILES).selectExpr(
        "id", "cast(id % 1000 as int) as customer", "cast(id * 7 % 100000 as decimal(12,2)) as amount",
        "concat('order-', cast(id as string)) as note", "cast(id as double) / 3 as score",
        "timestamp'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 86400) as ts")


def _drain(df) -> None:
    df.write.format("noop").mode("overwrite").save()


def run(spark, rows: int = 10_000_000, repeats: int = 3) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-read-")
    path = f"{root}/wh/db.db/orders"
    try:
        lakesink.write(_frame(spark, rows), path)
        planned = plan(path)
        files = planned.file_paths()
        cutoff = rows // (FILES * 2)  # half of the first file's ids
        selective = plan(path, filter=f"id < {cutoff}")
        cases = {
            "full: spark parquet": lambda: _drain(spark.read.parquet(*files)),
            "full: lakesink.read": lambda: _drain(lakesink.read(spark, path)),
            "full: format(paimon)": lambda: _drain(spark.read.format("paimon").load(path)),
            "2 cols: spark parquet": lambda: _drain(spark.read.parquet(*files).select("id", "amount")),
            "2 cols: lakesink.read": lambda: _drain(lakesink.read(spark, path).select("id", "amount")),
            "2 cols: format(paimon)": lambda: _drain(spark.read.format("paimon").load(path).select("id", "amount")),
            "filter: spark parquet": lambda: _drain(spark.read.parquet(*files).where(f"id < {cutoff}")),
            "filter: lakesink.read": lambda: _drain(lakesink.read(spark, path, filter=f"id < {cutoff}")),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeats + 1):  # round 0 warms up the JVM and Python workers
            for name, fn in cases.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v[1:]) for k, v in times.items()}

    def ratio(kind: str, how: str) -> float:
        # throughput relative to Spark's own reader: > 1 is faster
        return med[f"{kind}: spark parquet"] / med[f"{kind}: {how}"]

    result = {
        "rows": rows, "repeats": repeats, "median_s": med, "files_total": len(files),
        "files_read_selective": len(selective.files),
        "full_fast_throughput_vs_parquet": ratio("full", "lakesink.read"),
        "full_native_throughput_vs_parquet": ratio("full", "format(paimon)"),
        "proj_fast_throughput_vs_parquet": ratio("2 cols", "lakesink.read"),
        "proj_native_throughput_vs_parquet": ratio("2 cols", "format(paimon)"),
        "filter_fast_speedup_vs_parquet": ratio("filter", "lakesink.read"),
    }
    print(f"\nbatch read, {rows:,} rows in {len(files)} files, median of {repeats} interleaved runs")
    for name, seconds in med.items():
        kind = name.split(":")[0]
        print(f"  {name:<24} {seconds:7.2f} s   {med[f'{kind}: spark parquet'] / seconds:5.2f}x parquet throughput")
    print(f"  fast path full scan / parquet   {result['full_fast_throughput_vs_parquet']:.2f}x  (target >= 0.8x)")
    print(f"  fast path 2 columns / parquet   {result['proj_fast_throughput_vs_parquet']:.2f}x  (target >= 0.8x)")
    print(f"  selective filter reads {result['files_read_selective']} of {len(files)} files "
          f"({100 * result['files_read_selective'] / len(files):.0f}%, target < 10%)")
    return result
