"""Every Spark entry point by name, through the session's catalog (real Spark; read back with pypaimon).

The catalog is set on the shared session for one test and cleared afterwards (`session_catalog`).
"""

from __future__ import annotations

import os

import pytest

import lakesink
from lakesink.errors import (ConfigurationError, DatabaseConnectionError, TableAlreadyExistsError,
                             UnknownOptionError)
from lakesink.spark.catalog import catalog_options
from tests.catalog.conftest import KINDS, catalog_options as options_for, forget_postgres_catalog, rows_of, session_catalog

pytestmark = pytest.mark.spark


# ./dev full: SQLite (PostgreSQL runs the same JDBC catalog code by default).
@pytest.mark.parametrize("cat", [pytest.param(k, marks=pytest.mark.full) if k == "sqlite" else k for k in KINDS],
                         indirect=True)
def test_batch_entry_points_by_name(spark, cat, tmp_path):
    df = spark.range(6).selectExpr("id", "cast(id % 2 as string) as dt")
    report = lakesink.write(df, "shop.orders", partition_by=["dt"])  # a new name: created in the catalog
    assert report.snapshot_id == 1 and cat.list_tables("shop") == ["orders"]
    path = cat.location("shop.orders")
    assert path == f"{cat.warehouse}/shop.db/orders" and rows_of(path) == list(range(6))
    df.write.format("paimon").mode("append").save("shop.orders")                # format("paimon") by name
    assert rows_of(path) == sorted(list(range(6)) * 2)
    assert lakesink.read(spark, "shop.orders", snapshot=1).count() == 6
    assert spark.read.format("paimon").load("paimon.shop.orders").count() == 12
    assert lakesink.compact(spark, "shop.orders", progress=False).commit_kind == "COMPACT"
    assert lakesink.history("shop.orders", catalog=cat.config.options).num_rows == 3
    assert lakesink.resolve_table("shop.orders", cat.config.options).path == path
    # a path keeps working beside names, and never enters the catalog
    lakesink.write(df, str(tmp_path / "elsewhere" / "t"))
    assert rows_of(str(tmp_path / "elsewhere" / "t")) == list(range(6)) and cat.list_tables("shop") == ["orders"]


def test_format_paimon_creates_a_new_name_in_the_catalog(spark, cat):
    """Also: the catalog registered for this test (each test registers another one on the shared
    session) is the one the data source's processes resolve through."""
    spark.range(3).write.format("paimon").mode("append").save("shop.events")
    assert cat.list_tables("shop") == ["events"] and rows_of(cat.location("shop.events")) == [0, 1, 2]


# One catalog kind by default (names resolve as for batch writes, tested in each kind); ./dev full: all.
@pytest.mark.parametrize("cat", [pytest.param(k, marks=[] if k == "sqlite" else pytest.mark.full) for k in KINDS],
                         indirect=True)
def test_streams_by_name(spark, cat, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": pa.array(range(5), pa.int64())}), str(tmp_path / "in" / "a.parquet"))
    source = spark.readStream.schema("id long").parquet(str(tmp_path / "in"))
    query = lakesink.stream(source, "shop.fast", checkpoint=str(tmp_path / "chk1"), trigger="availableNow")
    query.awaitTermination(120)
    query = (source.writeStream.format("paimon").option("checkpointLocation", str(tmp_path / "chk2"))
             .trigger(availableNow=True).start("shop.native"))
    query.awaitTermination(120)
    assert query.exception() is None and cat.list_tables("shop") == ["fast", "native"]
    assert rows_of(cat.location("shop.fast")) == rows_of(cat.location("shop.native")) == list(range(5))
    reading = (lakesink.read_stream(spark, "shop.fast").writeStream.format("memory").queryName("by_name")
               .trigger(availableNow=True).start())
    reading.awaitTermination(120)
    assert sorted(r.id for r in spark.table("by_name").collect()) == list(range(5))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_create_table_as_by_name_enters_the_catalog_only_if_the_job_succeeds(spark, tmp_path, kind):
    from pyspark.sql.functions import udf

    options = options_for(kind, tmp_path)
    try:
        with session_catalog(spark, options) as cat:
            cat.create_database("shop")

            @udf("long")
            def boom(x):
                raise ValueError("task failed on purpose")

            with pytest.raises(Exception, match="task failed on purpose"):
                lakesink.create_table_as(spark.range(4, numPartitions=2).select(boom("id").alias("id")), "shop.daily")
            assert cat.list_tables("shop") == [] and os.listdir(cat.database_path("shop")) == []
            lakesink.create_table_as(spark.range(4), "shop.daily")
            assert cat.list_tables("shop") == ["daily"] and rows_of(cat.location("shop.daily")) == [0, 1, 2, 3]
            with pytest.raises(TableAlreadyExistsError):
                lakesink.create_table_as(spark.range(1), "shop.daily")
            lakesink.replace_table_as(spark.range(2).selectExpr("id * 10 AS id"), "shop.daily")
            assert rows_of(cat.location("shop.daily")) == [0, 10] and os.listdir(cat.database_path("shop")) == ["daily"]
    finally:
        forget_postgres_catalog(options)


def test_sql_names_catalog_tables(spark, cat):
    lakesink.write(spark.range(5).selectExpr("id", "id * 2 AS v"), "shop.orders")
    lakesink.create_table_as(spark.range(3).selectExpr("id", "id * 2 AS v"), "shop.daily")
    joined = lakesink.sql(spark, "SELECT count(*) AS n, sum(shop.orders.v) AS s FROM shop.orders "
                                 "JOIN paimon.shop.daily d ON shop.orders.id = d.id WHERE 'shop.orders' <> ''")
    assert [tuple(r) for r in joined.collect()] == [(3, 6)]
    lakesink.sql(spark, "INSERT INTO shop.daily SELECT * FROM shop.orders WHERE id >= 3")
    assert rows_of(cat.location("shop.daily")) == [0, 1, 2, 3, 4]


def test_saveAsTable_and_toTable_are_refused_as_documented(spark, cat, tmp_path):
    """Spark hands a Python data source neither the name nor a location for these (Spark 4.3):
    lakesink refuses with what to write instead (docs/catalogs.md)."""
    with pytest.raises(Exception, match="SCHEMA_NOT_FOUND"):  # Spark looks `shop` up in its own catalog
        spark.range(3).write.format("paimon").mode("append").saveAsTable("shop.orders")
    with pytest.raises(Exception, match=r"saveAsTable.*\.save\('shop\.orders'\)"):
        spark.range(3).write.format("paimon").mode("append").saveAsTable("lakesink_orders")
    assert not spark.catalog.tableExists("lakesink_orders")  # Spark drops the table it created
    source = spark.readStream.format("rate").load()
    try:
        query = (source.writeStream.format("paimon").option("checkpointLocation", str(tmp_path / "chk"))
                 .trigger(availableNow=True).toTable("lakesink_events"))
        with pytest.raises(Exception, match=r"writeStream\.toTable"):
            query.awaitTermination(120)
    finally:
        spark.sql("DROP TABLE IF EXISTS lakesink_events")  # Spark's own entry, which it keeps
    assert cat.list_tables("shop") == []


def test_bad_catalog_options_leave_the_session_as_it_was(spark, tmp_path):
    with pytest.raises(UnknownOptionError, match="'wearhouse'.*Valid catalog options"):
        lakesink.register(spark, catalog={"wearhouse": str(tmp_path)})
    with pytest.raises(DatabaseConnectionError, match="Cannot reach"):
        lakesink.register(spark, catalog={"metastore": "jdbc", "uri": "jdbc:postgresql://127.0.0.1:1/x",
                                          "warehouse": str(tmp_path)})
    assert catalog_options(spark) == {}
    with pytest.raises(ConfigurationError, match="no catalog"):
        lakesink.write(spark.range(1), "shop.orders")
    with pytest.raises(ConfigurationError, match="no catalog"):
        lakesink.catalog(spark)
