"""Compaction on Spark: `lakesink.compact`, the batch aggregator, and a streaming query with
repeated compactions on the same table, all read back row for row with pypaimon."""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink.errors import ConfigurationError, TableNotFoundError
from lakesink.paimon.compaction.target import live_files
from lakesink.paimon.table.tables import open_table
from tests.helpers import leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark


def small_writes(spark, path, writes=6, rows=30, days=2):
    ids = []
    for w in range(writes):
        batch = [(w * 1000 + i, i % days, f"payload-{w}-{i}") for i in range(rows)]
        df = spark.createDataFrame(batch, "id long, day int, payload string").repartition(2)
        lakesink.write(df, path, partition_by=["day"])
        ids += [r[0] for r in batch]
    return sorted(ids)


def ids_of(path, snapshot_id=None):
    return sorted(read_table(path, snapshot_id).column("id").to_pylist())


def test_compact_rewrites_small_files_into_one_compact_snapshot(spark, table_path):
    expected = small_writes(spark, table_path)
    before = len(live_files(open_table(table_path)))
    seen = []

    report = lakesink.compact(spark, table_path, progress=lambda done, total: seen.append((done, total)))

    after = live_files(open_table(table_path))
    assert ids_of(table_path) == expected
    assert len(after) == 2 and before >= 12  # one file per day partition
    latest = snapshots(table_path)[-1]
    assert latest.commit_kind == "COMPACT" and latest.id == report.snapshot_id
    assert report.files_removed == before and report.files_added == 2
    assert seen and seen[-1] == (2, 2)
    assert leftover_files(table_path) == set()
    assert lakesink.compact(spark, table_path, progress=False).snapshot_id is None  # nothing small left


def test_compact_of_one_partition_leaves_the_others_alone(spark, table_path):
    expected = small_writes(spark, table_path)
    lakesink.compact(spark, table_path, partitions=[{"day": "1"}], progress=False)
    per_day = Counter(f.partition for f in live_files(open_table(table_path)))
    assert per_day[(1,)] == 1 and per_day[(0,)] >= 6
    assert ids_of(table_path) == expected


def test_compact_rebases_when_another_compaction_took_some_of_its_files(spark, table_path):
    expected = small_writes(spark, table_path)

    def meanwhile(done, total):
        if done == total:  # rewrites finished, commit not yet made: someone compacts day 0 first
            lakesink.compact(None, table_path, partitions=[{"day": 0}], progress=False)

    report = lakesink.compact(spark, table_path, progress=meanwhile)

    assert report.extra["conflicts"] == 1
    assert report.files_added == 1  # only day 1's rewrite was still valid
    kinds = [s.commit_kind for s in snapshots(table_path)[-2:]]
    assert kinds == ["COMPACT", "COMPACT"]
    assert ids_of(table_path) == expected
    assert len(live_files(open_table(table_path))) == 2
    assert leftover_files(table_path) == set()


def test_compact_refuses_bad_arguments_and_changes_nothing(spark, table_path):
    small_writes(spark, table_path, writes=2)
    latest = snapshots(table_path)[-1].id
    with pytest.raises(ConfigurationError, match="exactly the partition columns"):
        lakesink.compact(spark, table_path, partitions=[{"dt": "x"}])
    with pytest.raises(ConfigurationError, match="not a size"):
        lakesink.compact(spark, table_path, target_size="lots")
    with pytest.raises(TableNotFoundError, match="does not exist"):
        lakesink.compact(spark, table_path + "-missing")
    assert snapshots(table_path)[-1].id == latest


def test_a_batch_write_with_the_aggregator_commits_its_small_files_then_one_compact_snapshot(spark, table_path):
    rows = [(i, i % 2, f"p{i}") for i in range(200)]
    df = spark.createDataFrame(rows, "id long, day int, payload string").repartition(8)
    df.write.format("paimon").mode("append").option("partition", "day").option("aggregator.enabled", "true").save(table_path)

    kinds = [s.commit_kind for s in snapshots(table_path)]
    assert kinds == ["APPEND", "COMPACT"]
    assert ids_of(table_path) == list(range(200))
    assert len(ids_of(table_path, 1)) == 200  # the append alone already held every row
    assert len(live_files(open_table(table_path))) == 2
    assert leftover_files(table_path) == set()


def test_a_streaming_query_and_repeated_compactions_on_one_table_keep_every_row_once(spark, tmp_path):
    source, table = tmp_path / "source", str(tmp_path / "wh" / "db.db" / "t")
    source.mkdir()
    schema = pa.schema([("id", pa.int64()), ("day", pa.int32()), ("payload", pa.string())])
    batches, rows = 10, 60
    for b in range(batches):
        ids = list(range(b * rows, (b + 1) * rows))
        pq.write_table(pa.table({"id": ids, "day": pa.array([b // 4] * rows, pa.int32()),
                                 "payload": [f"r{i}" for i in ids]}, schema=schema), source / f"{b:03d}.parquet")
    # Three small files before the stream starts: the first compaction always has work, whether or
    # not the stream's own aggregator reaches the later ones first.
    seeded = list(range(batches * rows, batches * rows + 30))
    lakesink.write(spark.createDataFrame([(i, 0, f"s{i}") for i in seeded], "id long, day int, payload string")
                   .repartition(3), table, partition_by=["day"])
    sdf = (spark.readStream.schema("id long, day int, payload string").option("maxFilesPerTrigger", 1)
           .parquet(str(source)).repartition(3))
    query = lakesink.stream(sdf, table, checkpoint=str(tmp_path / "chk"), trigger="availableNow",
                            options={"aggregator.enabled": "true", "target-file-size": "8kb"},
                            partition_by=["day"])
    stop, reports, errors = threading.Event(), [], []

    def compact_repeatedly():
        while not stop.is_set():
            try:
                if open_table(table) is not None and snapshots(table):
                    reports.append(lakesink.compact(spark, table, target_size="8kb", progress=False))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            stop.wait(0.5)

    compactor = threading.Thread(target=compact_repeatedly, daemon=True)
    compactor.start()
    try:
        assert query.awaitTermination(240)
    finally:
        stop.set()
        compactor.join(120)
    assert query.exception() is None
    reports.append(lakesink.compact(spark, table, target_size="8kb", progress=False))

    ids = read_table(table).column("id").to_pylist()
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert sorted(ids) == list(range(batches * rows)) + seeded
    assert not errors, errors
    assert any(r.snapshot_id for r in reports)
    users = Counter(s.commit_user.split("-")[1] for s in snapshots(table) if s.commit_kind == "COMPACT")
    assert users["compact"] >= 1
    assert leftover_files(table) == set()


# ./dev full: the aggregator on a pipelined format("paimon") stream (the default run kills the aggregator's steps pipelined, tests/unit/test_aggregator.py)
@pytest.mark.full
def test_the_aggregator_works_on_a_pipelined_format_paimon_stream(spark, tmp_path):
    """Its batches are committed by the checkpoint's committer process, which also aggregates."""
    source, table, chk = tmp_path / "source", str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "chk")
    source.mkdir()
    schema = pa.schema([("id", pa.int64()), ("day", pa.int32()), ("payload", pa.string())])
    batches, rows = 6, 40
    for b in range(batches):
        ids = list(range(b * rows, (b + 1) * rows))
        pq.write_table(pa.table({"id": ids, "day": pa.array([0] * rows, pa.int32()),
                                 "payload": [f"r{i}" for i in ids]}, schema=schema), source / f"{b:03d}.parquet")
    sdf = (spark.readStream.schema("id long, day int, payload string").option("maxFilesPerTrigger", 1)
           .parquet(str(source)).repartition(2))
    query = (sdf.writeStream.format("paimon").option("checkpointLocation", chk).option("partition", "day")
             .option("commit.mode", "pipelined").option("aggregator.enabled", "true")
             .option("target-file-size", "8kb").option("compaction.min.file-num", "3")
             .trigger(availableNow=True).start(table))
    assert query.awaitTermination(240)
    assert query.exception() is None
    lakesink.await_commits(chk)

    ids = read_table(table).column("id").to_pylist()
    assert sorted(ids) == list(range(batches * rows))
    kinds = Counter(s.commit_kind for s in snapshots(table))
    assert kinds["APPEND"] == batches and kinds["COMPACT"] >= 1, kinds
    assert len(live_files(open_table(table))) < 2 * batches
    assert leftover_files(table) == set()


def test_repeated_small_batch_jobs_with_the_aggregator_keep_the_file_count_bounded(spark, table_path):
    """Each job writes 4 small files per run; the aggregator also merges what earlier jobs left."""
    jobs, ids = 12, []
    for j in range(jobs):
        rows = [(j * 100 + i, i % 2, f"p{j}-{i}") for i in range(40)]
        df = spark.createDataFrame(rows, "id long, day int, payload string").repartition(2)
        lakesink.write(df, table_path, partition_by=["day"],
                       options={"aggregator.enabled": "true", "compaction.min.file-num": "5"})
        ids += [r[0] for r in rows]
    assert ids_of(table_path) == sorted(ids)
    live = live_files(open_table(table_path))
    per_day = Counter(f.partition for f in live)
    # Without merging earlier jobs' files each day would hold 2 files per job (24).
    assert all(n < 5 for n in per_day.values()), per_day
    assert any(s.commit_kind == "COMPACT" for s in snapshots(table_path))
    assert leftover_files(table_path) == set()
