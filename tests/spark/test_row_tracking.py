"""Row tracking (`row-tracking.enabled`): lakesink's writes continue Paimon's row ids, and nothing
lakesink does gives an existing row a new `_ROW_ID`: compaction, row-level changes and overwrites of
other partitions keep every surviving row's id; new rows get new ones. Row ids read back with
pypaimon, and through `lakesink.read(columns=...)`."""

from __future__ import annotations

import pytest

import lakesink
from lakesink.errors import ConfigurationError, UnsupportedOptionError
from tests.spark.test_bad_input import Unchanged

pytestmark = pytest.mark.spark

TRACKED = {"row-tracking.enabled": "true"}


def lineage(path: str) -> dict[int, tuple[int, int]]:
    """id → (_ROW_ID, _SEQUENCE_NUMBER), read by pypaimon."""
    from lakesink.paimon.table.tables import open_table

    table = open_table(path)
    builder = table.new_read_builder().with_projection(["id", "_ROW_ID", "_SEQUENCE_NUMBER"])
    data = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    ids = data.column("id").to_pylist()
    assert len(set(ids)) == len(ids)
    return dict(zip(ids, zip(data.column("_ROW_ID").to_pylist(), data.column("_SEQUENCE_NUMBER").to_pylist())))


def row_ids(path: str) -> dict[int, int]:
    return {k: v[0] for k, v in lineage(path).items()}


def next_row_id(path: str) -> int:
    from lakesink.paimon.table.tables import open_table
    return open_table(path).snapshot_manager().get_latest_snapshot().next_row_id


def file_count(path: str) -> int:
    from lakesink.paimon.table.tables import open_table
    table = open_table(path)
    return sum(len(s.files) for s in table.new_read_builder().new_scan().plan().splits())


def through_lakesink(spark, path: str, **kwargs) -> dict[int, tuple[int, int]]:
    rows = lakesink.read(spark, path, columns=["_ROW_ID", "id", "_SEQUENCE_NUMBER"], **kwargs).collect()
    return {r["id"]: (r["_ROW_ID"], r["_SEQUENCE_NUMBER"]) for r in rows}


def _six_appends_compacted(spark, path: str) -> dict:
    for i in range(6):
        lakesink.write(spark.range(i * 10, i * 10 + 10).coalesce(1), path, options=TRACKED)
    before = lineage(path)
    assert sorted(v[0] for v in before.values()) == list(range(60))
    report = lakesink.compact(spark, path)
    assert report.files_removed == 6 and file_count(path) == 1
    assert lineage(path) == before
    return before


def test_row_ids_and_sequence_numbers_stay_through_compaction_jobs_and_compaction_after_commits(spark, table_path):
    before = _six_appends_compacted(spark, table_path)
    assert through_lakesink(spark, table_path) == before
    # Compaction after each commit (aggregator.enabled): the compacted file and the new small
    # files are one run of ids, merged again at compaction.min.file-num files with every id kept.
    for i in range(4):
        lakesink.write(spark.range(60 + i * 10, 70 + i * 10).coalesce(1), table_path,
                       options={"aggregator.enabled": "true"})
    after = lineage(table_path)
    assert {k: after[k] for k in before} == before
    assert sorted(v[0] for v in after.values()) == list(range(100))
    assert file_count(table_path) == 1


@pytest.mark.full
def test_row_ids_stay_through_the_compaction_rounds_of_a_stream_and_read_through_pypaimon_in_tasks(spark, table_path, tmp_path):
    before = _six_appends_compacted(spark, table_path)
    # pypaimon's reader in Spark tasks (the path of object stores, evolved schemas, ...) too
    rows = spark.read.format("paimon").option("read.system-columns", "true").load(table_path).collect()
    assert {r["id"]: (r["_ROW_ID"], r["_SEQUENCE_NUMBER"]) for r in rows} == before
    source = tmp_path / "source"
    for i in range(5):
        spark.range(60 + i * 10, 70 + i * 10).coalesce(1).write.parquet(str(source / f"part{i}"))
    stream = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
              .parquet(str(source / "part*")))
    query = lakesink.stream(stream, table_path, checkpoint=str(tmp_path / "chk"), trigger="availableNow",
                            options={"aggregator.enabled": "true"})
    query.awaitTermination(300)
    lakesink.await_commits(str(tmp_path / "chk"))
    after = lineage(table_path)
    assert {k: after[k] for k in before} == before
    assert sorted(v[0] for v in after.values()) == list(range(110))
    assert file_count(table_path) < 6


def test_row_level_changes_keep_the_ids_of_surviving_rows_and_give_inserted_rows_new_ones(spark, table_path):
    df = spark.range(0, 60).selectExpr("id", "id * 10 AS v", "IF(id % 2 = 0, 'even', 'odd') AS p")
    lakesink.write(df.repartition(3), table_path, partition_by=["p"], options=TRACKED)
    lakesink.write(df.where("id < 6").selectExpr("id + 60 AS id", "v", "p"), table_path)
    original = lineage(table_path)
    assert sorted(v[0] for v in original.values()) == list(range(66))

    # DELETE leaves holes in the id runs of the rewritten files: their rows keep their ids.
    report = lakesink.delete(spark, table_path, where="id % 7 = 3 AND _ROW_ID >= 0")
    deleted = {i for i in original if i % 7 == 3}
    assert report.rows_deleted == len(deleted)
    assert lineage(table_path) == {k: v for k, v in original.items() if k not in deleted}

    # UPDATE (moving rows 1 and 2 across partitions too): updated rows keep their ids and get the
    # statement's snapshot as sequence number; the others keep both.
    report = lakesink.update(spark, table_path, set={"v": "v + 1", "p": "IF(id < 3, 'moved', p)"},
                             where="id < 20")
    updated = lineage(table_path)
    assert {k: v[0] for k, v in updated.items()} == {k: v[0] for k, v in original.items() if k not in deleted}
    assert all(updated[k][1] == report.snapshot_id for k in updated if k < 20)
    assert all(updated[k] == original[k] for k in updated if k >= 20)

    # MERGE: matched rows updated or deleted keep / lose their ids, inserted rows get new ids
    # above the snapshot's nextRowId, each one once.
    first_new = next_row_id(table_path)
    source = spark.createDataFrame([(25, -1), (26, -2), (100, -3), (101, -4), (102, -5)], "id long, v long")
    report = (lakesink.merge(spark, table_path, source, "t.id = s.id")
              .when_matched_delete("s.v = -2")
              .when_matched_update({"v": "s.v"})
              .when_not_matched_insert({"id": "s.id", "v": "s.v", "p": "'new'"})
              .execute())
    assert (report.rows_updated, report.rows_deleted, report.rows_inserted) == (1, 1, 3)
    merged = lineage(table_path)
    assert 26 not in merged and merged[25] == (updated[25][0], report.snapshot_id)
    assert {k: v for k, v in merged.items() if k < 100 and k != 25} == \
        {k: v for k, v in updated.items() if k not in (25, 26)}
    new_ids = sorted(merged[k][0] for k in (100, 101, 102))
    assert new_ids == list(range(first_new, first_new + 3))

    # lakesink.read reads the same lineage (Spark's Parquet reader, and with a filter on _ROW_ID).
    assert through_lakesink(spark, table_path) == merged
    low = through_lakesink(spark, table_path, filter="_ROW_ID < 10")
    assert low == {k: v for k, v in merged.items() if v[0] < 10}

    # Compaction after the row-level changes keeps them too; the runs they cut stay apart. (On the
    # driver: Spark's rewrite runs the same tasks.)
    lakesink.compact(None, table_path)
    assert lineage(table_path) == merged

    # Overwriting one partition keeps the other partitions' ids; its new rows get new ids.
    before = next_row_id(table_path)
    lakesink.write(spark.createDataFrame([(200, 0, "new")], "id long, v long, p string"), table_path,
                   mode="overwrite", options={"partitionOverwriteMode": "dynamic"})
    overwritten = lineage(table_path)
    assert {k: v for k, v in overwritten.items() if k != 200} == \
        {k: v for k, v in merged.items() if k not in (100, 101, 102)}
    assert overwritten[200][0] == before


def test_row_tracking_with_a_primary_key_and_system_columns_without_row_tracking_are_refused(spark, table_path):
    unchanged = Unchanged(table_path)
    with pytest.raises(UnsupportedOptionError, match="primary key"):  # Paimon refuses it too
        lakesink.write(spark.range(3), table_path, primary_key=["id"], options=TRACKED)
    unchanged.check()
    lakesink.write(spark.range(3), table_path)
    with pytest.raises(ConfigurationError, match="row-tracking"):
        lakesink.read(spark, table_path, columns=["_ROW_ID", "id"])
    with pytest.raises(ConfigurationError, match="not in the table"):
        lakesink.read(spark, table_path, columns=["nope"])
    assert [r.id for r in lakesink.read(spark, table_path, columns=["id"]).orderBy("id").collect()] == [0, 1, 2]


@pytest.mark.full
@pytest.mark.interop
def test_java_paimon_and_paimon_rust_read_the_rows_of_a_compacted_and_merged_row_tracking_table(
        spark, table_path, tmp_path, java_paimon):
    # Java Paimon 1.0 and paimon-rust 0.4 predate row tracking: they read the rows, the stored
    # lineage columns beside them are not theirs.
    for i in range(3):
        lakesink.write(spark.range(i * 10, i * 10 + 10).selectExpr("id", "'x' AS s"), table_path, options=TRACKED)
    lakesink.compact(spark, table_path)
    lakesink.update(spark, table_path, set={"s": "'y'"}, where="id % 4 = 0")
    lakesink.delete(spark, table_path, where="id % 5 = 0")
    expected = sorted((i, "y" if i % 4 == 0 else "x") for i in range(30) if i % 5)
    assert sorted((r["id"], r["s"]) for r in java_paimon.read(table_path, tmp_path)) == expected
    from tests.interop.oracle import RustPaimon, Unavailable
    try:
        rust = RustPaimon().read(table_path)
    except Unavailable:
        return
    assert sorted(zip(rust.column("id").to_pylist(), rust.column("s").to_pylist())) == expected
