"""Schema evolution on write in the Paimon connector, without Spark: plan, commit, crash, replay, races.

Files are written with pyarrow into the job's staging directory (as a Spark task
would), described and committed through `BatchWrite`; tables are read back with
pypaimon directly.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakesink.errors import CommitConflictError, SchemaMismatchError
from lakesink.options import WriteOptions
from lakesink.paimon.table import evolution
from lakesink.paimon.write.batch import BatchWrite
from lakesink.paimon.commit.target import PaimonTarget
from lakesink.protocol import crashpoints
from tests.helpers import read_table, snapshots

BASE = pa.schema([("id", pa.int32()), ("s", pa.string())])
WITH_X = pa.schema([("id", pa.int32()), ("s", pa.string()), ("x", pa.float64())])
MERGE = {"write.merge-schema": "true"}


def plan(path: str, schema: pa.Schema, **options) -> BatchWrite:
    return BatchWrite.plan(path, schema, WriteOptions.parse(options), "append", "test")


def staged(job: BatchWrite, rows: pa.Table) -> list:
    """One Parquet file in the job's staging directory, laid out as the job planned."""
    job.target.file_io.check_or_mkdirs(job.staging_dir)
    path = f"{job.staging_dir}/part-{len(os.listdir(job.staging_dir))}.parquet"
    pq.write_table(rows.select(job.layout.arrow_schema().names).cast(job.layout.arrow_schema()), path)
    return job.describe_staged([path])


def write(path: str, rows: pa.Table, **options):
    job = plan(path, rows.schema, **options)
    return job.commit(staged(job, rows))


def schema_files(path: str) -> list[str]:
    return sorted(os.listdir(os.path.join(path, "schema")))


@pytest.fixture()
def table(tmp_path):
    path = str(tmp_path / "db.db" / "t")
    write(path, pa.table({"id": pa.array([1], pa.int32()), "s": ["a"]}))
    return path


def test_a_new_column_is_added_in_the_snapshot_that_holds_its_first_data(table):
    report = write(table, pa.table({"id": pa.array([2], pa.int32()), "s": ["b"], "x": [2.5]}), **MERGE)

    assert schema_files(table) == ["schema-0", "schema-1"]
    last = snapshots(table)[-1]
    assert (last.id, last.schema_id) == (report.snapshot_id, 1)
    rows = read_table(table).sort_by("id").to_pylist()
    assert rows == [{"id": 1, "s": "a", "x": None}, {"id": 2, "s": "b", "x": 2.5}]


def test_an_int_column_widens_to_bigint_and_old_files_read_as_bigint(table):
    write(table, pa.table({"id": pa.array([2**40], pa.int64()), "s": ["b"]}), **MERGE)
    result = read_table(table)
    assert result.schema.field("id").type == pa.int64()
    assert sorted(result.column("id").to_pylist()) == [1, 2**40]


@pytest.mark.parametrize("rows, words", [
    ({"id": pa.array([2], pa.int16()), "s": ["b"]}, ["never narrowed", "cast the DataFrame's column to int32"]),
    ({"id": pa.array(["2"]), "s": ["b"]}, ["column 'id' is string but the table has int32", "write.merge-schema widens"]),
    ({"id": pa.array([2], pa.int32())}, ["missing column(s) ['s']", "never drops a column"]),
])
def test_a_refused_change_names_the_column_and_changes_nothing(table, rows, words):
    before = (schema_files(table), [s.id for s in snapshots(table)])
    with pytest.raises(SchemaMismatchError) as info:
        plan(table, pa.table(rows).schema, **MERGE)
    for word in words:
        assert word in str(info.value)
    assert (schema_files(table), [s.id for s in snapshots(table)]) == before


def test_without_the_option_new_columns_are_named_with_the_option_to_set(table):
    with pytest.raises(SchemaMismatchError) as info:
        plan(table, WITH_X)
    assert "column(s) ['x'] not in the table: set write.merge-schema=true" in str(info.value)


def test_the_widening_rules():
    assert evolution.widens(pa.int8(), pa.int64()) and evolution.widens(pa.int32(), pa.float64())
    assert evolution.widens(pa.decimal128(10, 2), pa.decimal128(20, 2))
    assert not evolution.widens(pa.decimal128(10, 2), pa.decimal128(20, 3))
    assert not evolution.widens(pa.int64(), pa.float64())  # not exact beyond 2^53
    assert not evolution.widens(pa.int64(), pa.int32())


def test_a_commit_killed_after_the_schema_was_written_is_retried_without_a_second_schema(table, monkeypatch):
    rows = pa.table({"id": pa.array([2], pa.int32()), "s": ["b"], "x": [1.0]})
    job = plan(table, rows.schema, **MERGE, **{"commit.user": "u", "commit.identifier": "1"})
    files = staged(job, rows)

    def die(point):
        if point == "schema-written":
            raise KeyboardInterrupt  # the process dies here
    monkeypatch.setattr(crashpoints, "reached", die)
    with pytest.raises(KeyboardInterrupt):
        job.committer().commit(job.identifier, files)
    monkeypatch.undo()
    assert schema_files(table) == ["schema-0", "schema-1"] and len(snapshots(table)) == 1
    assert read_table(table).column_names == ["id", "s", "x"]  # readable, new column empty

    # The re-run plans against schema 1 (nothing to evolve) and commits once.
    rerun = plan(table, rows.schema, **MERGE, **{"commit.user": "u", "commit.identifier": "1"})
    assert rerun.layout.pending_schema is None and rerun.layout.schema_id == 1
    rerun.commit(staged(rerun, rows))
    assert schema_files(table) == ["schema-0", "schema-1"]
    assert sorted(read_table(table).column("id").to_pylist()) == [1, 2]
    # and once more: a replay of the same identity commits nothing
    again = plan(table, rows.schema, **MERGE, **{"commit.user": "u", "commit.identifier": "1"})
    assert again.already_committed()


def test_a_pending_commit_carries_its_schema_to_a_restore_by_another_target(table):
    rows = pa.table({"id": pa.array([2], pa.int32()), "s": ["b"], "x": [1.0]})
    job = plan(table, rows.schema, **MERGE)
    encoded = [job.target.encode(f) for f in staged(job, rows)]
    fresh = PaimonTarget(table)  # a restarted driver, planned for other data
    files = [fresh.decode(e) for e in encoded]
    assert files[0].schema is not None and files[0].meta.schema_id == 1
    fresh.commit(job.commit_user, job.identifier, files)
    assert schema_files(table) == ["schema-0", "schema-1"]
    assert read_table(table).sort_by("id").column("x").to_pylist() == [None, 1.0]


def test_two_writers_adding_different_columns_both_land_or_conflict_cleanly(table):
    first = plan(table, WITH_X, **MERGE)
    second = plan(table, pa.schema([("id", pa.int32()), ("s", pa.string()), ("y", pa.string())]), **MERGE)
    first.commit(staged(first, pa.table({"id": pa.array([2], pa.int32()), "s": ["b"], "x": [1.0]})))
    with pytest.raises(CommitConflictError, match="another writer changed the table's schema"):
        second.commit(staged(second, pa.table({"id": pa.array([3], pa.int32()), "s": ["c"], "y": ["!"]})))
    assert schema_files(table) == ["schema-0", "schema-1"]
    assert sorted(read_table(table).column("id").to_pylist()) == [1, 2]


def test_a_writer_whose_columns_another_writer_added_meanwhile_commits_on_that_schema(table):
    first = plan(table, WITH_X, **MERGE)
    # Same columns, planned in another order: the second writer's schema 1 is not the first's.
    second = plan(table, pa.schema([("x", pa.float64()), ("y", pa.string()), ("id", pa.int32()),
                                    ("s", pa.string())]), **MERGE)
    first.commit(staged(first, pa.table({"id": pa.array([2], pa.int32()), "s": ["b"], "x": [1.0]})))
    second.commit(staged(second, pa.table({"x": [3.0], "y": ["!"], "id": pa.array([3], pa.int32()),
                                           "s": ["c"]})))
    assert schema_files(table) == ["schema-0", "schema-1", "schema-2"]  # y added on top of x
    rows = {r["id"]: r for r in read_table(table).to_pylist()}
    assert rows[3] == {"id": 3, "s": "c", "x": 3.0, "y": "!"}
    assert rows[2] == {"id": 2, "s": "b", "x": 1.0, "y": None}


def test_a_schema_file_another_writer_created_first_is_never_replaced(table):
    from pypaimon.schema.schema_manager import SchemaManager
    from lakesink.paimon.table import tables

    opened = tables.open_table(table)
    manager = SchemaManager(opened.file_io, table)
    mine = plan(table, WITH_X, **MERGE).layout.pending_schema
    theirs = plan(table, pa.schema([("id", pa.int32()), ("s", pa.string()), ("y", pa.string())]),
                  **MERGE).layout.pending_schema
    assert evolution.write_schema(opened, manager, theirs)
    assert not evolution.write_schema(opened, manager, mine)  # pypaimon's rename would have replaced it
    assert [f.name for f in manager.get_schema(1).fields] == ["id", "s", "y"]


def test_pending_files_carry_their_schema_only_while_the_table_lacks_it(table):
    rows = pa.table({"id": pa.array([2], pa.int32()), "s": ["b"], "x": [1.0]})
    job = plan(table, rows.schema, **MERGE)
    files = staged(job, rows)
    assert "table_schema" in job.target.encode(files[0])
    job.commit(files)
    later = staged(job, rows)  # a stream's next batch, planned with the same layout
    assert later[0].schema is not None and "table_schema" not in job.target.encode(later[0])
