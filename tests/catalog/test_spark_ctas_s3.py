"""CREATE / REPLACE TABLE AS by name through real Spark, a JDBC catalog (SQLite, PostgreSQL) and the
S3-compatible test server; read back with pypaimon. Credentials reach the store only as options.
"""

from __future__ import annotations


import pytest

import lakesink
from lakesink.errors import SchemaMismatchError, UnsupportedTableError
from lakesink.paimon.catalog import reservations
from tests.catalog.conftest import forget_postgres_catalog, session_catalog, s3_catalog_options
from tests.s3server import s3_bucket
from tests.staged import read_back, snapshot_list

pytestmark = [pytest.mark.spark, pytest.mark.full]  # Spark CTAS on S3 (the local one runs by default): ./dev full
BUCKET = "lakesink-spark-ctas"


@pytest.fixture(scope="module")
def s3():
    with s3_bucket(BUCKET) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def cat(request, spark, tmp_path, s3):
    options = s3_catalog_options(request.param, tmp_path, s3, BUCKET)
    with session_catalog(spark, options) as catalog:
        catalog.create_database("shop")
        yield catalog
    forget_postgres_catalog(options)


def _objects(s3, cat, name="shop.daily") -> list[str]:
    prefix = cat.location(name)[len(f"s3://{BUCKET}/"):] + "/"
    return [o["Key"] for o in s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


def _reserved(cat) -> list:
    return cat._call(reservations.list_all)


def _read(cat, name="shop.daily"):
    return read_back(cat.location(name), cat.config.fs_options)


def _df(spark, n, offset=0):
    return spark.range(n).selectExpr(f"id + {offset} as id", "cast(id % 2 as string) as dt").repartition(2)


def test_create_table_as_by_name_on_s3_enters_the_catalog_and_reads_back(spark, cat, s3):
    lakesink.create_table_as(_df(spark, 20), "shop.daily", partition_by=["dt"], via="native")
    assert cat.list_tables("shop") == ["daily"] and _reserved(cat) == []
    assert sorted(_read(cat).column("id").to_pylist()) == list(range(20))
    assert cat.open("shop.daily").table_schema.partition_keys == ["dt"]
    assert lakesink.read(spark, "shop.daily").count() == 20  # by name, the catalog's storage options


def test_a_failing_job_leaves_no_catalog_entry_no_reservation_and_no_files(spark, cat, s3):
    from pyspark.sql.functions import udf

    @udf("long")
    def boom(value):
        if value == 7:
            raise ValueError("row 7 fails on purpose")
        return value

    with pytest.raises(Exception, match="on purpose"):
        lakesink.create_table_as(_df(spark, 20).select(boom("id").alias("id"), "dt"), "shop.daily", via="native")
    assert cat.list_tables("shop") == [] and _reserved(cat) == [] and _objects(s3, cat) == []


def test_the_fast_path_is_refused_before_anything_is_reserved_or_written(spark, cat, s3):
    with pytest.raises(UnsupportedTableError, match="via='native'"):
        lakesink.create_table_as(_df(spark, 5), "shop.daily")
    assert cat.list_tables("shop") == [] and _reserved(cat) == [] and _objects(s3, cat) == []


def test_replace_table_as_is_one_overwrite_snapshot_of_the_same_table(spark, cat, s3):
    lakesink.replace_table_as(_df(spark, 4), "shop.daily", partition_by=["dt"], via="native")  # new: a create
    assert sorted(_read(cat).column("id").to_pylist()) == [0, 1, 2, 3]
    lakesink.replace_table_as(_df(spark, 3, offset=100), "shop.daily", partition_by=["dt"], via="native")
    assert sorted(_read(cat).column("id").to_pylist()) == [100, 101, 102]
    snaps = snapshot_list(cat.location("shop.daily"), cat.config.fs_options)
    assert [s.commit_kind for s in snaps] == ["APPEND", "OVERWRITE"]
    assert cat.list_tables("shop") == ["daily"] and _reserved(cat) == []


def test_replace_table_as_with_another_schema_is_refused_and_nothing_changes(spark, cat, s3):
    lakesink.create_table_as(_df(spark, 4), "shop.daily", partition_by=["dt"], via="native")
    before = _objects(s3, cat)
    other = spark.range(3).selectExpr("cast(id as string) as name")
    with pytest.raises(SchemaMismatchError, match="OVERWRITE snapshot of the same table.*drop_table"):
        lakesink.replace_table_as(other, "shop.daily", via="native")
    with pytest.raises(SchemaMismatchError, match=r"partition keys \[\] instead of \['dt'\]"):
        lakesink.replace_table_as(_df(spark, 2), "shop.daily", via="native")
    assert _objects(s3, cat) == before and sorted(_read(cat).column("id").to_pylist()) == [0, 1, 2, 3]


def test_a_spark_driver_killed_before_the_snapshot_leaves_no_entry_and_clean_staging_removes_its_files(
        spark, cat, s3, tmp_path):
    """SIGKILL of the whole driver (JVM, Python workers, commit process) once every task has written
    its files in place and before the snapshot: the name stays out of the catalog (refused by
    name), its reservation stays, and clean_staging removes the files and the reservation."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from lakesink.errors import TableNotFoundError

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "LAKESINK_CRASH_AT": "tasks-done",
           "LAKESINK_CRASH_COUNTER": str(tmp_path / "crash-counter")}
    proc = subprocess.run([sys.executable, "-m", "tests.catalog.ctas_spark_child", json.dumps(cat.config.options),
                           "shop.daily"], env=env, capture_output=True, text=True, timeout=600,
                          start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert cat.list_tables("shop") == [] and len(_reserved(cat)) == 1 and _objects(s3, cat)
    with pytest.raises(TableNotFoundError, match="being created"):
        lakesink.read(spark, "shop.daily")
    assert cat.clean_staging() == [cat.location("shop.daily")]
    assert _objects(s3, cat) == [] and _reserved(cat) == [] and cat.list_tables("shop") == []
    lakesink.create_table_as(_df(spark, 3), "shop.daily", via="native")
    assert sorted(_read(cat).column("id").to_pylist()) == [0, 1, 2]


def test_the_spark_native_entry_points_by_name_on_s3(spark, cat, s3, tmp_path):
    """format("paimon") batch and stream, reads and SQL by name on an S3 warehouse: the catalog's
    storage options reach every task (the fast path is refused here: no S3A connector)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _df(spark, 6).write.format("paimon").mode("append").option("partition", "dt").save("shop.orders")
    assert cat.list_tables("shop") == ["orders"]
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": pa.array(range(100, 104), pa.int64()), "dt": ["0", "1", "0", "1"]}),
                   str(tmp_path / "in" / "a.parquet"))
    source = spark.readStream.schema("id long, dt string").parquet(str(tmp_path / "in"))
    query = (source.writeStream.format("paimon").option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start("shop.orders"))
    query.awaitTermination(120)
    assert query.exception() is None
    want = list(range(6)) + list(range(100, 104))
    assert sorted(_read(cat, "shop.orders").column("id").to_pylist()) == want
    assert len(snapshot_list(cat.location("shop.orders"), cat.config.fs_options)) == 2
    assert sorted(r.id for r in lakesink.read(spark, "shop.orders", snapshot=1).collect()) == list(range(6))
    assert lakesink.sql(spark, "SELECT count(*) AS n FROM shop.orders").collect()[0].n == 10
    with pytest.raises(UnsupportedTableError, match="hadoop-aws"):
        lakesink.write(_df(spark, 1), "shop.orders")
