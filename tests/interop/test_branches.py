"""Branches lakesink writes, read by Apache Paimon's Java reader on the branch (the `branch`
table option), key for key: main as it was, the branch with its upserts merged."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

import lakesink
from tests.helpers import write

pytestmark = [pytest.mark.interop, pytest.mark.spark]


def _named(spark, lo: int, hi: int, name: str):
    return spark.range(lo, hi).withColumn("name", F.lit(name))


def _by_key(rows: list[dict]) -> dict:
    assert len({r["id"] for r in rows}) == len(rows), "a key was returned twice"
    return dict(sorted((r["id"], r["name"]) for r in rows))


@pytest.mark.parametrize("table_options", [
    pytest.param({"bucket": "2"}, id="fixed-bucket"),
    pytest.param({}, marks=pytest.mark.full, id="dynamic-bucket"),
])
def test_java_paimon_reads_a_keyed_branch_lakesink_wrote_key_for_key(spark, java_paimon, tmp_path, table_options):
    table = str(tmp_path / "wh" / "db.db" / "orders")
    lakesink.write(_named(spark, 0, 10, "a"), table, primary_key=["id"],
                   options={**table_options, "num-sorted-run.compaction-trigger": "2"})
    lakesink.branch.create(table, "audit")
    write(_named(spark, 5, 15, "b"), table, "fast", branch="audit")
    write(_named(spark, 8, 12, "c"), table, "native", branch="audit")  # then compacted on the branch

    main_rows = {i: "a" for i in range(10)}
    branch_rows = {**main_rows, **{i: "b" for i in range(5, 15)}, **{i: "c" for i in range(8, 12)}}
    read = java_paimon.read_branches(table, ["audit", "main"], tmp_path / "java")
    assert _by_key(read["audit"]) == branch_rows
    assert _by_key(read["main"]) == main_rows


def test_java_paimon_reads_row_level_changes_lakesink_made_on_a_branch(spark, java_paimon, tmp_path):
    table = str(tmp_path / "wh" / "db.db" / "orders")
    lakesink.write(_named(spark, 0, 10, "a"), table, primary_key=["id"], options={"bucket": "2"})
    lakesink.branch.create(table, "audit")
    (lakesink.merge(spark, table, _named(spark, 8, 12, "m"), on="t.id = s.id", branch="audit")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    lakesink.delete(spark, table, where="id < 3", branch="audit")
    lakesink.update(spark, table, set={"name": "'u'"}, where="id = 5", branch="audit")

    main_rows = {i: "a" for i in range(10)}
    branch_rows = {**{i: "a" for i in range(3, 8)}, 5: "u", **{i: "m" for i in range(8, 12)}}
    read = java_paimon.read_branches(table, ["audit", "main"], tmp_path / "java")
    assert _by_key(read["audit"]) == branch_rows
    assert _by_key(read["main"]) == main_rows
