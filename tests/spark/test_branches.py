"""Paimon branches: create, write on both paths, read back (lakesink and pypaimon), fast-forward, delete."""

from __future__ import annotations

import os

import pytest
from pypaimon.table.file_store_table import FileStoreTable

import lakesink
from tests.helpers import PATHS, latest_snapshot_id, read_table, write

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


def test_a_branch_of_a_keyed_table_refuses_writes_before_writing(spark, table_path):
    lakesink.write(spark.range(0, 2), table_path, primary_key=["id"], options={"bucket": "1"})
    lakesink.branch.create(table_path, "k")
    with pytest.raises(lakesink.UnsupportedTableError, match="append tables"):
        lakesink.write(spark.range(5, 6), table_path, options={"branch": "k"})
    assert branch_ids(table_path, "k") == [0, 1]
