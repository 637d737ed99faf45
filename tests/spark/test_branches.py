"""Paimon branches: create, write on both paths, read back (lakesink and pypaimon), fast-forward, delete."""

from __future__ import annotations

import os

import pytest
from pypaimon.table.file_store_table import FileStoreTable

import lakesink
from tests.helpers import PATHS, latest_snapshot_id, read_table, snapshots, write

pytestmark = pytest.mark.spark


def branch_ids(path: str, branch: str) -> list[int]:
    """The branch's rows read by pypaimon alone, the table opened with the option `branch`."""
    table = FileStoreTable.from_path(path).copy({"branch": branch})
    builder = table.new_read_builder()
    rows = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    return sorted(rows.column("id").to_pylist())


def main_ids(path: str) -> list[int]:
    return sorted(read_table(path).column("id").to_pylist())


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_branch_takes_writes_main_does_not_see_then_fast_forward(spark, table_path, path_kind):
    write(spark.range(0, 3), table_path, "fast")
    assert lakesink.branch.create(table_path, "audit") == 1
    assert lakesink.branch.list(table_path) == ["audit"]
    assert os.path.isdir(f"{table_path}/branch/branch-audit/snapshot")

    write(spark.range(10, 12), table_path, path_kind, branch="audit")
    assert main_ids(table_path) == [0, 1, 2]
    assert latest_snapshot_id(table_path) == 1
    assert branch_ids(table_path, "audit") == [0, 1, 2, 10, 11]
    read = lakesink.read(spark, table_path, branch="audit")
    assert sorted(r.id for r in read.collect()) == [0, 1, 2, 10, 11]
    assert sorted(r.id for r in lakesink.read(spark, table_path).collect()) == [0, 1, 2]

    assert lakesink.branch.fast_forward(table_path, "audit") == 2
    assert main_ids(table_path) == [0, 1, 2, 10, 11]
    write(spark.range(20, 21), table_path, "fast")  # main goes on from the branch's state
    assert main_ids(table_path) == [0, 1, 2, 10, 11, 20]

    lakesink.branch.delete(table_path, "audit")
    assert lakesink.branch.list(table_path) == []
    assert main_ids(table_path) == [0, 1, 2, 10, 11, 20]


def test_a_commit_identity_replayed_on_a_branch_is_found_on_that_branch(spark, table_path):
    write(spark.range(0, 2), table_path, "fast")
    lakesink.branch.create(table_path, "b1")
    df = spark.range(5, 7)
    first = lakesink.write(df, table_path, commit_user="job", commit_identifier=7, options={"branch": "b1"})
    again = lakesink.write(df, table_path, commit_user="job", commit_identifier=7, options={"branch": "b1"})
    assert not first.skipped_replay and again.skipped_replay
    assert branch_ids(table_path, "b1") == [0, 1, 5, 6]
    # The same identity on main is main's own: it commits there.
    on_main = lakesink.write(df, table_path, commit_user="job", commit_identifier=7)
    assert not on_main.skipped_replay
    assert main_ids(table_path) == [0, 1, 5, 6]


def test_create_from_a_tag_or_empty(spark, table_path):
    from lakesink.paimon.maintenance.tags import create_tag
    write(spark.range(0, 2), table_path, "fast")
    create_tag(table_path, "v1")
    write(spark.range(2, 4), table_path, "fast")
    assert lakesink.branch.create(table_path, "from_tag", from_tag="v1") == 1
    assert branch_ids(table_path, "from_tag") == [0, 1]
    write(spark.range(7, 8), table_path, "fast", branch="from_tag")
    # The branch's own tags and snapshots (the tag was copied into the branch)
    assert sorted(r.id for r in lakesink.read(spark, table_path, branch="from_tag", tag="v1").collect()) == [0, 1]
    assert sorted(r.id for r in lakesink.read(spark, table_path, branch="from_tag", snapshot=2).collect()) == [0, 1, 7]
    assert lakesink.branch.create(table_path, "from_snap", from_snapshot=2) == 2
    assert branch_ids(table_path, "from_snap") == [0, 1, 2, 3]
    assert lakesink.branch.create(table_path, "blank", empty=True) is None
    assert lakesink.read(spark, table_path, branch="blank").count() == 0


def test_a_missing_branch_is_a_clear_error_and_nothing_is_written(spark, table_path):
    write(spark.range(0, 2), table_path, "fast")
    before = sorted(os.listdir(table_path))
    for path_kind in PATHS:
        with pytest.raises(Exception, match="Branch 'nope' does not exist"):
            write(spark.range(5, 6), table_path, path_kind, branch="nope")
    with pytest.raises(lakesink.BranchNotFoundError, match="does not exist"):
        lakesink.read(spark, table_path, branch="nope")
    with pytest.raises(lakesink.BranchNotFoundError):
        lakesink.branch.fast_forward(table_path, "nope")
    with pytest.raises(lakesink.BranchNotFoundError):
        lakesink.branch.delete(table_path, "nope")
    with pytest.raises(lakesink.ConfigurationError, match="default branch"):
        lakesink.branch.create(table_path, "main")
    assert main_ids(table_path) == [0, 1] and latest_snapshot_id(table_path) == 1
    assert sorted(os.listdir(table_path)) == before


def named(spark, lo: int, hi: int, name: str):
    from pyspark.sql import functions as F
    return spark.range(lo, hi).withColumn("name", F.lit(name))


def by_key(table) -> dict:
    """{id: name} of a pypaimon table (main, or a branch through `copy({"branch": ...})`)."""
    builder = table.new_read_builder()
    rows = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    pairs = list(zip(rows.column("id").to_pylist(), rows.column("name").to_pylist()))
    assert len({k for k, _ in pairs}) == len(pairs), "a key was returned twice"
    return dict(sorted(pairs))


def spark_by_key(df) -> dict:
    rows = df.collect()
    assert len({r.id for r in rows}) == len(rows), "a key was returned twice"
    return dict(sorted((r.id, r.name) for r in rows))


@pytest.mark.parametrize("table_options", [
    pytest.param({"bucket": "2"}, id="fixed-bucket"),
    pytest.param({}, marks=pytest.mark.full, id="dynamic-bucket"),
    pytest.param({"bucket": "1", "deletion-vectors.enabled": "true"}, marks=pytest.mark.full, id="deletion-vectors"),
])
def test_a_keyed_table_written_on_a_branch_merges_there_and_main_is_unchanged_key_for_key(spark, table_path,
                                                                                          table_options):
    # Compaction after two sorted runs: the branch's writes compact the branch's buckets.
    lakesink.write(named(spark, 0, 10, "a"), table_path, primary_key=["id"],
                   options={**table_options, "num-sorted-run.compaction-trigger": "2"})
    lakesink.branch.create(table_path, "audit")
    write(named(spark, 5, 15, "b"), table_path, "fast", branch="audit")
    # Sequence numbers planned on the branch's snapshots: this write's versions win over the last.
    write(named(spark, 8, 12, "c"), table_path, "native", branch="audit")

    main_rows = {i: "a" for i in range(10)}
    branch_rows = {**main_rows, **{i: "b" for i in range(5, 15)}, **{i: "c" for i in range(8, 12)}}
    main = FileStoreTable.from_path(table_path)
    assert by_key(main) == main_rows
    assert [s.commit_kind for s in snapshots(table_path)] == ["APPEND"]
    branched = main.copy({"branch": "audit"})
    assert by_key(branched) == branch_rows
    if "deletion-vectors.enabled" not in table_options:  # (merged on write instead)
        assert "COMPACT" in [s.commit_kind for s in branched.snapshot_manager().list_snapshots()]
    assert spark_by_key(lakesink.read(spark, table_path, branch="audit")) == branch_rows
    assert spark_by_key(spark.read.format("paimon").option("branch", "audit").load(table_path)) == branch_rows
    assert spark_by_key(spark.read.format("paimon").load(table_path)) == main_rows

    lakesink.branch.fast_forward(table_path, "audit")
    assert by_key(FileStoreTable.from_path(table_path)) == branch_rows
    # Main goes on from the branch's state, its sequence numbers above the branch's.
    write(named(spark, 9, 10, "z"), table_path, "native")
    assert by_key(FileStoreTable.from_path(table_path)) == {**branch_rows, 9: "z"}


@pytest.mark.full
def test_a_postpone_bucket_branch_is_compacted_on_the_branch(spark, table_path):
    lakesink.write(named(spark, 0, 10, "a"), table_path, primary_key=["id"],
                   options={"bucket": "-2", "postpone.default-bucket-num": "2"})
    lakesink.compact(spark, table_path)
    lakesink.branch.create(table_path, "p")
    write(named(spark, 5, 12, "b"), table_path, "native", branch="p")
    main = FileStoreTable.from_path(table_path)
    main_rows = {i: "a" for i in range(10)}
    assert by_key(main.copy({"branch": "p"})) == main_rows  # waiting in the branch's postpone buckets
    lakesink.compact(spark, table_path, options={"branch": "p"})
    assert by_key(main.copy({"branch": "p"})) == {**main_rows, **{i: "b" for i in range(5, 12)}}
    assert by_key(main) == main_rows and [s.commit_kind for s in snapshots(table_path)] == ["APPEND", "COMPACT"]


@pytest.mark.parametrize("mode", ["fast", *(pytest.param(m, marks=pytest.mark.full)
                                          for m in ("native", "native-pipelined", "fast-pipelined"))])
def test_a_stream_into_a_branch_commits_each_micro_batch_there_once(spark, tmp_path, mode):
    from pathlib import Path

    from tests.crash.harness import make_source
    from tests.spark.test_streaming import commit_user_of, run, start

    source, table, chk = tmp_path / "source", str(tmp_path / "t"), str(tmp_path / "chk")
    old = spark.createDataFrame([(i, "old", i % 3) for i in range(15)], "id long, name string, grp int")
    lakesink.write(old, table, primary_key=["id"], options={"bucket": "2"})
    lakesink.branch.create(table, "s")
    make_source(source, files=2, rows_per_file=10)  # batch k: ids 10k .. 10k+9, named row-<id>
    run(spark, mode, source, table, chk, {"branch": "s"})

    main_rows = {i: "old" for i in range(15)}
    branch_rows = {i: f"row-{i}" for i in range(20)}
    main = FileStoreTable.from_path(table)
    branched = main.copy({"branch": "s"})
    assert by_key(main) == main_rows and by_key(branched) == branch_rows
    user = commit_user_of(chk)
    ours = [s for s in branched.snapshot_manager().list_snapshots() if s.commit_user == user]
    assert [s.commit_identifier for s in ours if s.commit_kind == "APPEND"] == [0, 1]
    assert os.listdir(f"{table}/branch/branch-s/_lakesink/commit-users")

    # The driver died after batch 1's snapshot, before Spark's commit log: Spark runs it again.
    commits = Path(chk, "commits")
    for name in ("1", ".1.crc"):
        (commits / name).unlink(missing_ok=True)
    before = len(branched.snapshot_manager().list_snapshots())
    run(spark, mode, source, table, chk, {"branch": "s"})
    assert (commits / "1").exists(), "Spark did not replay the batch"
    assert len(branched.snapshot_manager().list_snapshots()) == before, "the replay made a snapshot"
    assert by_key(branched) == branch_rows and by_key(main) == main_rows
    assert [s.commit_kind for s in snapshots(table)] == ["APPEND"]

    # The checkpoint belongs to the branch: pointed at main it refuses before anything is written.
    with pytest.raises(lakesink.CheckpointMismatchError, match=r"branch_s"):
        query = start(spark, "fast", source, table, chk)
        query.stop()


def stream_once(reader, checkpoint: str) -> list:
    """Everything `reader` (a streaming DataFrame) has now, through a query on `checkpoint`."""
    seen = []
    query = (reader.writeStream.foreachBatch(lambda df, _: seen.extend(df.collect()))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(120)
    if query.exception() is not None:
        raise query.exception()
    return seen


def test_a_stream_of_a_branch_follows_the_branch_commits_not_mains(spark, table_path, tmp_path):
    lakesink.write(spark.range(0, 3), table_path)
    lakesink.branch.create(table_path, "audit")
    lakesink.write(spark.range(10, 12), table_path, options={"branch": "audit"})
    lakesink.write(spark.range(100, 105), table_path)
    lakesink.write(spark.range(105, 110), table_path)  # main is at snapshot 3, the branch at 2
    chk = str(tmp_path / "chk")

    def ids(branch):
        reader = spark.readStream.format("paimon").option("scan.mode", "earliest")
        reader = reader.option("branch", branch) if branch else reader
        return sorted(r.id for r in stream_once(reader.load(table_path), chk))

    assert ids("audit") == [0, 1, 2, 10, 11]
    lakesink.write(spark.range(12, 14), table_path, options={"branch": "audit"})
    lakesink.write(spark.range(110, 112), table_path)
    assert ids("audit") == [12, 13]  # the restart goes on from the branch's snapshot 2
    assert ids("audit") == []
    # The checkpoint's offsets are the branch's snapshot ids: main's stream refuses them.
    with pytest.raises(Exception, match="checkpoint holds offsets of branch 'audit'"):
        ids(None)


@pytest.mark.full
def test_lakesink_read_stream_of_a_branch_starts_where_asked_on_the_branch(spark, table_path):
    from lakesink.spark.read import stream_options
    from lakesink.spark.stream_reader import PaimonStreamReader
    from tests.spark.test_read_stream import _read_all_available

    lakesink.write(spark.range(0, 3), table_path)
    lakesink.write(spark.range(3, 5), table_path)
    lakesink.branch.create(table_path, "b", from_snapshot=1)
    lakesink.write(spark.range(20, 22), table_path, options={"branch": "b"})  # branch snapshot 2
    lakesink.write(spark.range(22, 23), table_path, options={"branch": "b"})  # branch snapshot 3
    lakesink.write(spark.range(5, 9), table_path)
    lakesink.write(spark.range(9, 10), table_path)  # main is at snapshot 4
    schema = spark.read.format("paimon").load(table_path).schema

    def collected(starting):
        options = {**stream_options(starting), "branch": "b"}
        return _read_all_available(PaimonStreamReader(table_path, options, schema))

    assert collected("earliest") == collected("latest-full") == [0, 1, 2, 20, 21, 22]
    assert collected(2) == [20, 21, 22] and collected(3) == [22]
    assert collected("latest") == []
    with pytest.raises(lakesink.SnapshotNotFoundError, match=r"available snapshots are 1\.\.3"):
        collected(5)  # main's next snapshot; the branch's is 4
    with pytest.raises(lakesink.BranchNotFoundError):
        lakesink.read_stream(spark, table_path, branch="nope")
    with pytest.raises(lakesink.ConfigurationError, match="give one"):
        lakesink.read_stream(spark, table_path, branch="b", options={"branch": "b"})


@pytest.mark.full
def test_a_keyed_branch_streams_its_changelog_and_its_consumer_lives_on_the_branch(spark, table_path, tmp_path):
    import json

    lakesink.write(named(spark, 0, 5, "a"), table_path, primary_key=["id"], options={"bucket": "1"})
    lakesink.branch.create(table_path, "k")
    chk = str(tmp_path / "chk")

    def changes():
        sdf = lakesink.read_stream(spark, table_path, branch="k", consumer_id="c", starting="latest")
        return sorted((r.rowkind, r.id, r.name) for r in stream_once(sdf, chk))

    assert changes() == []
    lakesink.write(named(spark, 3, 6, "b"), table_path, options={"branch": "k"})
    lakesink.write(named(spark, 0, 2, "m"), table_path)  # main's update: not the branch's
    assert changes() == [("+I", 3, "b"), ("+I", 4, "b"), ("+I", 5, "b")]
    with open(f"{table_path}/branch/branch-k/consumer/consumer-c") as f:
        assert json.load(f) == {"nextSnapshot": 3}  # the branch's snapshots 1..2 read
    assert not os.path.exists(f"{table_path}/consumer")


def test_reads_that_cannot_read_a_branch_refuse_it_rather_than_read_main(spark, table_path):
    lakesink.write(spark.range(0, 2), table_path)
    lakesink.branch.create(table_path, "b")
    with pytest.raises(lakesink.ConfigurationError, match="CREATE / REPLACE TABLE AS"):
        lakesink.create_table_as(spark.range(0, 2), f"{table_path}-new", options={"branch": "b"})
    assert not os.path.exists(f"{table_path}-new")
