"""Keyed table modes side by side: the same upsert into fixed buckets, dynamic buckets and a
deletion-vector table, and the full scan a deletion-vector table saves its readers.

Write: each round creates the tables holding the same first write of `keys` keys, then times
one upsert of `rows` rows (every key again, `rows // keys` versions each) into each, interleaved;
ratios of medians, and per round:
* dynamic buckets (`bucket=-1`, Paimon's default) / fixed 8 buckets;
* deletion vectors (8 buckets, `deletion-vectors.enabled`: level 0 merged at commit) / fixed 8 buckets;
* cross-partition (key `key`, partitioned by `part`: every write first reads the table's keys)
  / dynamic buckets keyed by (`key`, `part`) on the same partitioned rows: what the keys' bootstrap costs.

Read: `batches` CDC batches of `batch_rows` upserts each into a plain 8-bucket table and a
deletion-vector one; then pypaimon's full scan of each (median of `scan_repeats`). The plain
table's reader merges every sorted run per key; the deletion-vector reader skips marked rows.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

import lakesink

FIXED = {"bucket": "8"}
DV = {"bucket": "8", "deletion-vectors.enabled": "true"}
MODES = {"fixed 8 buckets": FIXED, "dynamic buckets": {"bucket": "-1"}, "deletion vectors": DV}
# (primary key, partitioned) of the pair that prices a cross-partition write's key bootstrap.
PARTITIONED = {"dynamic, partitioned": ["key", "part"], "cross-partition": ["key"]}


def _frame(spark, rows: int, keys: int, offset: int = 0, partitioned: bool = False):
    df = spark.range(rows, numPartitions=4).selectExpr(
        f"id % {keys} as key", f"id + {offset} as version", "cast(id % 1000 as int) as customer",
        "cast(id * 7 % 100000 as decimal(12,2)) as amount", "concat('order-', cast(id as string)) as note")
    return df.selectExpr("*", "cast(key % 8 as int) as part") if partitioned else df


def _scan_seconds(path: str, repeats: int) -> tuple[float, int]:
    from pypaimon.catalog.catalog_factory import CatalogFactory  # noqa: F401 (pypaimon loaded before timing)

    from lakesink.paimon.table import tables

    seconds, rows = [], 0
    for _ in range(repeats):
        table = tables.open_table(path)
        start = time.perf_counter()
        builder = table.new_read_builder()
        rows = builder.new_read().to_arrow(builder.new_scan().plan().splits()).num_rows
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), rows


def run(spark, rows: int = 10_000_000, keys: int = 1_000_000, repeats: int = 3, batches: int = 100,
        batch_rows: int = 20_000, scan_repeats: int = 3) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-modes-")
    times: dict[str, list[float]] = {m: [] for m in [*MODES, *PARTITIONED]}
    try:
        for i in range(repeats + 1):  # round 0 warms up
            for mode, options in MODES.items():
                path = f"{root}/r{i}/{mode.replace(' ', '-')}"
                lakesink.write(_frame(spark, keys, keys), path, primary_key=["key"], options=options)
                start = time.perf_counter()
                lakesink.write(_frame(spark, rows, keys, offset=keys), path)
                times[mode].append(time.perf_counter() - start)
            for mode, key in PARTITIONED.items():
                path = f"{root}/r{i}/{mode.replace(' ', '-').replace(',', '')}"
                lakesink.write(_frame(spark, keys, keys, partitioned=True), path, primary_key=key,
                               partition_by=["part"])
                start = time.perf_counter()
                lakesink.write(_frame(spark, rows, keys, offset=keys, partitioned=True), path)
                times[mode].append(time.perf_counter() - start)
            shutil.rmtree(f"{root}/r{i}", ignore_errors=True)
        med = {m: statistics.median(t[1:]) for m, t in times.items()}
        fixed = times["fixed 8 buckets"][1:]
        by_round = {m: [t / f for t, f in zip(times[m][1:], fixed)] for m in ("dynamic buckets", "deletion vectors")}
        by_round["cross-partition"] = [c / d for c, d in zip(times["cross-partition"][1:],
                                                              times["dynamic, partitioned"][1:])]

        scans = {}
        for name, options in (("plain", FIXED), ("deletion vectors", DV)):
            path = f"{root}/read/{name.replace(' ', '-')}"
            lakesink.write(_frame(spark, keys, keys), path, primary_key=["key"], options=options)
            for b in range(batches):
                start_key = (b * batch_rows) % keys
                lakesink.write(_frame(spark, batch_rows, keys, offset=keys * (b + 2))
                               .selectExpr(f"(key + {start_key}) % {keys} as key", "version", "customer",
                                           "amount", "note"), path)
            scans[name] = _scan_seconds(path, scan_repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"rows": rows, "keys": keys, "repeats": repeats, "median_s": med,
              "dynamic_vs_fixed": med["dynamic buckets"] / med["fixed 8 buckets"],
              "dv_vs_fixed": med["deletion vectors"] / med["fixed 8 buckets"],
              "cross_vs_dynamic": med["cross-partition"] / med["dynamic, partitioned"], "by_round": by_round,
              "batches": batches, "batch_rows": batch_rows,
              "scan_s": {k: v[0] for k, v in scans.items()}, "scan_rows": {k: v[1] for k, v in scans.items()},
              "dv_scan_speedup": scans["plain"][0] / scans["deletion vectors"][0]}
    print(f"\nkeyed modes: upsert of {rows:,} rows over {keys:,} keys into a table holding them, median of {repeats}")
    for mode in MODES:
        print(f"  {mode:<20} {med[mode]:7.2f} s   {med[mode] / med['fixed 8 buckets']:5.2f}x fixed")
    for mode in PARTITIONED:
        print(f"  {mode:<20} {med[mode]:7.2f} s   {med[mode] / med['dynamic, partitioned']:5.2f}x dynamic, partitioned")
    for mode, ratios in by_round.items():
        base = "dynamic, partitioned" if mode == "cross-partition" else "fixed"
        print(f"  {mode} / {base} by round: " + " ".join(f"{r:.2f}" for r in ratios))
    print(f"full scan (pypaimon) after {batches} CDC batches of {batch_rows:,} rows, median of {scan_repeats}:")
    for name, (seconds, n) in scans.items():
        print(f"  {name:<20} {seconds:7.2f} s   {n:,} rows")
    print(f"  deletion vectors read {result['dv_scan_speedup']:.2f}x faster")
    return result
