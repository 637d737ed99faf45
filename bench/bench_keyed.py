"""Keyed write: upsert into an 8-bucket primary-key table vs Spark's own bucketed Parquet write.

Same DataFrame for all: `rows` rows over `keys` distinct keys. Compared, interleaved, medians:
* spark parquet: `repartition(8, key).sortWithinPartitions(key).write.parquet` (no dedupe, no table);
* lakesink.write(primary_key=[key], bucket=8) into a table already holding one write (so sequence
  numbers come from the manifests and the base join runs);
* pypaimon's own single-process write of the same rows (as Arrow, conversion not timed), once.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

import lakesink

from .pypaimon_write import pypaimon_write


def _frame(spark, rows: int, keys: int):
    return spark.range(rows, numPartitions=4).selectExpr(
        f"id % {keys} as key", "id as version", "cast(id % 1000 as int) as customer",
        "cast(id * 7 % 100000 as decimal(12,2)) as amount", "concat('order-', cast(id as string)) as note")


def _pypaimon_write(root: str, data) -> float:
    import pyarrow as pa

    schema = pa.schema([f.with_nullable(f.name != "key") for f in data.schema])
    return pypaimon_write(f"{root}/pp", data.cast(schema), primary_keys=["key"], table_options={"bucket": "8"})


def run(spark, rows: int = 10_000_000, keys: int = 1_000_000, repeats: int = 3,
        pypaimon_rows: int | None = None) -> dict:
    df = _frame(spark, rows, keys)
    root = tempfile.mkdtemp(prefix="lakesink-bench-keyed-")
    times: dict[str, list[float]] = {"spark parquet": [], "lakesink.write": []}
    try:
        for i in range(repeats + 1):  # round 0 warms up
            path = f"{root}/wh/db.db/t{i}"
            lakesink.write(_frame(spark, 1000, 1000), path, primary_key=["key"], options={"bucket": "8"})
            start = time.perf_counter()
            df.repartition(8, "key").sortWithinPartitions("key").write.mode("overwrite").parquet(f"{root}/pq{i}")
            times["spark parquet"].append(time.perf_counter() - start)
            start = time.perf_counter()
            lakesink.write(df, path)
            times["lakesink.write"].append(time.perf_counter() - start)
            shutil.rmtree(f"{root}/pq{i}", ignore_errors=True)
            shutil.rmtree(f"{root}/wh", ignore_errors=True)
        med = {k: statistics.median(v[1:]) for k, v in times.items()}
        # Each round times both back to back: its ratio cancels the machine's drift between rounds.
        by_round = [k / p for k, p in zip(times["lakesink.write"][1:], times["spark parquet"][1:])]
        pp_rows = rows if pypaimon_rows is None else pypaimon_rows
        data = _frame(spark, pp_rows, min(keys, pp_rows)).toArrow()
        pp = _pypaimon_write(root, data)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"rows": rows, "keys": keys, "repeats": repeats, "median_s": med,
              "keyed_vs_parquet": med["lakesink.write"] / med["spark parquet"],
              "keyed_vs_parquet_by_round": by_round,
              "pypaimon_rows": pp_rows, "pypaimon_s": pp,
              "pypaimon_vs_keyed_per_row": (pp / pp_rows) / (med["lakesink.write"] / rows)}
    print(f"\nkeyed upsert, {rows:,} rows over {keys:,} keys, 8 buckets, median of {repeats}")
    for name, seconds in med.items():
        print(f"  {name:<16} {seconds:7.2f} s   {seconds / med['spark parquet']:5.2f}x parquet")
    print(f"  lakesink.write / parquet     {result['keyed_vs_parquet']:.2f}x   (target <= 1.2x); by round "
          + " ".join(f"{r:.2f}" for r in by_round) + f", median {statistics.median(by_round):.2f}x")
    print(f"  pypaimon single process      {pp:7.2f} s for {pp_rows:,} rows "
          f"({result['pypaimon_vs_keyed_per_row']:.1f}x lakesink's time per row)")
    return result
