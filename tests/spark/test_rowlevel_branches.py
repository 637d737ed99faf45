"""DELETE / UPDATE / MERGE on a Paimon branch: the branch ends as the same statements leave a
table on main, main keeps its rows and snapshots, identities are the branch's. Read back with
pypaimon on the branch and with lakesink.read."""

from __future__ import annotations

import pytest
from pypaimon.table.file_store_table import FileStoreTable

import lakesink
from lakesink.errors import BranchNotFoundError, ConfigurationError
from tests.helpers import latest_snapshot_id, read_table

pytestmark = pytest.mark.spark

SCHEMA = "id long, amount double, status string, dt string"
ROWS = [(i, float(i), "new" if i % 3 else "test", "d1" if i < 20 else "d2") for i in range(40)]
CHANGES = [(5, 50.0, "U", "d1"), (6, 0.0, "D", "d1"), (25, 250.0, "U", "d2"), (90, 9.0, "I", "d2")]
KINDS = {
    "append": dict(partition_by=["dt"]),
    "keyed": dict(primary_key=["id", "dt"], partition_by=["dt"], options={"bucket": "2"}),
    "dynamic": dict(primary_key=["id", "dt"], partition_by=["dt"]),
}


def _create(spark, path, kind):
    lakesink.write(spark.createDataFrame(ROWS, SCHEMA).repartition(3), path, **KINDS[kind])


def _tuples(table) -> list[tuple]:
    return sorted((r["id"], r["amount"], r["status"], r["dt"]) for r in table.to_pylist())


def _on_branch(path: str, branch: str) -> list[tuple]:
    """The branch's rows as pypaimon reads them, the table opened with the option `branch`."""
    table = FileStoreTable.from_path(path).copy({"branch": branch})
    builder = table.new_read_builder()
    return _tuples(builder.new_read().to_arrow(builder.new_scan().plan().splits()))


def _statements(spark, path, branch=None):
    """A DELETE, an UPDATE and a MERGE, each one snapshot; returns their reports."""
    source = spark.createDataFrame(CHANGES, "id long, amount double, op string, dt string")
    return [
        lakesink.delete(spark, path, where="dt = 'd1' and status = 'test' and id < 10", branch=branch),
        lakesink.update(spark, path, set={"status": "'fixed'"}, where="id in (1, 21)", branch=branch),
        (lakesink.merge(spark, path, source, on="t.id = s.id and t.dt = s.dt", branch=branch)
         .when_matched_delete(condition="s.op = 'D'")
         .when_matched_update(set={"amount": "s.amount"})
         .when_not_matched_insert(values={"id": "s.id", "amount": "s.amount", "status": "'new'", "dt": "s.dt"})
         .execute()),
    ]


@pytest.mark.parametrize("kind", list(KINDS))
def test_row_level_changes_on_a_branch_leave_it_as_on_main_and_main_untouched(spark, tmp_path, kind):
    path, twin = str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "wh" / "db.db" / "twin")
    _create(spark, path, kind)
    _create(spark, twin, kind)
    assert lakesink.branch.create(path, "audit") == 1

    on_branch = _statements(spark, path, branch="audit")
    on_main = _statements(spark, twin)

    expected = _tuples(read_table(twin))
    assert expected != sorted(ROWS)  # the statements changed something
    assert _on_branch(path, "audit") == expected
    assert _tuples(lakesink.read(spark, path, branch="audit").toArrow()) == expected
    assert [(r.rows_deleted, r.rows_updated, r.rows_inserted) for r in on_branch] == \
           [(r.rows_deleted, r.rows_updated, r.rows_inserted) for r in on_main]
    assert [r.snapshot_id for r in on_branch] == [2, 3, 4]  # the branch's snapshots, after the one it started at
    assert latest_snapshot_id(path) == 1 and _tuples(read_table(path)) == sorted(ROWS)  # main as it was


def test_a_merge_replayed_on_a_branch_is_skipped_there_and_its_identity_is_the_branchs(spark, table_path):
    _create(spark, table_path, "keyed")
    lakesink.branch.create(table_path, "b1")
    source = spark.createDataFrame([(1, 100.0, "U", "d1")], "id long, amount double, op string, dt string")

    def merge(branch):
        return (lakesink.merge(spark, table_path, source, on="t.id = s.id and t.dt = s.dt", branch=branch,
                               commit_user="orders-merge", commit_identifier=7)
                .when_matched_update(set={"amount": "s.amount"}).execute())

    first, again = merge("b1"), merge("b1")
    assert first.rows_updated == 1 and not first.skipped_replay
    assert again.skipped_replay and again.snapshot_id is None
    assert [r for r in _on_branch(table_path, "b1") if r[0] == 1] == [(1, 100.0, "new", "d1")]
    assert latest_snapshot_id(table_path) == 1
    on_main = merge(None)  # the same identity on main is main's first
    assert not on_main.skipped_replay and on_main.snapshot_id == 2
    assert [r for r in _tuples(read_table(table_path)) if r[0] == 1] == [(1, 100.0, "new", "d1")]


def test_a_row_level_change_on_a_missing_branch_changes_nothing(spark, table_path):
    _create(spark, table_path, "append")
    with pytest.raises(BranchNotFoundError, match="nope"):
        lakesink.delete(spark, table_path, where="id = 1", branch="nope")
    with pytest.raises(ConfigurationError, match="branch"):
        lakesink.delete(spark, f"{table_path}$branch_a", where="id = 1", branch="b")
    assert latest_snapshot_id(table_path) == 1 and _tuples(read_table(table_path)) == sorted(ROWS)
