"""Batch writes on both paths: one snapshot per job, invisibility, overwrite, SQL, idempotence, stats."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
import json
import os
import time

import pytest

import lakesink
from tests.helpers import PATHS, write, latest_snapshot_id, leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark




def ids(path: str) -> list[int]:
    return sorted(read_table(path).column("id").to_pylist())


def rows(path: str) -> list[tuple]:
    return sorted((r["id"], r["p"]) for r in read_table(path).to_pylist())


def no_staging_left(path: str) -> bool:
    staging = os.path.join(path, "_lakesink", "staging")
    return not os.path.exists(staging) or os.listdir(staging) == []


@pytest.mark.parametrize("path_kind", PATHS)
def test_each_job_is_one_snapshot_however_many_files_it_writes(spark, table_path, path_kind):
    df = spark.range(0, 400, 1, 4).selectExpr("id", "cast(id % 3 as string) as p")
    write(df, table_path, path_kind, partition="p")
    write(df, table_path, path_kind)
    snaps = snapshots(table_path)
    assert [s.id for s in snaps] == [1, 2]
    assert [s.commit_kind for s in snaps] == ["APPEND", "APPEND"]
    assert len(read_table(table_path, snapshot_id=1)) == 400
    assert ids(table_path) == sorted(list(range(400)) * 2)
    assert leftover_files(table_path) == set() and no_staging_left(table_path)


def _watch_while_writing(path: str, report: str):
    """mapInArrow body: partition 1 waits until a file the table does not reference exists,
    then records what a pypaimon reader sees at that moment (the job is not committed)."""
    def watch(batches):
        from pyspark import TaskContext

        from tests.helpers import data_files_on_disk, read_table as read_back, referenced_data_files
        if TaskContext.get().partitionId() == 1:
            # Relative to what the table references, not to what was on disk when this task
            # started: the other task may have finished writing before this one began.
            committed = referenced_data_files(path)
            deadline = time.time() + 60
            while time.time() < deadline and len(data_files_on_disk(path) - committed) == 0:
                time.sleep(0.05)
            uncommitted = sorted(data_files_on_disk(path) - committed)
            with open(report, "w") as out:
                json.dump({"uncommitted": uncommitted, "rows_seen": read_back(path).num_rows}, out)
        yield from batches
    return watch


@pytest.mark.parametrize("path_kind", PATHS)
def test_readers_never_see_files_of_a_job_that_has_not_committed(spark, table_path, tmp_path, path_kind):
    write(spark.range(10), table_path, path_kind)
    report = str(tmp_path / "seen.json")
    # Partition 0 is large enough to be written while partition 1 watches.
    df = spark.range(0, 20000, 1, 2).mapInArrow(_watch_while_writing(table_path, report), "id long")
    write(df, table_path, path_kind)
    seen = json.loads(open(report).read())
    assert seen["uncommitted"], "the watcher saw no file of the running job"
    assert seen["rows_seen"] == 10
    assert len(ids(table_path)) == 20010
    assert leftover_files(table_path) == set()


# -- overwrite ---------------------------------------------------------------

@pytest.mark.parametrize("path_kind", PATHS)
def test_overwrite_replaces_the_whole_table_in_one_snapshot(spark, table_path, path_kind):
    write(spark.range(6).selectExpr("id", "cast(id % 2 as string) as p"), table_path, path_kind, partition="p")
    write(spark.range(100, 103).selectExpr("id", "'1' as p"), table_path, path_kind, mode="overwrite",
          partitionOverwriteMode="static")
    assert rows(table_path) == [(100, "1"), (101, "1"), (102, "1")]
    assert [s.commit_kind for s in snapshots(table_path)] == ["APPEND", "OVERWRITE"]
    assert len(read_table(table_path, snapshot_id=1)) == 6  # time travel still sees the old data


@pytest.mark.parametrize("path_kind", PATHS)
def test_dynamic_partition_overwrite_replaces_only_the_partitions_written(spark, table_path, path_kind):
    first = spark.createDataFrame([(1, "a"), (2, "b"), (3, "b")], "id long, p string")
    write(first, table_path, path_kind, partition="p")
    second = spark.createDataFrame([(10, "b"), (20, "c")], "id long, p string")
    write(second, table_path, path_kind, mode="overwrite", partitionOverwriteMode="dynamic")
    assert rows(table_path) == [(1, "a"), (10, "b"), (20, "c")]
    assert snapshots(table_path)[-1].commit_kind == "OVERWRITE"
    assert leftover_files(table_path) == set()


@pytest.mark.parametrize("path_kind", PATHS)
def test_an_overwrite_with_no_rows_empties_the_table(spark, table_path, path_kind):
    write(spark.range(5).selectExpr("id", "'x' as p"), table_path, path_kind)
    write(spark.range(0).selectExpr("id", "'x' as p"), table_path, path_kind, mode="overwrite")
    assert read_table(table_path).num_rows == 0
    assert len(snapshots(table_path)) == 2


def test_the_fast_path_follows_the_sessions_partition_overwrite_mode(spark, table_path):
    lakesink.write(spark.createDataFrame([(1, "a"), (2, "b")], "id long, p string"), table_path, partition_by=["p"])
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        lakesink.write(spark.createDataFrame([(5, "b")], "id long, p string"), table_path, mode="overwrite")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    assert rows(table_path) == [(1, "a"), (5, "b")]  # partition a kept: the session said dynamic
    lakesink.write(spark.createDataFrame([(7, "c")], "id long, p string"), table_path, mode="overwrite")
    assert rows(table_path) == [(7, "c")]  # Spark's default: static, the whole table


def test_a_native_overwrite_of_a_partitioned_table_must_say_static_or_dynamic(spark, table_path):
    lakesink.write(spark.createDataFrame([(1, "a"), (2, "b")], "id long, p string"), table_path, partition_by=["p"])
    before = snapshots(table_path)
    with pytest.raises(Exception, match="partitionOverwriteMode"):
        spark.createDataFrame([(5, "b")], "id long, p string").write.format("paimon").mode("overwrite").save(table_path)
    assert rows(table_path) == [(1, "a"), (2, "b")] and len(snapshots(table_path)) == len(before)
    assert leftover_files(table_path) == set()


def test_partition_by_on_a_native_writer_is_refused_by_spark_and_the_partition_option_works(spark, table_path):
    # Spark 4.3 compares .partitionBy() with a Python data source's (empty) partitioning and
    # refuses the write before it reaches lakesink: the documented way is the option.
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, p string")
    with pytest.raises(Exception, match="partitioning"):
        df.write.format("paimon").mode("append").partitionBy("p").save(table_path)
    assert not os.path.exists(os.path.join(table_path, "snapshot"))
    df.write.format("paimon").mode("append").option("partition", "p").save(table_path)
    from pypaimon.table.file_store_table import FileStoreTable
    assert FileStoreTable.from_path(table_path).partition_keys == ["p"]
    assert rows(table_path) == [(1, "a"), (2, "b")]


# -- SQL ---------------------------------------------------------------------

def test_sql_insert_into_and_insert_overwrite_through_a_temporary_view_using_paimon(spark, table_path):
    lakesink.write(spark.createDataFrame([(1, "a")], "id long, p string"), table_path, partition_by=["p"])
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW sql_t USING paimon "
              f"OPTIONS (path '{table_path}', partitionOverwriteMode 'static')")
    spark.sql("INSERT INTO sql_t VALUES (2, 'a'), (3, 'b')")
    assert rows(table_path) == [(1, "a"), (2, "a"), (3, "b")]
    spark.sql("INSERT OVERWRITE sql_t SELECT 9, 'c'")
    assert rows(table_path) == [(9, "c")]
    assert [s.commit_kind for s in snapshots(table_path)] == ["APPEND", "APPEND", "OVERWRITE"]


def test_sql_dynamic_insert_overwrite_through_a_view_with_the_option(spark, table_path):
    lakesink.write(spark.createDataFrame([(1, "a"), (2, "b")], "id long, p string"), table_path, partition_by=["p"])
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW sql_dyn USING paimon "
              f"OPTIONS (path '{table_path}', partitionOverwriteMode 'dynamic')")
    spark.sql("INSERT OVERWRITE sql_dyn SELECT 5, 'b'")
    assert rows(table_path) == [(1, "a"), (5, "b")]


def test_sql_insert_into_a_view_of_spark_read_format_paimon(spark, table_path):
    lakesink.write(spark.createDataFrame([(1, "a")], "id long, p string"), table_path)
    spark.read.format("paimon").load(table_path).createOrReplaceTempView("sql_read_view")
    spark.sql("INSERT INTO sql_read_view SELECT id + 1, p FROM sql_read_view")
    assert rows(table_path) == [(1, "a"), (2, "a")]


def test_a_persistent_sql_table_using_paimon_fails_clearly_and_writes_nothing(spark, table_path):
    # Spark 4.3 passes neither LOCATION nor OPTIONS of a catalog table to a Python
    # data source: the writer cannot know the path, and says what to use instead.
    lakesink.write(spark.createDataFrame([(1, "a")], "id long, p string"), table_path)
    spark.sql("DROP TABLE IF EXISTS sql_persistent")
    spark.sql(f"CREATE TABLE sql_persistent (id BIGINT, p STRING) USING paimon LOCATION '{table_path}'")
    try:
        with pytest.raises(Exception, match="TEMPORARY VIEW"):
            spark.sql("INSERT INTO sql_persistent VALUES (2, 'b')")
    finally:
        spark.sql("DROP TABLE IF EXISTS sql_persistent")
    assert rows(table_path) == [(1, "a")] and latest_snapshot_id(table_path) == 1


# -- idempotent re-runs --------------------------------------------------------

@pytest.mark.parametrize("path_kind", PATHS)
def test_rerunning_a_committed_job_with_the_same_identity_commits_nothing_and_leaves_no_files(
        spark, table_path, path_kind):
    df = spark.range(0, 50, 1, 2).selectExpr("id", "cast(id % 2 as string) as p")
    identity = {"commit.user": "nightly", "commit.identifier": "7"}
    write(df, table_path, path_kind, partition="p", **identity)
    on_disk = set(leftover_files(table_path)) | set(os.listdir(table_path))
    write(df, table_path, path_kind, **identity)
    write(df, table_path, path_kind, **{"commit.user": "nightly", "commit.identifier": "6"})  # older run
    assert [(s.commit_user, s.commit_identifier) for s in snapshots(table_path)] == [("nightly", 7)]
    assert ids(table_path) == list(range(50))
    assert leftover_files(table_path) == set() and no_staging_left(table_path)
    assert set(os.listdir(table_path)) <= on_disk
    write(df, table_path, path_kind, **{"commit.user": "nightly", "commit.identifier": "8"})
    assert [s.commit_identifier for s in snapshots(table_path)] == [7, 8]


def test_the_fast_path_reports_a_skipped_rerun(spark, table_path):
    df = spark.range(3)
    first = lakesink.write(df, table_path, commit_user="job", commit_identifier=1)
    again = lakesink.write(df, table_path, commit_user="job", commit_identifier=1)
    assert first.committed and first.snapshot_id == 1
    assert again.skipped_replay and not again.committed
    assert latest_snapshot_id(table_path) == 1


def test_jobs_without_an_identity_always_commit_and_leave_no_markers(spark, table_path):
    lakesink.write(spark.range(3), table_path)
    spark.range(3).write.format("paimon").mode("append").save(table_path)
    assert len(snapshots(table_path)) == 2
    markers = os.path.join(table_path, "_lakesink", "commit-users")
    assert not os.path.exists(markers) or os.listdir(markers) == []


# -- statistics ----------------------------------------------------------------

@pytest.mark.parametrize("path_kind", PATHS)
def test_file_statistics_let_pypaimon_filters_prune_files_and_return_the_right_rows(
        spark, table_path, path_kind):
    # Four files with disjoint ranges of every stats-bearing column.
    df = spark.range(0, 400, 1, 4).selectExpr(
        "id", "format_string('k%04d', id) as s", "date_add(date'2020-01-01', cast(id as int)) as d",
        "cast(id as decimal(10,2)) / 4 as amount", "id % 2 = 0 as even",
        "timestamp_seconds(1700000000 + id * 60) as ts", "cast(timestamp_seconds(id * 3600) as timestamp_ntz) as ts_ntz")
    write(df, table_path, path_kind)
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(table_path)
    all_files = sum(len(s.files) for s in table.new_read_builder().new_scan().plan().splits())
    assert all_files == 4
    source = {r["id"]: r for r in df.toArrow().to_pylist()}

    def scan(make_predicate, expected_ids, max_files):
        builder = table.new_read_builder()
        builder = builder.with_filter(make_predicate(builder.new_predicate_builder()))
        splits = builder.new_scan().plan().splits()
        assert sum(len(s.files) for s in splits) <= max_files
        got = builder.new_read().to_arrow(splits).to_pylist()
        assert sorted(r["id"] for r in got) == sorted(expected_ids)
        assert all(r == source[r["id"]] for r in got)

    scan(lambda pb: pb.greater_or_equal("id", 350), range(350, 400), 1)
    scan(lambda pb: pb.equal("s", "k0150"), [150], 1)
    scan(lambda pb: pb.less_than("d", dt.date(2020, 2, 20)), range(50), 1)
    scan(lambda pb: pb.between("id", 99, 100), [99, 100], 2)
    scan(lambda pb: pb.equal("even", True), range(0, 400, 2), 4)
    scan(lambda pb: pb.less_than("amount", Decimal("10")), range(40), 1)
    scan(lambda pb: pb.greater_or_equal("ts_ntz", dt.datetime(1970, 1, 17, 12)), range(396, 400), 1)
