"""spark.keyed_read: a deduplicate table merged on read by Spark, compared with pypaimon's read of
the same snapshot (files at several levels, updates and deletes across writes)."""

from __future__ import annotations

import lakesink
from lakesink.paimon.read import scan
from lakesink.paimon.table.tables import open_table
from lakesink.spark import keyed_read
from lakesink.spark.reader import spark_schema
from tests.helpers import read_table

SCHEMA = "id long, v string, dt string, op string"


def _write(spark, path, rows, **kwargs):
    lakesink.write(spark.createDataFrame(rows, SCHEMA).repartition(3), path, **kwargs)


def _merged(spark, path):
    table = open_table(path)
    planned = scan.plan_snapshot(table, table.snapshot_manager().get_latest_snapshot())
    assert keyed_read.blockers(table, planned) == []
    return keyed_read.read_merged(spark, table, planned, spark_schema(table))


def test_spark_merges_versions_across_levels_and_writes_as_pypaimon_reads_them(spark, table_path):
    opts = {"bucket": "2", "rowkind.field": "op"}
    _write(spark, table_path, [(i, f"a{i}", "a" if i % 2 else "b", "+I") for i in range(60)],
           primary_key=["id", "dt"], partition_by=["dt"], options=opts)
    lakesink.compact(spark, table_path, partitions=[{"dt": "a"}], progress=False)  # a: one level-5 run
    _write(spark, table_path, [(i, f"b{i}", "a" if i % 2 else "b", "+U") for i in range(0, 60, 3)]
           + [(i, "", "a" if i % 2 else "b", "-D") for i in range(1, 60, 7)]
           + [(i, f"n{i}", "a", "+I") for i in range(101, 111, 2)])
    _write(spark, table_path, [(i, f"c{i}", "a" if i % 2 else "b", "+U") for i in range(0, 60, 5)]
           + [(i, f"again{i}", "a" if i % 2 else "b", "+I") for i in range(1, 30, 7)])  # deleted, then back
    expected = sorted((r["id"], r["v"], r["dt"]) for r in read_table(table_path).to_pylist())
    got = sorted(tuple(r) for r in _merged(spark, table_path).select("id", "v", "dt").collect())
    assert got == expected and len(got) > 50


def test_a_statement_using_only_the_key_reads_only_the_key(spark, table_path):
    _write(spark, table_path, [(i, f"a{i}", "d", "x") for i in range(20)], primary_key=["id"],
           options={"bucket": "2"})
    _write(spark, table_path, [(i, f"b{i}", "d", "x") for i in range(10)])
    plan = _merged(spark, table_path).select("id")._jdf.queryExecution().executedPlan().toString()
    assert "ReadSchema: struct<_SEQUENCE_NUMBER:bigint,_VALUE_KIND:tinyint,id:bigint>" in plan


def test_tables_spark_cannot_merge_itself_say_why(spark, table_path):
    _write(spark, table_path, [(1, "a", "d", "x")], primary_key=["id"],
           options={"bucket": "1", "sequence.field": "v"})
    table = open_table(table_path)
    planned = scan.plan_snapshot(table, table.snapshot_manager().get_latest_snapshot())
    assert keyed_read.blockers(table, planned) == ["sequence.field orders the versions"]


def test_a_merge_reads_only_the_target_files_in_the_sources_key_range(spark, table_path):
    from lakesink.filters import Filter
    from lakesink.spark.merge import _equated
    from lakesink.spark.rowlevel_statement import open_statement, read_target

    _write(spark, table_path, [(i, "a", "d", "x") for i in range(100)], primary_key=["id"], options={"bucket": "2"})
    old = {f.file_name for f in scan.plan_snapshot(open_table(table_path), open_table(table_path)
                                                   .snapshot_manager().get_latest_snapshot()).files}
    _write(spark, table_path, [(i, "b", "d", "x") for i in range(1000, 1100)])
    assert _equated("(s.id = t.`id`) AND t.dt = s.dt AND t.v > 'a'", "t", "s") == [("id", "id"), ("dt", "dt")]
    assert _equated("t.id = s.id OR t.v = s.v", "t", "s") == []

    stmt = open_statement(spark, table_path, None, None, "test")
    read = read_target(stmt, conjuncts=[Filter("id", ">=", 1000), Filter("id", "<=", 1010)]).inputFiles()
    assert read and not {f.rsplit("/", 1)[-1] for f in read} & old

    source = spark.createDataFrame([(i, f"new{i}", "d", "x") for i in range(1000, 1010, 2)], SCHEMA)
    report = (lakesink.merge(spark, table_path, source, on="t.id = s.id")
              .when_matched_update(set={"v": "s.v"}).when_not_matched_insert_all().execute())
    assert (report.rows_updated, report.rows_inserted) == (5, 0)
    rows = {r["id"]: r["v"] for r in read_table(table_path).to_pylist()}
    assert len(rows) == 200 and rows[1002] == "new1002" and rows[1001] == "b" and rows[2] == "a"


def test_statements_narrow_the_merge_to_keys_some_version_matches_and_act_on_the_last_version(spark, table_path):
    """A DELETE / UPDATE / MERGE merges only the keys one of whose stored versions its condition
    picks; what it acts on is still each key's last version: a key whose older version matches
    and last does not stays, and the reverse is acted on."""
    _write(spark, table_path, [(i, "old-hit" if i % 2 else "old-miss", "d", "x") for i in range(40)],
           primary_key=["id"], options={"bucket": "2"})
    _write(spark, table_path, [(i, "new-miss" if i % 2 else "new-hit", "d", "x") for i in range(20)])
    # Keys 0..19: odd ones had a matching older version only; even ones match now. 20..39: one version.
    picked = []
    table = open_table(table_path)
    planned = scan.plan_snapshot(table, table.snapshot_manager().get_latest_snapshot())
    narrowed = keyed_read.read_merged(spark, table, planned, spark_schema(table), narrow=lambda versions: (
        picked.append(1), versions.where("v LIKE '%-hit'"))[1])
    assert picked and "BroadcastHashJoin" in narrowed._jdf.queryExecution().executedPlan().toString()
    assert sorted(r["id"] for r in narrowed.where("v LIKE '%-hit'").collect()) == \
        sorted([*range(0, 20, 2), *range(21, 40, 2)])

    report = lakesink.delete(spark, table_path, where="v = 'new-hit'")
    assert report.rows_deleted == 10
    lakesink.update(spark, table_path, set={"v": "'updated'"}, where="v = 'old-hit'")
    source = spark.createDataFrame([(i, "merged", "d", "x") for i in range(0, 40, 3)], SCHEMA)
    # Keys 1..19 odd hold an old-hit version under their last (new-miss): no match, so inserted.
    report = (lakesink.merge(spark, table_path, source, on="t.id = s.id AND t.v = 'old-hit'")
              .when_matched_update(set={"v": "s.v"})
              .when_not_matched_insert(values={"id": "s.id", "v": "'inserted'", "dt": "s.dt", "op": "s.op"})
              .execute())
    assert (report.rows_updated, report.rows_inserted) == (0, 14)
    expected = {i: "new-miss" for i in range(1, 20, 2)}
    expected.update({i: "updated" if i % 2 else "old-miss" for i in range(20, 40)})
    expected.update({i: "inserted" for i in range(0, 40, 3)})
    got = {r["id"]: r["v"] for r in read_table(table_path).to_pylist()}
    assert got == expected
