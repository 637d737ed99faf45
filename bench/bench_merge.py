"""Row-level changes: lakesink's MERGE and DELETE against delta-rs's on the same rows.

A table of `rows` rows (id, amount, status, dt over 10 days) and a change set of `changes` rows:
half update existing ids, a tenth delete existing ids (op = 'D'), the rest insert new ids. Timed,
interleaved, medians:
* MERGE ... WHEN MATCHED AND s.op = 'D' THEN DELETE WHEN MATCHED THEN UPDATE SET * WHEN NOT
  MATCHED THEN INSERT *: lakesink on a primary-key table (8 buckets; changes become +U/-D/+I
  rows) and on an append table (copy-on-write of the touched files); delta-rs's `merge` on a
  Delta table holding the same rows (its own process: `LAKESINK_DELTA_PYTHON`, which `./dev`
  points at `.venv-delta`, set up with `deltalake`);
* DELETE of 1% of the rows by a predicate on a non-key column, the same three ways (the changed
  and inserted rows' amounts lie outside it: lakesink's DELETE, after its MERGE, removes the same
  rows as delta-rs's on the base table, bar the few the MERGE deleted or updated).
Floors, Spark's own work without lakesink, timed in the same rounds: `spark rewrite` reads the
table's rows from Parquet and writes them again (the least a copy-on-write MERGE touching every
file does); `spark keyed merge` reads the table's ids and days, keeps the rows whose id the change
holds (streamed past the broadcast ids), joins them with the change and writes the result
clustered into 8 buckets and sorted by id (the least a MERGE into the primary-key table does:
no multiple-match check, counts, row kinds or commit).
Peak memory: the Spark JVM's peak resident set (VmHWM, over the whole run) and delta-rs's
process's peak (ru_maxrss).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import lakesink

DELTA_PYTHON = os.environ.get("LAKESINK_DELTA_PYTHON", ".venv-delta/bin/python")

_DELTA = r'''
import json, resource, sys, time
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

spec = json.load(open(sys.argv[1]))
write_deltalake(spec["table"], pq.read_table(spec["base"]))
dt = DeltaTable(spec["table"])
start = time.perf_counter()
if spec["op"] == "merge":
    (dt.merge(source=pq.read_table(spec["changes"]), predicate="t.id = s.id", source_alias="s", target_alias="t")
       .when_matched_delete(predicate="s.op = 'D'")
       .when_matched_update(updates={"amount": "s.amount", "status": "s.status", "dt": "s.dt"})
       .when_not_matched_insert(updates={"id": "s.id", "amount": "s.amount", "status": "s.status", "dt": "s.dt"})
       .execute())
else:
    dt.delete(spec["where"])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def _base(spark, rows: int):
    return spark.range(rows, numPartitions=4).selectExpr(
        "id", "cast(id * 7 % 100000 as bigint) as amount", "concat('s', cast(id % 5 as string)) as status",
        "concat('2026-11-', lpad(cast(id % 10 + 1 as string), 2, '0')) as dt")


def _changes(spark, rows: int, changes: int):
    updates, deletes = changes // 2, changes // 10
    inserts = changes - updates - deletes
    step = max(1, rows // (updates + deletes))
    return spark.range(updates + deletes + inserts, numPartitions=4).selectExpr(
        f"case when id < {updates + deletes} then id * {step} else {rows} + id end as id",
        "cast(100000 + id % 997 as bigint) as amount",  # outside the DELETE's predicate: it removes 1% on every side
        f"case when id >= {updates} and id < {updates + deletes} then 'D' else 'U' end as op",
        "'changed' as status", "concat('2026-11-', lpad(cast(id % 10 + 1 as string), 2, '0')) as dt")


def _lakesink_merge(spark, path: str, changes) -> float:
    start = time.perf_counter()
    (lakesink.merge(spark, path, changes, on="t.id = s.id")
        .when_matched_delete(condition="s.op = 'D'")
        .when_matched_update(set={"amount": "s.amount", "status": "s.status"})
        .when_not_matched_insert(values={"id": "s.id", "amount": "s.amount", "status": "s.status", "dt": "s.dt"})
        .execute())
    return time.perf_counter() - start


def _floors(spark, base_df, change_df, root: str) -> dict[str, float]:
    """Spark's own writes of what the MERGEs must at least write (no reading, joining or commit)."""
    out = {}
    start = time.perf_counter()
    base_df.write.parquet(f"{root}/rewrite")
    out["spark rewrite"] = time.perf_counter() - start
    from pyspark.sql import functions as F
    start = time.perf_counter()
    matched = base_df.select("id", "dt").join(F.broadcast(change_df.select("id")), "id", "left_semi")
    merged = change_df.alias("s").join(matched.alias("t"), "id", "left_outer").selectExpr(
        "id", "s.amount", "s.status", "coalesce(t.dt, s.dt) AS dt", "s.op")
    merged.repartition(8, "id").sortWithinPartitions("id").write.parquet(f"{root}/keyed")
    out["spark keyed merge"] = time.perf_counter() - start
    return out


def _delta(root: str, op: str, i: int, **spec) -> dict | None:
    if not os.path.exists(DELTA_PYTHON):
        return None
    script = f"{root}/delta.py"
    with open(script, "w") as f:
        f.write(_DELTA)
    spec_path = f"{root}/spec-{op}-{i}.json"
    with open(spec_path, "w") as f:
        json.dump({"op": op, "table": f"{root}/delta-{op}-{i}", **spec}, f)
    out = subprocess.run([DELTA_PYTHON, script, spec_path], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _jvm_peak_mb(spark) -> float | None:
    try:
        pid = spark.sparkContext._gateway.proc.pid
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM"))
    except Exception:  # noqa: BLE001 - Connect, or no /proc: not reported
        return None


def run(spark, rows: int = 10_000_000, changes: int = 1_000_000, repeats: int = 3) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-merge-")
    base, delta_changes = f"{root}/base.parquet", f"{root}/changes.parquet"
    _base(spark, rows).coalesce(1).write.parquet(base)
    change_df = _changes(spark, rows, changes).cache()
    change_df.count()
    change_df.select("id", "amount", "op", "status", "dt").coalesce(1).write.parquet(delta_changes)
    where = "amount < 1000"  # 1% of the rows
    times: dict[str, list[float]] = {k: [] for k in (
        "merge keyed", "merge append", "merge delta-rs", "delete keyed", "delete append", "delete delta-rs",
        "spark rewrite", "spark keyed merge")}
    delta_rss: list[float] = []
    try:
        for i in range(repeats + 1):  # round 0 warms up (the JVM's JIT): not counted
            base_df = spark.read.parquet(base)
            keyed, append = f"{root}/wh/db.db/k{i}", f"{root}/wh/db.db/a{i}"
            lakesink.write(base_df, keyed, primary_key=["id"], options={"bucket": "8"})
            lakesink.write(base_df, append, partition_by=["dt"])
            for name, floor in _floors(spark, base_df, change_df, f"{root}/wh/floor").items():
                times[name].append(floor)
            times["merge keyed"].append(_lakesink_merge(spark, keyed, change_df))
            times["merge append"].append(_lakesink_merge(spark, append, change_df))
            for name, path in (("delete keyed", keyed), ("delete append", append)):
                start = time.perf_counter()
                lakesink.delete(spark, path, where=where)
                times[name].append(time.perf_counter() - start)
            for op, extra in (("merge", {"changes": delta_changes}), ("delete", {"where": where})):
                result = _delta(root, op, i, base=f"{base}", **extra)
                if result is not None:
                    times[f"{op} delta-rs"].append(result["seconds"])
                    delta_rss.append(result["maxrss_mb"])
            shutil.rmtree(f"{root}/wh", ignore_errors=True)
    finally:
        change_df.unpersist()
        shutil.rmtree(root, ignore_errors=True)
    medians = {k: statistics.median(v[1:]) for k, v in times.items() if len(v) > 1}
    out = {"rows": rows, "changes": changes, "seconds": medians,
           "jvm_peak_rss_mb": _jvm_peak_mb(spark),
           "delta_rs_peak_rss_mb": max(delta_rss) if delta_rss else None}
    print(f"[merge] {rows:,} rows, {changes:,} changes; medians of {repeats}:")
    for op in ("merge", "delete"):
        ref = medians.get(f"{op} delta-rs")
        for kind in ("keyed", "append", "delta-rs"):
            seconds = medians.get(f"{op} {kind}")
            if seconds is None:
                print(f"  {op} {kind}: not run (no {DELTA_PYTHON} with deltalake)")
                continue
            ratio = f"  ({seconds / ref:.2f}x delta-rs)" if ref and kind != "delta-rs" else ""
            print(f"  {op} {kind}: {seconds:.2f} s{ratio}")
    ref = medians.get("merge delta-rs")
    for name in ("spark rewrite", "spark keyed merge"):
        ratio = f"  ({medians[name] / ref:.2f}x delta-rs's MERGE)" if ref else ""
        print(f"  floor, {name}: {medians[name]:.2f} s{ratio}")
    print(f"  peak RSS: Spark JVM {out['jvm_peak_rss_mb']} MB (whole run), delta-rs {out['delta_rs_peak_rss_mb']} MB")
    return out
