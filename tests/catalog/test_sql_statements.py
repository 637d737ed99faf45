"""`lakesink.sql` runs DDL and partition overwrites on the catalog's tables itself, and refuses by
name what it cannot run (never a silent no-op, never Spark's INTERNAL_ERROR). Real Spark; the
tables read back with pypaimon."""

from __future__ import annotations

import os

import pytest

import lakesink
from lakesink.errors import (ConfigurationError, TableAlreadyExistsError, TableNotFoundError,
                             UnsupportedOptionError, UnsupportedStatementError)
from tests.catalog.conftest import KINDS
from tests.helpers import read_table

pytestmark = pytest.mark.spark


def sql(spark, query: str):
    return lakesink.sql(spark, query)


def rows(cat, name: str, *columns: str) -> list[tuple]:
    table = read_table(cat.location(name))
    return sorted(zip(*(table.column(c).to_pylist() for c in columns)))


@pytest.mark.parametrize("cat", KINDS, indirect=True)
def test_drop_table_removes_the_table_from_the_catalog_and_its_files(spark, cat):
    lakesink.write(spark.range(3), "shop.users")
    location = cat.location("shop.users")
    sql(spark, "DROP TABLE shop.users")
    assert "users" not in cat.list_tables("shop")
    assert not os.path.exists(os.path.join(location, "snapshot"))
    with pytest.raises(TableNotFoundError):
        sql(spark, "DROP TABLE shop.users")
    sql(spark, "DROP TABLE IF EXISTS shop.users")


def test_create_table_with_paimon_properties_makes_the_table_lakesink_writes(spark, cat):
    sql(spark, "CREATE TABLE shop.t (id BIGINT, v STRING, dt STRING) PARTITIONED BY (dt) "
               "TBLPROPERTIES ('primary-key' = 'id,dt', 'bucket' = '2', 'merge-engine' = 'deduplicate')")
    table = cat.open("shop.t")
    assert table.primary_keys == ["id", "dt"] and table.partition_keys == ["dt"]
    assert table.table_schema.options["bucket"] == "2"
    assert [f.name for f in table.table_schema.fields] == ["id", "v", "dt"]
    assert [r.tableName for r in sql(spark, "SHOW TABLES IN shop").collect()] == ["t"]
    assert [r.namespace for r in sql(spark, "SHOW DATABASES").collect()] == ["shop"]
    sql(spark, "INSERT INTO shop.t VALUES (1, 'a', 'd1'), (1, 'b', 'd1')")
    assert rows(cat, "shop.t", "id", "v") == [(1, "b")]
    with pytest.raises(TableAlreadyExistsError):
        sql(spark, "CREATE TABLE shop.t (id BIGINT)")
    sql(spark, "CREATE TABLE IF NOT EXISTS shop.t (id BIGINT)")
    assert [f.name for f in cat.open("shop.t").table_schema.fields] == ["id", "v", "dt"]


@pytest.mark.parametrize("statement, error, named", [
    ("CREATE TABLE shop.d (id BIGINT) TBLPROPERTIES ('deletion-vectors.enabled' = 'true', "
     "'row-tracking.enabled' = 'true')", UnsupportedOptionError, "deletion-vectors.enabled"),
    ("CREATE TABLE shop.d (id BIGINT NOT NULL, v STRING NOT NULL) TBLPROPERTIES ('primary-key' = 'id', "
     "'bucket' = '1')", ConfigurationError, "NOT NULL on 'v'"),
    ("CREATE TABLE shop.d (id BIGINT, op STRING) TBLPROPERTIES ('rowkind.field' = 'op')", ConfigurationError,
     "rowkind.field applies to primary-key tables only"),
    ("CREATE OR REPLACE TABLE shop.d (id BIGINT)", UnsupportedStatementError, "replace_table_as"),
])
def test_a_create_table_lakesink_cannot_honour_creates_nothing(spark, cat, statement, error, named):
    with pytest.raises(error, match=named):
        sql(spark, statement)
    assert "d" not in cat.list_tables("shop")


def test_alter_table_add_columns_adds_nullable_columns(spark, cat):
    lakesink.write(spark.range(2).selectExpr("id", "'x' AS v"), "shop.a")
    sql(spark, "ALTER TABLE shop.a ADD COLUMNS (n INT, s STRING)")
    assert [f.name for f in cat.open("shop.a").table_schema.fields] == ["id", "v", "n", "s"]
    sql(spark, "INSERT INTO shop.a VALUES (5, 'y', 7, 'z')")
    assert rows(cat, "shop.a", "id", "n") == [(0, None), (1, None), (5, 7)]
    with pytest.raises(ConfigurationError, match="already exist"):
        sql(spark, "ALTER TABLE shop.a ADD COLUMN n INT")


def test_insert_overwrite_with_a_partition_clause_replaces_exactly_that_partition(spark, cat):
    sql(spark, "CREATE TABLE shop.p (id BIGINT, v STRING, dt STRING) PARTITIONED BY (dt)")
    sql(spark, "INSERT INTO shop.p VALUES (1, 'a', 'd1'), (2, 'b', 'd2'), (3, 'c', 'd3')")
    sql(spark, "INSERT OVERWRITE shop.p PARTITION (dt = 'd1') SELECT 10, 'z'")
    assert rows(cat, "shop.p", "id", "dt") == [(2, "d2"), (3, "d3"), (10, "d1")]
    # A static partition is replaced even by no rows, as in Spark's own tables.
    sql(spark, "INSERT OVERWRITE TABLE shop.p PARTITION (dt = 'd2') SELECT 11, 'y' WHERE false")
    assert rows(cat, "shop.p", "id", "dt") == [(3, "d3"), (10, "d1")]
    # Without a clause the session's partitionOverwriteMode decides (Spark's default: static).
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        sql(spark, "INSERT OVERWRITE shop.p SELECT 12, 'x', 'd3'")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    assert rows(cat, "shop.p", "id", "dt") == [(10, "d1"), (12, "d3")]
    sql(spark, "INSERT OVERWRITE shop.p SELECT 13, 'w', 'd4'")
    assert rows(cat, "shop.p", "id", "dt") == [(13, "d4")]


@pytest.mark.parametrize("statement", ["TRUNCATE TABLE shop.k", "ALTER TABLE shop.k RENAME TO shop.k2",
                                       "ALTER TABLE shop.k SET TBLPROPERTIES ('bucket' = '4')"])
def test_statements_lakesink_sql_cannot_run_are_refused_by_name_and_change_nothing(spark, cat, statement):
    lakesink.write(spark.range(3), "shop.k")
    snapshot = cat.open("shop.k").snapshot_manager().get_latest_snapshot().id
    with pytest.raises(UnsupportedStatementError, match="shop.k"):
        sql(spark, statement)
    assert cat.list_tables("shop") == ["k"]
    assert cat.open("shop.k").snapshot_manager().get_latest_snapshot().id == snapshot
    assert rows(cat, "shop.k", "id") == [(0,), (1,), (2,)]


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "append"])
def test_merge_update_and_delete_statements_run_as_the_row_level_calls(spark, cat, keyed):
    props = "TBLPROPERTIES ('primary-key' = 'id', 'bucket' = '2')" if keyed else ""
    sql(spark, f"CREATE TABLE shop.o (id BIGINT, amount BIGINT, status STRING) {props}")
    sql(spark, "INSERT INTO shop.o VALUES (1, 10, 'new'), (2, 20, 'new'), (3, 30, 'test'), (4, 40, 'new')")
    spark.createDataFrame([(2, 21, "U"), (4, 0, "D"), (5, 50, "I")], "id long, amount long, op string") \
        .createOrReplaceTempView("changes")
    counts = sql(spark, "MERGE INTO shop.o t USING changes s ON t.id = s.id "
                        "WHEN MATCHED AND s.op = 'D' THEN DELETE "
                        "WHEN MATCHED THEN UPDATE SET t.amount = s.amount, status = 'changed' "
                        "WHEN NOT MATCHED THEN INSERT (id, amount, status) VALUES (s.id, s.amount, 'new')").collect()
    assert [tuple(r) for r in counts] == [(3, 1, 1, 1)]
    assert rows(cat, "shop.o", "id", "amount", "status") == [
        (1, 10, "new"), (2, 21, "changed"), (3, 30, "test"), (5, 50, "new")]
    assert [tuple(r) for r in sql(spark, "UPDATE shop.o SET amount = amount * 2 WHERE status = 'new'").collect()] \
        == [(2,)]
    assert [tuple(r) for r in sql(spark, "DELETE FROM shop.o o WHERE o.status = 'test'").collect()] == [(1,)]
    assert rows(cat, "shop.o", "id", "amount", "status") == [(1, 20, "new"), (2, 21, "changed"), (5, 100, "new")]
    by_source = sql(spark, "MERGE INTO shop.o t USING (SELECT CAST(2 AS BIGINT) AS id) s ON t.id = s.id "
                           "WHEN NOT MATCHED BY SOURCE AND t.amount > 50 THEN DELETE "
                           "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET status = 'stale'").collect()
    assert [tuple(r) for r in by_source] == [(2, 1, 1, 0)]
    assert rows(cat, "shop.o", "id", "amount", "status") == [(1, 20, "stale"), (2, 21, "changed")]


def test_row_level_statements_on_a_branch_change_the_branch_only(spark, cat):
    sql(spark, "CREATE TABLE shop.b (id BIGINT, amount BIGINT) TBLPROPERTIES ('primary-key' = 'id', 'bucket' = '2')")
    sql(spark, "INSERT INTO shop.b VALUES (1, 10), (2, 20), (3, 30)")
    lakesink.branch.create("shop.b", "audit")
    spark.createDataFrame([(2, 21), (4, 40)], "id long, amount long").createOrReplaceTempView("changes")
    sql(spark, "MERGE INTO shop.`b$branch_audit` t USING changes s ON t.id = s.id "
               "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    assert [tuple(r) for r in sql(spark, "DELETE FROM shop.b$branch_audit WHERE id = 1").collect()] == [(1,)]
    sql(spark, "UPDATE shop.`b$branch_audit` SET amount = amount + 1 WHERE id = 3")
    assert lakesink.delete(spark, "shop.`b$branch_audit`", where="id = 5").rows_deleted == 0  # the name, as in SQL
    on_branch = lakesink.read(spark, "shop.b", branch="audit").toArrow()
    assert sorted(zip(*(on_branch.column(c).to_pylist() for c in ("id", "amount")))) == [(2, 21), (3, 31), (4, 40)]
    assert rows(cat, "shop.b", "id", "amount") == [(1, 10), (2, 20), (3, 30)]  # main as it was
    with pytest.raises(UnsupportedStatementError, match=r"b\$snapshots"):
        sql(spark, "DELETE FROM shop.`b$snapshots` WHERE id = 2")
    assert rows(cat, "shop.b", "id", "amount") == [(1, 10), (2, 20), (3, 30)]


def test_queries_and_inserts_name_a_branch_and_whole_table_statements_refuse_it(spark, cat):
    lakesink.write(spark.range(3), "shop.q")
    lakesink.branch.create("shop.q", "audit")
    sql(spark, "INSERT INTO shop.`q$branch_audit` VALUES (10), (11)")
    assert [tuple(r) for r in sql(spark, "SELECT count(*), max(id) FROM shop.`q$branch_audit`").collect()] == [(5, 11)]
    both = "SELECT count(*) FROM shop.q m JOIN shop.`q$branch_audit` b ON m.id = b.id"
    assert [tuple(r) for r in sql(spark, both).collect()] == [(3,)]
    for statement, named in [("SELECT * FROM shop.`q$snapshots`", "a query"),
                             ("DROP TABLE shop.`q$branch_audit`", "DROP TABLE"),
                             ("INSERT OVERWRITE shop.`q$branch_audit` SELECT 1", "INSERT OVERWRITE"),
                             ("ALTER TABLE shop.`q$branch_audit` ADD COLUMN v STRING", "ALTER TABLE")]:
        with pytest.raises(UnsupportedStatementError, match=named):
            sql(spark, statement)
    assert rows(cat, "shop.q", "id") == [(0,), (1,), (2,)]  # main as it was, and still there
    assert lakesink.branch.list("shop.q") == ["audit"]


def test_a_name_with_a_branch_or_system_suffix_is_never_taken_for_the_table(spark, cat, tmp_path):
    from tests.spark.test_branches import stream_once

    lakesink.write(spark.range(3), "shop.n")
    lakesink.branch.create("shop.n", "audit")
    with pytest.raises(ConfigurationError, match=r"branch='audit'"):
        lakesink.write(spark.range(10, 12), "shop.n$branch_audit")
    lakesink.write(spark.range(10, 12), "shop.n", options={"branch": "audit"})
    assert sorted(r.id for r in lakesink.read(spark, "shop.`n$branch_audit`").collect()) == [0, 1, 2, 10, 11]
    with pytest.raises(ConfigurationError, match=r"branch 'audit' and branch='main'"):
        lakesink.read(spark, "shop.`n$branch_audit`", branch="main")
    streamed = stream_once(lakesink.read_stream(spark, "shop.`n$branch_audit`", starting="earliest"),
                           str(tmp_path / "chk"))
    assert sorted(r.id for r in streamed) == [0, 1, 2, 10, 11]
    with pytest.raises(ConfigurationError, match="system tables"):
        lakesink.read(spark, "shop.n$snapshots")
    assert rows(cat, "shop.n", "id") == [(0,), (1,), (2,)]
    assert lakesink.read(spark, "shop.n", branch="audit").count() == 5
