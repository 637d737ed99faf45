"""Compaction of primary-key tables on Spark: automatic after batch writes and micro-batches,
`lakesink.compact` on the executors, beside a running writer; read back with pypaimon."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink.paimon.compaction.target import live_files
from lakesink.paimon.table.tables import open_table
from tests.helpers import leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark

SCHEMA = "id long, v string, op string"
TRIGGER = 2  # num-sorted-run.compaction-trigger: a bucket with 3 sorted runs is compacted


def by_id(path, snapshot_id=None):
    rows = read_table(path, snapshot_id).to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a key was returned twice"
    return {r["id"]: r["v"] for r in rows}


def cdc_batches(count, keys=40, seed=3):
    """Batches of upserts and deletes (op: +I, +U, -D) and the state after each one."""
    rng = random.Random(seed)
    state, out = {}, []
    for b in range(count):
        rows = []
        for k in rng.sample(range(keys), 12):
            if k in state and rng.random() < 0.35:
                rows.append((k, None, "-D"))
                state.pop(k)
            else:
                rows.append((k, f"b{b}-{k}", "+U" if k in state else "+I"))
                state[k] = f"b{b}-{k}"
        out.append((rows, dict(state)))
    return out


def runs_per_bucket(path):
    """Sorted runs of each bucket: one per level-0 file, one per non-empty level above."""
    files = {}
    for f in live_files(open_table(path)):
        files.setdefault((f.partition, f.bucket), []).append(f.meta.level)
    return {k: levels.count(0) + len(set(levels) - {0}) for k, levels in files.items()}


def assert_compactions_change_no_row(path):
    """Every COMPACT snapshot reads exactly as the snapshot before it."""
    snaps = snapshots(path)
    compacts = [s for s in snaps if s.commit_kind == "COMPACT"]
    for s in compacts:
        assert by_id(path, s.id) == by_id(path, s.id - 1), s.id
    return compacts


def test_batch_writes_compact_buckets_whose_sorted_runs_pass_the_trigger(spark, table_path):
    opts = {"bucket": "2", "rowkind.field": "op", "num-sorted-run.compaction-trigger": str(TRIGGER)}
    for rows, state in cdc_batches(5):
        lakesink.write(spark.createDataFrame(rows, SCHEMA).coalesce(1), table_path, primary_key=["id"],
                       options=opts)
        assert by_id(table_path) == state
        assert max(runs_per_bucket(table_path).values()) <= TRIGGER
    compacts = assert_compactions_change_no_row(table_path)
    assert len(compacts) >= 2 and all(s.commit_user.endswith(".compact") for s in compacts)
    assert {f.meta.level for f in live_files(open_table(table_path))} <= {0, TRIGGER}  # num-levels = trigger + 1
    assert leftover_files(table_path) == set()


def test_a_cdc_stream_compacts_after_its_micro_batches(spark, tmp_path, table_path):
    source = tmp_path / "source"
    source.mkdir()
    batches = cdc_batches(6, seed=5)
    for i, (rows, _) in enumerate(batches):
        part = source / f"part-{i:03d}.parquet"
        pq.write_table(pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "v": [r[1] for r in rows],
                                 "op": [r[2] for r in rows]}), part)
        os.utime(part, (1_000_000 + i, 1_000_000 + i))  # Spark takes files in modification-time order
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    query = lakesink.stream(df, table_path, checkpoint=str(tmp_path / "chk"), trigger="availableNow",
                            options={"primary-key": "id", "bucket": "2", "rowkind.field": "op",
                                     "num-sorted-run.compaction-trigger": str(TRIGGER)})
    query.awaitTermination()
    assert query.exception() is None
    assert by_id(table_path) == batches[-1][1]  # merged on read, whatever the rounds have done
    # Rounds trail the commits on the driver's thread (Paimon's writers compact while the next
    # checkpoint arrives): await_commits waits for the last one.
    lakesink.await_commits(str(tmp_path / "chk"))
    rounds = [r.extra["aggregation"] for r in query.lakesink_sink.reports if "aggregation" in r.extra]
    assert len(rounds) == 6 and any(r.snapshot_id for r in rounds) and not any(r.error for r in rounds)
    assert max(runs_per_bucket(table_path).values()) <= TRIGGER
    compacts = assert_compactions_change_no_row(table_path)
    appends = [s for s in snapshots(table_path) if s.commit_kind == "APPEND"]
    assert len(appends) == 6 and compacts
    assert {s.commit_user for s in compacts} == {appends[0].commit_user + ".compact"}
    assert list((tmp_path / "chk" / "lakesink").glob("aggregator-*.json"))  # the coordinator's state
    assert leftover_files(table_path) == set()


def test_compact_job_on_executors_makes_first_row_partitions_readable(spark, table_path):
    schema = "id long, v string, dt string"
    opts = {"bucket": "2", "merge-engine": "first-row", "write-only": "true"}
    lakesink.write(spark.createDataFrame([(1, "first", "a"), (2, "x", "a"), (1, "first-b", "b")], schema)
                   .coalesce(1), table_path, primary_key=["id", "dt"], partition_by=["dt"], options=opts)
    lakesink.write(spark.createDataFrame([(1, "second", "a"), (3, "y", "a"), (3, "y-b", "b")], schema),
                   table_path)
    assert {f.meta.level for f in live_files(open_table(table_path))} == {0}   # write-only: no compaction
    assert read_table(table_path).num_rows == 0   # Paimon readers skip level 0 of first-row tables

    seen = []
    report = lakesink.compact(spark, table_path, partitions=[{"dt": "a"}],
                              progress=lambda done, total: seen.append((done, total)))
    rows = sorted((r["dt"], r["id"], r["v"]) for r in read_table(table_path).to_pylist())
    assert rows == [("a", 1, "first"), ("a", 2, "x"), ("a", 3, "y")]   # partition b still level 0
    assert report.extra["buckets"] >= 1 and seen[-1][0] == seen[-1][1]

    lakesink.compact(spark, table_path, progress=False)
    rows = sorted((r["dt"], r["id"], r["v"]) for r in read_table(table_path).to_pylist())
    assert rows == [("a", 1, "first"), ("a", 2, "x"), ("a", 3, "y"), ("b", 1, "first-b"), ("b", 3, "y-b")]
    assert leftover_files(table_path) == set()


def test_a_write_planned_before_a_compaction_of_its_buckets_commits_after_it(spark, table_path, monkeypatch):
    """Compaction keeps sequence numbers: an append planned before it still overtakes what it
    wrote, so pypaimon's one-writer-per-bucket check lets COMPACT snapshots pass (not appends)."""
    import lakesink.spark.keyed_write as keyed_write
    opts = {"bucket": "1", "write-only": "true"}
    for v in ("v1", "v2"):
        lakesink.write(spark.createDataFrame([(i, f"{v}-{i}", "+I") for i in range(10)], SCHEMA), table_path,
                       primary_key=["id"], options=opts)
    listed = keyed_write.list_parquet_files

    def a_compaction_lands_first(*args, **kwargs):
        lakesink.compact(None, table_path, progress=False)
        return listed(*args, **kwargs)

    monkeypatch.setattr(keyed_write, "list_parquet_files", a_compaction_lands_first)
    lakesink.write(spark.createDataFrame([(3, "mine", "+I")], SCHEMA), table_path)
    assert [s.commit_kind for s in snapshots(table_path)][-2:] == ["COMPACT", "APPEND"]
    got = by_id(table_path)
    assert got[3] == "mine" and got[4] == "v2-4" and len(got) == 10
