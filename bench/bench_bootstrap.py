"""What a cross-partition table's key bootstrap costs a write job: the same small upsert into a
table holding `keys` keys, cross-partition (key `key`, partitioned by `part`: every job first
reads the table's keys to find where each lives) and dynamic buckets keyed by (`key`, `part`)
(each job reads only the hash index of the partitions it writes). Medians of `repeats` upserts
of `rows` rows after the tables' first write.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

import lakesink
from bench.bench_keyed_modes import PARTITIONED, _frame


def run(spark, keys: int = 10_000_000, rows: int = 1_000, repeats: int = 3) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-bootstrap-")
    out = {}
    try:
        for mode, key in PARTITIONED.items():
            path = f"{root}/{mode.replace(' ', '-').replace(',', '')}"
            start = time.perf_counter()
            lakesink.write(_frame(spark, keys, keys, partitioned=True), path, primary_key=key, partition_by=["part"])
            first = time.perf_counter() - start
            upserts = []
            for r in range(repeats):
                start = time.perf_counter()
                lakesink.write(_frame(spark, rows, keys, offset=keys * (r + 2), partitioned=True), path)
                upserts.append(time.perf_counter() - start)
            out[mode] = {"first_write_s": first, "upsert_s": statistics.median(upserts)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cross, dynamic = out["cross-partition"]["upsert_s"], out["dynamic, partitioned"]["upsert_s"]
    print(f"[bootstrap] upsert of {rows:,} rows into a table of {keys:,} keys, median of {repeats}:")
    for mode, figures in out.items():
        print(f"  {mode}: {figures['upsert_s']:.1f} s (the table's first write: {figures['first_write_s']:.1f} s)")
    print(f"  the key bootstrap adds {cross - dynamic:.1f} s ({cross / dynamic:.2f}x)")
    return {"keys": keys, "rows": rows, **out, "bootstrap_s": cross - dynamic}
