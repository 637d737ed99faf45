"""`rowkind.field` naming a column the table does not have: each row's kind, never stored. A Spark
job deletes keys from a table Flink created (its schema has no `op` column), on every write path."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from tests.helpers import PATHS, leftover_files, read_table, write
from tests.spark.test_streaming import source_stream, start

pytestmark = pytest.mark.spark

# As Flink creates a primary-key table: no op column.
FLINK = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
CHANGES = "id long, name string, op string"


def _flink_table(warehouse, name: str) -> str:
    from pypaimon import CatalogFactory, Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table(f"db.{name}", Schema.from_pyarrow_schema(FLINK, primary_keys=["id"],
                                                                  options={"bucket": "2"}), False)
    return str(warehouse / "db.db" / name)


def _schema_of(path):
    from lakesink.paimon.table.tables import open_table
    table = open_table(path)
    return [(f.name, str(f.type)) for f in table.table_schema.fields], table.table_schema.id, \
        dict(table.table_schema.options)


def _state(spark, path):
    """{id: name} as pypaimon reads it, checked against lakesink.read."""
    by_pypaimon = {r["id"]: r["name"] for r in read_table(path).to_pylist()}
    by_lakesink = lakesink.read(spark, path)
    assert by_lakesink.columns == ["id", "name"]
    assert {r["id"]: r["name"] for r in by_lakesink.collect()} == by_pypaimon
    return by_pypaimon


@pytest.mark.parametrize("path_kind", PATHS)
def test_minus_d_rows_delete_keys_of_a_table_without_the_op_column(spark, warehouse, path_kind):
    path = _flink_table(warehouse, f"users_{path_kind}")
    schema_before = _schema_of(path)
    write(spark.createDataFrame([(i, f"n{i}") for i in range(10)], "id long, name string"), path, path_kind)
    changes = spark.createDataFrame([(2, "n2", "-D"), (5, None, "-D"), (7, "seven", "+U"), (11, "new", "+I")],
                                    CHANGES)
    write(changes, path, path_kind, **{"rowkind.field": "op"})
    expected = {i: f"n{i}" for i in range(10) if i not in (2, 5)} | {7: "seven", 11: "new"}
    assert _state(spark, path) == expected
    assert _schema_of(path) == schema_before  # no op column, no rowkind.field stored, no new schema
    assert leftover_files(path) == set()


@pytest.mark.parametrize("mode", ["fast", pytest.param("native", marks=pytest.mark.full)])
def test_a_stream_of_changes_deletes_keys_of_a_table_without_the_op_column(spark, warehouse, tmp_path, mode):
    path = _flink_table(warehouse, f"stream_{mode}")
    schema_before = _schema_of(path)
    lakesink.write(spark.createDataFrame([(i, f"n{i}") for i in range(10)], "id long, name string"), path)
    source, chk = tmp_path / "src", str(tmp_path / "chk")
    source.mkdir()
    arrow = pa.schema([("id", pa.int64()), ("name", pa.string()), ("op", pa.string())])
    batches = [[(1, "n1", "-D"), (3, "three", "+U")], [(4, "n4", "-D"), (12, "twelve", "+I"), (3, None, "-D")]]
    for b, rows in enumerate(batches):
        file = source / f"{b:03d}.parquet"
        pq.write_table(pa.Table.from_pylist([dict(zip(arrow.names, r)) for r in rows], arrow), file)
        os.utime(file, (1_700_000_000 + b, 1_700_000_000 + b))
    query = start(spark, mode, source, path, chk, {"rowkind.field": "op"}, df=source_stream(spark, source, arrow))
    assert query.awaitTermination(300)
    assert query.exception() is None
    if mode == "fast":
        query.lakesink_sink.close()
    else:
        lakesink.await_commits(chk)
    expected = {i: f"n{i}" for i in range(10) if i not in (1, 3, 4)} | {12: "twelve"}
    assert _state(spark, path) == expected
    assert _schema_of(path) == schema_before
