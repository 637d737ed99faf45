"""lakesink.delete / update / merge on append and primary-key tables, read back with pypaimon and
compared with delta-rs running the same statement on the same rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakesink
from lakesink.errors import (CommitConflictError, ConfigurationError, LakesinkError, MultipleMatchError,
                             SchemaMismatchError, UnsupportedTableError)
from tests.helpers import latest_snapshot_id, read_table, snapshots
from tests.spark import delta_oracle

SCHEMA = "id long, amount double, status string, dt string"
ARROW = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("status", pa.string()), ("dt", pa.string())])
ROWS = [(i, float(i), "new" if i % 3 else "test", "d1" if i < 20 else "d2") for i in range(40)]
KINDS = ["append", "keyed"]


def _create(spark, path, kind, rows=ROWS):
    df = spark.createDataFrame(rows, SCHEMA)
    if kind == "keyed":
        lakesink.write(df, path, primary_key=["id", "dt"], partition_by=["dt"], options={"bucket": "2"})
    else:  # several files per partition, so a statement can leave some alone
        lakesink.write(df.repartition(4), path, partition_by=["dt"])


def _rows(path):
    return sorted((r["id"], r["amount"], r["status"], r["dt"]) for r in read_table(path).to_pylist())


def _delta_rows(table: pa.Table):
    return sorted((r["id"], r["amount"], r["status"], r["dt"]) for r in table.to_pylist())


def _live_files(path):
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(path)
    return {f.file_name for s in table.new_read_builder().new_scan().plan().splits() for f in s.files}


def _arrow(rows):
    return pa.Table.from_pylist([dict(zip(ARROW.names, r)) for r in rows], ARROW)


# ---------------------------------------------------------------- delete / update


@pytest.mark.parametrize("kind", KINDS)
def test_delete_removes_the_matching_rows_as_delta_does(spark, table_path, tmp_path, kind):
    _create(spark, table_path, kind)
    where = "dt = 'd1' and status = 'test'"
    report = lakesink.delete(spark, table_path, where=where)
    assert report.rows_deleted == 7 and report.rows_updated == report.rows_inserted == 0
    assert report.snapshot_id == latest_snapshot_id(table_path) == 2
    assert snapshots(table_path)[-1].properties["lakesink.rows-deleted"] == "7"
    expected = [r for r in ROWS if not (r[3] == "d1" and r[2] == "test")]
    assert _rows(table_path) == sorted(expected)
    if delta_oracle.available():
        delta, metrics = delta_oracle.run(tmp_path, "delete", _arrow(ROWS), where=where)
        assert _rows(table_path) == _delta_rows(delta) and metrics["num_deleted_rows"] == 7


@pytest.mark.parametrize("kind", KINDS)
def test_update_sets_columns_of_the_matching_rows_as_delta_does(spark, table_path, tmp_path, kind):
    _create(spark, table_path, kind)
    assignments = {"status": "'shipped'", "amount": "amount * 1.1"}
    report = lakesink.update(spark, table_path, set=assignments, where="id in (1, 2, 25)")
    assert report.rows_updated == 3 and report.rows_deleted == 0
    got = _rows(table_path)
    assert [r for r in got if r[0] in (1, 2, 25)] == [(1, 1.1, "shipped", "d1"), (2, 2.2, "shipped", "d1"),
                                                       (25, 25.0 * 1.1, "shipped", "d2")]
    assert [r for r in got if r[0] not in (1, 2, 25)] == sorted(r for r in ROWS if r[0] not in (1, 2, 25))
    if delta_oracle.available():
        delta, metrics = delta_oracle.run(tmp_path, "update", _arrow(ROWS), set=assignments, where="id in (1, 2, 25)")
        assert got == _delta_rows(delta) and metrics["num_updated_rows"] == 3


def test_delete_on_an_append_table_rewrites_only_the_files_holding_matching_rows(spark, table_path):
    _create(spark, table_path, "append")
    before = _live_files(table_path)
    assert len(before) >= 4
    report = lakesink.delete(spark, table_path, where="id = 3")
    after = _live_files(table_path)
    assert report.commit_kind == "OVERWRITE" and report.files_removed == 1
    assert len(before - after) == 1  # the one file holding id 3 is replaced; the others keep their names
    assert len(after - before) == 1
    assert _rows(table_path) == sorted(r for r in ROWS if r[0] != 3)


def test_delete_on_a_keyed_table_rewrites_no_file(spark, table_path):
    _create(spark, table_path, "keyed")
    before = _live_files(table_path)
    report = lakesink.delete(spark, table_path, where="id >= 10")
    assert report.commit_kind == "APPEND" and report.files_removed == 0 and report.rows_deleted == 30
    assert before <= _live_files(table_path)
    assert _rows(table_path) == sorted(r for r in ROWS if r[0] < 10)


def test_a_statement_matching_nothing_commits_nothing(spark, table_path):
    _create(spark, table_path, "append")
    report = lakesink.delete(spark, table_path, where="id > 1000")
    assert report.snapshot_id is None and report.rows_deleted == 0
    assert latest_snapshot_id(table_path) == 1


# ---------------------------------------------------------------- merge


def _merge_clauses(builder):
    return (builder.when_matched_delete(condition="s.op = 'D'")
            .when_matched_update(set={"amount": "s.amount", "status": "s.status"})
            .when_not_matched_insert(values={"id": "s.id", "amount": "s.amount", "status": "s.status", "dt": "s.dt"},
                                     condition="s.op = 'I'")
            .when_not_matched_by_source_delete(condition="t.dt = 'd2' and t.id >= 35"))


SOURCE = [(1, 100.0, "upd", "d1", "U"), (2, 0.0, "x", "d1", "D"), (25, 250.0, "upd", "d2", "U"),
          (50, 50.0, "ins", "d2", "I"), (51, 51.0, "skipped", "d2", "X")]
DELTA_CLAUSES = [["matched_delete", "s.op = 'D'", None],
                 ["matched_update", None, {"amount": "s.amount", "status": "s.status"}],
                 ["insert", "s.op = 'I'", {"id": "s.id", "amount": "s.amount", "status": "s.status", "dt": "s.dt"}],
                 ["by_source_delete", "t.dt = 'd2' and t.id >= 35", None]]


@pytest.mark.parametrize("kind", KINDS)
def test_merge_applies_its_clauses_in_order_as_delta_does(spark, table_path, tmp_path, kind):
    _create(spark, table_path, kind)
    source = spark.createDataFrame(SOURCE, SCHEMA + ", op string")
    report = _merge_clauses(lakesink.merge(spark, table_path, source, on="t.id = s.id")).execute()
    assert (report.rows_inserted, report.rows_updated, report.rows_deleted) == (1, 2, 6)
    props = snapshots(table_path)[-1].properties
    assert (props["lakesink.rows-inserted"], props["lakesink.rows-updated"], props["lakesink.rows-deleted"]) == \
        ("1", "2", "6")
    got = _rows(table_path)
    assert (1, 100.0, "upd", "d1") in got and (25, 250.0, "upd", "d2") in got and (50, 50.0, "ins", "d2") in got
    assert not [r for r in got if r[0] in (2, 51) or r[0] >= 35 and r[0] != 50]
    if delta_oracle.available():
        source_arrow = pa.Table.from_pylist([dict(zip([*ARROW.names, "op"], r)) for r in SOURCE],
                                            ARROW.append(pa.field("op", pa.string())))
        delta, metrics = delta_oracle.run(tmp_path, "merge", _arrow(ROWS), source_arrow, on="t.id = s.id",
                                          clauses=DELTA_CLAUSES)
        assert got == _delta_rows(delta)
        assert (metrics["num_target_rows_inserted"], metrics["num_target_rows_updated"],
                metrics["num_target_rows_deleted"]) == (1, 2, 6)


@pytest.mark.parametrize("kind", KINDS)
def test_merge_update_all_and_insert_all_upsert_the_source(spark, table_path, tmp_path, kind):
    _create(spark, table_path, kind)
    changes = [(5, 55.0, "upd", "d1"), (60, 60.0, "ins", "d2")]
    report = (lakesink.merge(spark, table_path, spark.createDataFrame(changes, SCHEMA), on="t.id = s.id")
              .when_matched_update_all().when_not_matched_insert_all().execute())
    assert (report.rows_inserted, report.rows_updated, report.rows_deleted) == (1, 1, 0)
    assert _rows(table_path) == sorted([r for r in ROWS if r[0] != 5] + changes)
    if delta_oracle.available():
        delta, _ = delta_oracle.run(tmp_path, "merge", _arrow(ROWS), _arrow(changes), on="t.id = s.id",
                                    clauses=[["matched_update_all", None, None], ["insert_all", None, None]])
        assert _rows(table_path) == _delta_rows(delta)


def test_a_merge_into_a_partitioned_append_table_writes_each_partitions_new_rows_into_one_file(spark, table_path):
    import glob

    import pyarrow.parquet as pq

    _create(spark, table_path, "append")
    before = _live_files(table_path)
    changes = [(i, 1000.0 + i, "upd", "d1" if i < 20 else "d2") for i in (1, 5, 9, 22, 30, 37)]
    changes += [(100 + i, 100.0 + i, "ins", "d1" if i % 2 else "d2") for i in range(8)]
    # The join's rows in several tasks, each holding rows of both partitions (as a large join's are).
    previous = spark.conf.get("spark.sql.adaptive.coalescePartitions.enabled")
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    try:
        (lakesink.merge(spark, table_path, spark.createDataFrame(changes, SCHEMA).repartition(4), on="t.id = s.id")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    finally:
        spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", previous)
    assert _rows(table_path) == sorted([r for r in ROWS if r[0] not in {c[0] for c in changes}] + changes)
    holding = {}  # partition -> added files holding a changed or inserted row
    for name in _live_files(table_path) - before:
        [path] = glob.glob(f"{table_path}/**/{name}", recursive=True)
        rows = pq.ParquetFile(path).read().to_pylist()
        if any(r["status"] in ("upd", "ins") for r in rows):
            holding.setdefault(rows[0]["dt"], []).append(name)
    assert {dt: len(names) for dt, names in holding.items()} == {"d1": 1, "d2": 1}


@pytest.mark.parametrize("kind", KINDS)
def test_two_source_rows_on_one_target_row_fail_the_merge_and_leave_the_table_unchanged(spark, table_path, kind):
    _create(spark, table_path, kind)
    source = spark.createDataFrame([(3, 1.0, "a", "d1"), (3, 2.0, "b", "d1")], SCHEMA)
    with pytest.raises(MultipleMatchError, match="multiple source rows matched and attempted to modify the same"):
        (lakesink.merge(spark, table_path, source, on="t.id = s.id")
         .when_matched_update(set={"amount": "s.amount"}).when_not_matched_insert_all().execute())
    assert latest_snapshot_id(table_path) == 1 and _rows(table_path) == sorted(ROWS)


@pytest.mark.parametrize("kind", KINDS)
def test_two_source_rows_on_one_target_row_through_different_clauses_fail_the_merge(spark, table_path, kind):
    _create(spark, table_path, kind)
    source = spark.createDataFrame([(3, 1.0, "a", "d1"), (3, 2.0, "b", "d1")], SCHEMA)
    with pytest.raises(MultipleMatchError, match=r"\(2 source rows matched one target row\)"):
        (lakesink.merge(spark, table_path, source, on="t.id = s.id")
         .when_matched_delete(condition="s.status = 'a'").when_matched_update(set={"amount": "s.amount"})
         .execute())
    assert latest_snapshot_id(table_path) == 1 and _rows(table_path) == sorted(ROWS)


def test_two_source_rows_may_delete_one_target_row_when_that_is_the_only_matched_clause(spark, table_path):
    _create(spark, table_path, "append")
    source = spark.createDataFrame([(3, 1.0, "a", "d1"), (3, 2.0, "b", "d1")], SCHEMA)
    report = lakesink.merge(spark, table_path, source, on="t.id = s.id").when_matched_delete().execute()
    assert report.rows_deleted == 1 and _rows(table_path) == sorted(r for r in ROWS if r[0] != 3)


@pytest.mark.parametrize("kind", KINDS)
def test_a_replayed_merge_of_one_batch_changes_the_table_once(spark, table_path, kind):
    _create(spark, table_path, kind)
    batch = spark.createDataFrame([(7, 70.0, "upd", "d1"), (70, 7.0, "ins", "d2")], SCHEMA)

    def upsert(batch_df, batch_id):
        return (lakesink.merge(spark, table_path, batch_df, on="t.id = s.id", commit_user="orders-merge",
                               commit_identifier=batch_id)
                .when_matched_update(set={"amount": "t.amount + s.amount"}).when_not_matched_insert_all().execute())

    first = upsert(batch, 0)
    assert first.committed and first.rows_updated == 1 and first.rows_inserted == 1
    again = upsert(batch, 0)  # the driver died after the commit: foreachBatch runs batch 0 again
    assert again.skipped_replay and latest_snapshot_id(table_path) == 2
    rows = _rows(table_path)
    assert (7, 77.0, "new", "d1") in rows and (70, 7.0, "ins", "d2") in rows and len(rows) == 41
    assert upsert(batch, 1).committed  # the next batch id commits again
    assert (7, 147.0, "new", "d1") in _rows(table_path)


def test_merge_exactly_once_from_foreach_batch(spark, table_path, tmp_path):
    _create(spark, table_path, "keyed")
    source_dir = tmp_path / "source"
    spark.createDataFrame([(1, 11.0, "upd", "d1"), (80, 8.0, "ins", "d2")], SCHEMA).write.parquet(str(source_dir))

    def upsert(batch_df, batch_id):
        (lakesink.merge(spark, table_path, batch_df, on="t.id = s.id", commit_user="orders-merge",
                        commit_identifier=batch_id)
         .when_matched_update_all().when_not_matched_insert_all().execute())

    stream = spark.readStream.schema(SCHEMA).parquet(str(source_dir))
    query = stream.writeStream.foreachBatch(upsert).option("checkpointLocation", str(tmp_path / "chk")) \
        .trigger(availableNow=True).start()
    query.awaitTermination()
    assert query.exception() is None
    snap = snapshots(table_path)[-1]
    assert snap.commit_user == "orders-merge" and snap.commit_identifier == 0
    rows = _rows(table_path)
    assert (1, 11.0, "upd", "d1") in rows and (80, 8.0, "ins", "d2") in rows


# ---------------------------------------------------------------- bad input


_BAD_INPUT = [
    (lambda s, p: lakesink.delete(s, p, where="nope = 1"), ConfigurationError),
    (lambda s, p: lakesink.delete(s, p, where="id = = 1"), ConfigurationError),
    (lambda s, p: lakesink.update(s, p, set={"nope": "1"}), ConfigurationError),
    (lambda s, p: lakesink.update(s, p, set={"amount": "'many'"}, where="id = 1"), SchemaMismatchError),
    (lambda s, p: lakesink.delete(s, p, where="id = 1", commit_user="u"), ConfigurationError),
    (lambda s, p: lakesink.merge(s, p, s.createDataFrame([(1, 1.0, "x", "d1")], SCHEMA), on="t.nope = s.id")
     .when_matched_delete().execute(), ConfigurationError),
    (lambda s, p: lakesink.merge(s, p, s.createDataFrame([(1, 1.0, "x", "d1")], SCHEMA), on="t.id = s.id")
     .when_matched_update(set={"amount": "s.status"}).execute(), SchemaMismatchError),
    (lambda s, p: lakesink.merge(s, p, s.createDataFrame([(1, 1.0, "x", "d1")], SCHEMA), on="t.id = s.id")
     .execute(), ConfigurationError),
]
_BAD_INPUT_IDS = ["unknown-column", "unparsable", "unknown-set-column", "type", "half-identity",
                   "merge-on", "merge-type", "merge-no-clause"]


# Each bad input on one table kind by default (alternating), on the other in ./dev full.
@pytest.mark.parametrize("kind, call, error", [
    pytest.param(kind, call, error, id=f"{name}-{kind}",
                 marks=pytest.mark.full if (i + KINDS.index(kind)) % 2 else ())
    for i, ((call, error), name) in enumerate(zip(_BAD_INPUT, _BAD_INPUT_IDS)) for kind in KINDS])
def test_bad_input_is_refused_and_the_table_is_unchanged(spark, table_path, kind, call, error):
    _create(spark, table_path, kind, ROWS[:6] + ROWS[-4:])
    with pytest.raises(error) as raised:
        call(spark, table_path)
    assert "Nothing was changed" in str(raised.value) or raised.type is ConfigurationError
    assert latest_snapshot_id(table_path) == 1 and _rows(table_path) == sorted(ROWS[:6] + ROWS[-4:])


def test_updating_a_partition_column_of_an_append_table_moves_the_row(spark, table_path):
    _create(spark, table_path, "append", ROWS[:5])
    assert lakesink.update(spark, table_path, set={"dt": "'d9'"}, where="id = 1").rows_updated == 1
    assert _rows(table_path) == sorted([r for r in ROWS[:5] if r[0] != 1] + [(1, 1.0, "new", "d9")])
    from pypaimon.table.file_store_table import FileStoreTable
    splits = FileStoreTable.from_path(table_path).new_read_builder().new_scan().plan().splits()
    assert ("d9",) in {tuple(s.partition.values) for s in splits}


def test_updating_a_primary_key_or_partition_column_of_a_keyed_table_is_refused(spark, table_path):
    _create(spark, table_path, "keyed", ROWS[:5])
    with pytest.raises(ConfigurationError, match="primary-key or partition column"):
        lakesink.update(spark, table_path, set={"id": "id + 100"})
    with pytest.raises(ConfigurationError, match="primary-key or partition column"):
        lakesink.update(spark, table_path, set={"dt": "'d9'"})
    with pytest.raises(ConfigurationError, match="primary-key or partition column"):
        (lakesink.merge(spark, table_path, spark.createDataFrame([(1, 1.0, "x", "d1")], SCHEMA), on="t.id = s.id")
         .when_matched_update(set={"id": "s.id + 1"}).execute())
    assert latest_snapshot_id(table_path) == 1


def test_tables_lakesink_cannot_change_row_by_row_are_refused_by_kind(spark, warehouse):
    postpone = str(warehouse / "postpone")
    from lakesink.paimon.table import tables
    tables.create_table(postpone, pa.schema([pa.field("id", pa.int64(), nullable=False), ("amount", pa.float64())]),
                        [], ["id"], {"bucket": "-2"})
    with pytest.raises(UnsupportedTableError, match="postpone buckets"):
        lakesink.delete(spark, postpone, where="id = 1")
    first_row = str(warehouse / "first_row")
    lakesink.write(spark.createDataFrame(ROWS[:3], SCHEMA), first_row, primary_key=["id"],
                   options={"bucket": "1", "merge-engine": "first-row"})
    with pytest.raises(UnsupportedTableError, match="merge-engine=deduplicate"):
        lakesink.update(spark, first_row, set={"amount": "0"})


# ---------------------------------------------------------------- conflicts and names


def test_a_rewrite_whose_files_another_writer_removed_conflicts_and_an_append_racing_in_is_kept(spark, table_path):
    from lakesink.paimon.table import tables
    from lakesink.paimon.compaction.target import live_files
    from lakesink.paimon.commit.rowlevel_target import RowLevelTarget
    from lakesink.protocol import Committer

    _create(spark, table_path, "append")
    planned = live_files(tables.open_table(table_path))  # what a statement read
    lakesink.write(spark.createDataFrame([(100, 1.0, "late", "d1")], SCHEMA), table_path)  # races in
    ours = RowLevelTarget(table_path, [f for f in planned if f.partition == ("d1",)])
    report = Committer(ours, "stmt-1").commit(1, [])  # the statement deleted every row of d1
    assert report.commit_kind == "OVERWRITE"
    assert _rows(table_path) == sorted([r for r in ROWS if r[3] == "d2"] + [(100, 1.0, "late", "d1")])
    stale = RowLevelTarget(table_path, [f for f in planned if f.partition == ("d2",)][:1])
    lakesink.delete(spark, table_path, where="dt = 'd2' and id >= 0")  # another writer rewrote d2
    before = latest_snapshot_id(table_path)
    with pytest.raises(CommitConflictError, match="File deletion conflicts"):
        Committer(stale, "stmt-2").commit(1, [])
    assert latest_snapshot_id(table_path) == before


def test_row_level_calls_take_table_names_of_the_session_catalog(spark, warehouse):
    lakesink.register(spark, catalog={"warehouse": str(warehouse)})
    try:
        lakesink.catalog(spark).create_database("shop")
        lakesink.write(spark.createDataFrame(ROWS[:5], SCHEMA), "shop.orders", primary_key=["id"],
                       options={"bucket": "1"})
        assert lakesink.delete(spark, "shop.orders", where="id = 0").rows_deleted == 1
        assert lakesink.update(spark, "shop.orders", set={"status": "'done'"}, where="id = 1").rows_updated == 1
        report = (lakesink.merge(spark, "shop.orders", spark.createDataFrame([(9, 9.0, "n", "d1")], SCHEMA),
                                 on="t.id = s.id").when_not_matched_insert_all().execute())
        assert report.rows_inserted == 1
        rows = _rows(str(warehouse / "shop.db" / "orders"))
        assert [r[0] for r in rows] == [1, 2, 3, 4, 9] and rows[0][2] == "done"
    finally:
        lakesink.register(spark, catalog={})


# ---------------------------------------------------------------- rowkind.field as a write option


def test_rowkind_field_naming_a_column_the_table_lacks_is_read_as_the_kind_and_not_stored(spark, table_path):
    _create(spark, table_path, "keyed", ROWS[:5])
    changes = spark.createDataFrame([(1, 0.0, "x", "d1", "-D"), (2, 22.0, "upd", "d1", "+U")], SCHEMA + ", op string")
    lakesink.write(changes, table_path, options={"rowkind.field": "op"})
    assert _rows(table_path) == [(0, 0.0, "test", "d1"), (2, 22.0, "upd", "d1"), (3, 3.0, "test", "d1"),
                                 (4, 4.0, "new", "d1")]
    assert read_table(table_path).column_names == ["id", "amount", "status", "dt"]


def test_row_level_changes_of_a_table_storing_its_rowkind_field_write_the_kinds_into_it(spark, table_path):
    """A keyed table created with rowkind.field=op and an `op` column: each statement's rows carry
    their kind in `op` (-D for deleted keys, +U updated, +I inserted), as the table's other rows do."""
    import glob
    import pyarrow.parquet as pq

    rows = [(i, float(i), "new", "d1", "+I") for i in range(6)]
    lakesink.write(spark.createDataFrame(rows, SCHEMA + ", op string"), table_path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={"bucket": "2", "rowkind.field": "op"})
    before = set(glob.glob(f"{table_path}/dt=d1/bucket-*/*.parquet"))
    assert lakesink.delete(spark, table_path, where="id = 1").rows_deleted == 1
    deleted = set(glob.glob(f"{table_path}/dt=d1/bucket-*/*.parquet")) - before
    written = pa.concat_tables([pq.ParquetFile(f).read() for f in deleted]).to_pylist()
    assert [(r["id"], r["op"], r["_VALUE_KIND"]) for r in written] == [(1, "-D", 3)]
    assert lakesink.update(spark, table_path, set={"amount": "amount * 10"}, where="id = 2").rows_updated == 1
    source = spark.createDataFrame([(3, 33.0, "merged", "d1"), (4, 0.0, "x", "d1"), (9, 9.0, "added", "d1")],
                                   SCHEMA)
    report = (lakesink.merge(spark, table_path, source, on="t.id = s.id")
              .when_matched_delete(condition="s.id = 4").when_matched_update_all().when_not_matched_insert_all()
              .execute())
    assert (report.rows_updated, report.rows_deleted, report.rows_inserted) == (1, 1, 1)
    with pytest.raises(ConfigurationError, match="rowkind.field"):
        lakesink.update(spark, table_path, set={"op": "'-D'"})
    got = {r["id"]: (r["amount"], r["status"], r["op"]) for r in read_table(table_path).to_pylist()}
    assert got == {0: (0.0, "new", "+I"), 2: (20.0, "new", "+U"), 3: (33.0, "merged", "+U"),
                   5: (5.0, "new", "+I"), 9: (9.0, "added", "+I")}


def test_errors_are_lakesink_errors():
    assert issubclass(MultipleMatchError, LakesinkError)


def test_a_statement_puts_the_sessions_cache_setting_back(spark, table_path):
    """Statements cache what they read back uncompressed, for their own jobs only."""
    key = "spark.sql.inMemoryColumnarStorage.compressed"
    _create(spark, table_path, "keyed")
    for preset in (None, "true"):
        if preset is not None:
            spark.conf.set(key, preset)
        try:
            source = spark.createDataFrame([(1, 9.0, "U", "d1")], "id long, amount double, op string, dt string")
            lakesink.merge(spark, table_path, source, on="t.id = s.id and t.dt = s.dt") \
                .when_matched_update(set={"amount": "s.amount"}).execute()
            lakesink.delete(spark, table_path, where="id = 2")
            assert spark.conf.get(key, None) == preset
        finally:
            spark.conf.unset(key)
    assert [r for r in _rows(table_path) if r[0] in (1, 2)] == [(1, 9.0, "new", "d1")]
