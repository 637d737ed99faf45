"""Append tables with `deletion-vectors.enabled`: appends are plain, row-level changes mark the rows
they delete or update in deletion vectors instead of rewriting files, compaction applies the
vectors, and every reader leaves marked rows out. After each step the rows are compared with a
Python model (and delta-rs running the same statement where installed), read by pypaimon as
released (its own process), by `lakesink.read` and by `spark.read.format("paimon")`."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lakesink
from lakesink.errors import CommitConflictError, UnsupportedOptionError
from tests.helpers import latest_snapshot_id, read_table, write
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


def check(spark, path: str, expected, every_reader: bool = True, format_read: bool = True) -> None:
    """Row for row with the model: pypaimon (with `every_reader`: as released, in its own process)
    and, with `every_reader`, lakesink.read and (`format_read`) format('paimon'), pypaimon's reader
    in Spark's Python workers; every deletion vector belongs to a live file and leaves a row of it
    (a file with none left is removed)."""
    expected = sorted(expected)
    assert _sorted(read_unpatched(path).to_pylist() if every_reader else read_table(path).to_pylist()) == expected
    if every_reader:
        assert _sorted(r.asDict() for r in lakesink.read(spark, path).collect()) == expected
        if format_read:
            assert _sorted(r.asDict() for r in spark.read.format("paimon").load(path).collect()) == expected
    files, marked = dv_state(path)
    assert set(marked) <= set(files), "a deletion vector of a file no longer live"
    assert all(0 < n < files[name] for name, n in marked.items())


def _same_as_delta(tmp_path, step: str, op: str, before, model, **spec) -> None:
    """delta-rs runs the same statement on the same rows: the same rows come out."""
    if not delta_oracle.available():
        return
    (tmp_path / step).mkdir()
    delta, _ = delta_oracle.run(tmp_path / step, op, _arrow(before), **spec)
    assert _sorted(delta.select(ARROW.names).to_pylist()) == sorted(model)


SOURCE = [(1, 100.0, "upd", "d1", "U"), (2, 0.0, "x", "d1", "D"), (25, 250.0, "upd", "d2", "U"),
          (50, 50.0, "ins", "d2", "I")]


# Default: a MERGE (marks of deletes and updates, new versions and inserts added), pypaimon as
# released and lakesink.read once it landed, an append, an overwrite and compaction (DELETE and
# UPDATE alone: the conflict test and tests/interop/test_deletion_vectors.py). ./dev full: a
# DELETE and an UPDATE first, every reader (format('paimon') too) and delta-rs after every
# statement, the append through format('paimon').
@pytest.mark.parametrize("thorough", [False, pytest.param(True, marks=pytest.mark.full)], ids=["merge", "all"])
def test_statements_mark_rows_and_every_reader_leaves_them_out(spark, table_path, tmp_path, thorough):
    _create(spark, table_path)
    model = list(ROWS)
    before, _ = dv_state(table_path)
    if thorough:
        # DELETE: rows marked, no file rewritten
        where = "dt = 'd1' and status = 'test'"
        report = lakesink.delete(spark, table_path, where=where)
        assert report.rows_deleted == 7 and report.commit_kind == "OVERWRITE" and report.files_added == 0
        start, model = model, [r for r in model if not (r[3] == "d1" and r[2] == "test")]
        files, marked = dv_state(table_path)
        assert set(files) == set(before) and marked, "a DELETE on a deletion-vector table rewrote files"
        check(spark, table_path, model)
        _same_as_delta(tmp_path, "delete", "delete", start, model, where=where)
        # UPDATE: old versions marked, new ones added; a row deleted before (3) is not updated again
        assignments, where = {"status": "'shipped'", "amount": "amount * 2"}, "id in (1, 3, 25, 26)"
        report = lakesink.update(spark, table_path, set=assignments, where=where)
        assert report.rows_updated == 3 and report.files_added >= 1
        start, model = model, [(i, a * 2, "shipped", d) if i in (1, 25, 26) else (i, a, s, d)
                               for i, a, s, d in model]
        check(spark, table_path, model)
        _same_as_delta(tmp_path, "update", "update", start, model, set=assignments, where=where)
    # MERGE: updates (after the UPDATE: of rows in its files), a delete, an insert
    report = (lakesink.merge(spark, table_path, spark.createDataFrame(SOURCE, SCHEMA + ", op string"),
                             on="t.id = s.id and t.dt = s.dt")
              .when_matched_delete(condition="s.op = 'D'")
              .when_matched_update(set={"amount": "s.amount", "status": "s.status"})
              .when_not_matched_insert(values={c: f"s.{c}" for c in ARROW.names})
              .execute())
    assert (report.rows_updated, report.rows_deleted, report.rows_inserted) == (2, 1, 1)
    # (after the UPDATE: its file of d1 held row 1 alone; every row of it marked, it leaves whole)
    assert report.files_removed == (1 if thorough else 0) and dv_state(table_path)[1]
    start, model = model, ([r for r in model if r[0] not in (1, 2, 25)]
                           + [(1, 100.0, "upd", "d1"), (25, 250.0, "upd", "d2"), (50, 50.0, "ins", "d2")])
    check(spark, table_path, model, format_read=thorough)
    if thorough:
        source = pa.Table.from_pylist([dict(zip([*ARROW.names, "op"], r)) for r in SOURCE])
        _same_as_delta(tmp_path, "merge", "merge", start, model, source=source, on="t.id = s.id and t.dt = s.dt",
                       clauses=[["matched_delete", "s.op = 'D'", None],
                                ["matched_update", None, {"amount": "s.amount", "status": "s.status"}],
                                ["insert", None, {c: f"s.{c}" for c in ARROW.names}]])
    # an append is plain: nothing merged, nothing marked
    _, marked = dv_state(table_path)
    more = [(100 + i, 1.0, "new", "d1") for i in range(5)]
    write(spark.createDataFrame(more, SCHEMA), table_path, "native" if thorough else "fast")
    model += more
    assert dv_state(table_path)[1] == marked
    check(spark, table_path, model, every_reader=thorough)
    # an overwrite of a partition: its files leave with their vectors, the other partition's stay
    assert {p for p, _ in _marked_partitions(table_path)} == {"d1", "d2"}
    fresh = [(200, 2.0, "new", "d1")]
    lakesink.write(spark.createDataFrame(fresh, SCHEMA), table_path, mode="overwrite",
                   options={"partitionOverwriteMode": "dynamic"})
    model = [r for r in model if r[3] != "d1"] + fresh
    check(spark, table_path, model, every_reader=False)
    assert {p for p, _ in _marked_partitions(table_path)} == {"d2"}
    # compaction: marked rows leave with the rewritten files, and so do their vectors
    lakesink.compact(spark, table_path)
    assert dv_state(table_path)[1] == {}, "compaction left deletion vectors of the files it rewrote"
    check(spark, table_path, model, every_reader=thorough)
    assert _sorted(r.asDict() for r in lakesink.read(spark, table_path).collect()) == sorted(model)


def _marked_partitions(path: str) -> set:
    """(partition value, data file name) of every file a deletion vector marks rows of."""
    from pypaimon.table.file_store_table import FileStoreTable
    from lakesink.paimon.files.deletion_vectors import Vectors

    table = FileStoreTable.from_path(path)
    vectors = Vectors(table, table.snapshot_manager().get_latest_snapshot())
    return {(e.partition.values[0], name) for e in vectors.entries() for name in e.index_file.dv_ranges}


def test_a_compaction_and_a_statement_marking_the_same_files_conflict(spark, table_path, monkeypatch):
    """Rows marked after a compaction's rewrite read its inputs: the compaction is a conflict
    (its file would bring them back). A compaction landing between a statement's read and its
    snapshot: the statement is a conflict (its marks are of files gone). Neither changes the table."""
    from lakesink.paimon.compaction.append_aggregator import SmallFileAggregator
    from lakesink.paimon.compaction.rewrite import rewrite_on_driver
    from lakesink.paimon.compaction.target import PaimonCompactionTarget, live_files
    from lakesink.paimon.commit.target import PaimonTarget
    from lakesink.paimon.table.tables import open_table
    from lakesink.protocol import crashpoints

    _create(spark, table_path, rows=[r for r in ROWS if r[3] == "d1"])
    model = [r for r in ROWS if r[3] == "d1"]
    compaction = PaimonCompactionTarget(PaimonTarget(table_path))

    def rewritten():
        table = open_table(table_path)
        aggregator = SmallFileAggregator(table, compaction.staging_dir("c"), target_size=1 << 30)
        aggregator.flush()
        inputs = live_files(table)
        return inputs, rewrite_on_driver([aggregator.task_for(inputs)])

    inputs, outputs = rewritten()
    lakesink.delete(spark, table_path, where="id = 5")
    model = [r for r in model if r[0] != 5]
    before = latest_snapshot_id(table_path)
    with pytest.raises(CommitConflictError, match="marked deleted after the rewrite read them"):
        compaction.commit_compaction("c", 1, inputs, outputs)
    assert latest_snapshot_id(table_path) == before
    check(spark, table_path, model, every_reader=False)

    reached = crashpoints.reached

    def compact_first(point):  # another writer's compaction lands before the statement's snapshot
        if point == "before-snapshot":
            monkeypatch.setattr(crashpoints, "reached", reached)
            lakesink.compact(None, table_path)
        reached(point)

    monkeypatch.setattr(crashpoints, "reached", compact_first)
    with pytest.raises(CommitConflictError):
        lakesink.delete(spark, table_path, where="id = 6")
    files, marked = dv_state(table_path)
    assert len(files) == 1 and not marked
    check(spark, table_path, model, every_reader=False)
    lakesink.delete(spark, table_path, where="id = 6")  # planned afresh, it lands
    check(spark, table_path, [r for r in model if r[0] != 6], every_reader=False)


@pytest.mark.parametrize("options, named", [
    ({"row-tracking.enabled": "true"}, "row-tracking.enabled=true"),
    ({"metadata.iceberg.storage": "table-location"}, "metadata.iceberg.storage=table-location"),
])
def test_options_deletion_vectors_cannot_go_with_are_refused_by_name(spark, table_path, options, named):
    with pytest.raises(UnsupportedOptionError, match=named) as info:
        lakesink.write(spark.createDataFrame(ROWS[:2], SCHEMA), table_path, options={**DV, **options})
    assert info.value.option == "deletion-vectors.enabled"
    assert not os.path.exists(os.path.join(table_path, "schema"))


def test_orphan_removal_deletes_index_files_no_snapshot_lists_and_keeps_the_vectors(spark, table_path):
    """A commit killed after writing its deletion-vector file and before its snapshot leaves an
    index file no snapshot lists: orphan removal deletes it (once old enough), keeps every
    vector a snapshot lists, and the table reads as before."""
    import time

    from lakesink.paimon import maintenance

    _create(spark, table_path)
    lakesink.delete(spark, table_path, where="id % 5 = 0")
    expected = [r for r in ROWS if r[0] % 5]
    index = os.path.join(table_path, "index")
    live = sorted(os.listdir(index))
    assert live, "the DELETE wrote no deletion-vector file"
    stale, fresh = os.path.join(index, "index-dead-0"), os.path.join(index, "index-in-flight-0")
    for path in (stale, fresh):
        with open(os.path.join(index, live[0]), "rb") as src, open(path, "wb") as out:
            out.write(src.read())
    old = time.time() - 3 * 86400
    os.utime(stale, (old, old))
    for name in live:  # a listed file is kept whatever its age
        os.utime(os.path.join(index, name), (old, old))
    assert maintenance.remove_orphans(table_path, dry_run=True) == [stale]
    maintenance.remove_orphans(table_path)
    assert sorted(os.listdir(index)) == sorted(live + ["index-in-flight-0"])
    check(spark, table_path, expected, format_read=False)
