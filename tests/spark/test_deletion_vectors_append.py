"""Append tables with `deletion-vectors.enabled`: appends are plain, row-level changes mark the rows
they delete or update in deletion vectors instead of rewriting files, compaction applies the
vectors, and every reader leaves marked rows out. After each step the rows are compared with a
Python model (and delta-rs running the same statement where installed), read by pypaimon as
released (its own process), by `lakesink.read` and by `spark.read.format("paimon")`."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

import lakesink
from lakesink.errors import CommitConflictError, UnsupportedOptionError, UnsupportedTableError
from tests.helpers import latest_snapshot_id, read_table, snapshots, write
from tests.spark import delta_oracle
from tests.unpatched import read_unpatched

pytestmark = pytest.mark.spark

DV = {"deletion-vectors.enabled": "true"}
SCHEMA = "id long, amount double, status string, dt string"
ARROW = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("status", pa.string()), ("dt", pa.string())])
ROWS = [(i, float(i), "new" if i % 3 else "test", "d1" if i < 20 else "d2") for i in range(40)]


def _create(spark, path, rows=ROWS, **options):
    # several files per partition, so a statement leaves some alone
    lakesink.write(spark.createDataFrame(rows, SCHEMA).repartition(4), path, partition_by=["dt"],
                   options={**DV, **options})


def _sorted(rows):
    return sorted((r["id"], r["amount"], r["status"], r["dt"]) for r in rows)


def _arrow(rows):
    return pa.Table.from_pylist([dict(zip(ARROW.names, r)) for r in rows], ARROW)


def dv_state(path: str):
    """({live data file name: row count}, {data file name: rows marked}) of the latest snapshot."""
    from pypaimon.table.file_store_table import FileStoreTable
    from lakesink.paimon.files.deletion_vectors import Vectors
    from lakesink.paimon.compaction.target import live_files

    table = FileStoreTable.from_path(path)
    files = {f.meta.file_name: f.row_count for f in live_files(table)}
    marked = Vectors(table, table.snapshot_manager().get_latest_snapshot()).cardinalities()
    return files, marked


def check(spark, path: str, expected, every_reader: bool = True) -> None:
    """Row for row: pypaimon as released (own process) and, with `every_reader`, lakesink.read and
    format('paimon'); every deletion vector belongs to a live file and leaves a row of it."""
    expected = sorted(expected)
    assert _sorted(read_unpatched(path).to_pylist() if every_reader else read_table(path).to_pylist()) == expected
    if every_reader:
        assert _sorted(r.asDict() for r in lakesink.read(spark, path).collect()) == expected
        assert _sorted(r.asDict() for r in spark.read.format("paimon").load(path).collect()) == expected
    files, marked = dv_state(path)
    assert set(marked) <= set(files), "a deletion vector of a file no longer live"
    assert all(0 < n < files[name] for name, n in marked.items())


def test_delete_update_merge_mark_rows_and_every_reader_leaves_them_out(spark, table_path, tmp_path):
    _create(spark, table_path)
    for step in "123":
        (tmp_path / step).mkdir()
    model = list(ROWS)
    before, _ = dv_state(table_path)
    # DELETE: rows marked, no file rewritten
    where = "dt = 'd1' and status = 'test'"
    report = lakesink.delete(spark, table_path, where=where)
    assert report.rows_deleted == 7 and report.commit_kind == "OVERWRITE" and report.files_added == 0
    model = [r for r in model if not (r[3] == "d1" and r[2] == "test")]
    files, marked = dv_state(table_path)
    assert set(files) == set(before) and marked, "a DELETE on a deletion-vector table rewrote files"
    check(spark, table_path, model, every_reader=False)
    if delta_oracle.available():
        delta, _ = delta_oracle.run(tmp_path / "1", "delete", _arrow(ROWS), where=where)
        assert _sorted(delta.to_pylist()) == sorted(model)
    # UPDATE: old versions marked, new ones appended; a row deleted before is not updated again
    start = list(model)
    report = lakesink.update(spark, table_path, set={"status": "'shipped'", "amount": "amount * 2"},
                             where="id in (1, 3, 25, 26)")
    assert report.rows_updated == 3 and report.files_added >= 1
    model = [(i, a * 2, "shipped", d) if i in (1, 25, 26) else (i, a, s, d) for i, a, s, d in model]
    check(spark, table_path, model, every_reader=False)
    if delta_oracle.available():
        delta, _ = delta_oracle.run(tmp_path / "2", "update", _arrow(start), set={"status": "'shipped'",
                                    "amount": "amount * 2"}, where="id in (1, 3, 25, 26)")
        assert _sorted(delta.to_pylist()) == sorted(model)
    # MERGE: updates (of rows updated before too), deletes, inserts
    source = [(1, 100.0, "upd", "d1", "U"), (2, 0.0, "x", "d1", "D"), (25, 250.0, "upd", "d2", "U"),
              (50, 50.0, "ins", "d2", "I")]
    src = spark.createDataFrame(source, SCHEMA + ", op string")
    start = list(model)
    report = (lakesink.merge(spark, table_path, src, on="t.id = s.id and t.dt = s.dt")
              .when_matched_delete(condition="s.op = 'D'")
              .when_matched_update(set={"amount": "s.amount", "status": "s.status"})
              .when_not_matched_insert_all()
              .execute())
    assert (report.rows_updated, report.rows_deleted, report.rows_inserted) == (2, 1, 1)
    by_id = {s[0]: s for s in source}
    model = ([r for r in model if r[0] != 2 and r[0] not in (1, 25)]
             + [(1, 100.0, "upd", "d1"), (25, 250.0, "upd", "d2"), (50, 50.0, "ins", "d2")])
    assert by_id[50][:4] in model
    check(spark, table_path, model)
    if delta_oracle.available():
        delta, _ = delta_oracle.run(
            tmp_path / "3", "merge", _arrow(start), source=pa.Table.from_pylist(
                [dict(zip(ARROW.names + ["op"], r)) for r in source]),
            on="t.id = s.id and t.dt = s.dt",
            clauses=[["matched_delete", "s.op = 'D'", None],
                     ["matched_update", None, {"amount": "s.amount", "status": "s.status"}],
                     ["insert_all", None, None]])
        assert _sorted(delta.drop_columns(["op"]).to_pylist() if "op" in delta.column_names
                       else delta.to_pylist()) == sorted(model)
    # an append is plain: nothing merged, nothing marked
    _, marked_before = dv_state(table_path)
    more = [(100 + i, 1.0, "new", "d1") for i in range(5)]
    write(spark.createDataFrame(more, SCHEMA), table_path, "native")
    model += more
    assert dv_state(table_path)[1] == marked_before
    check(spark, table_path, model, every_reader=False)
    # compaction: marked rows leave with the rewritten files, and so do their vectors
    lakesink.compact(spark, table_path)
    files, marked = dv_state(table_path)
    assert not marked, "compaction left deletion vectors of the files it rewrote"
    check(spark, table_path, model)
