"""NOT NULL columns as Delta enforces them: a nullable DataFrame column goes into a NOT NULL
table column (every primary key of a Flink- or CDC-created table, often its partition columns),
and the write fails only when a null actually arrives, naming the column, with nothing committed."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink.errors import NullValueError
from tests.helpers import PATHS, latest_snapshot_id, leftover_files, read_table, write
from tests.spark.test_bad_input import Unchanged
from tests.spark.test_streaming import source_stream, start

pytestmark = pytest.mark.spark

# As Flink creates it: the primary key and the partition column NOT NULL, and one value column.
STRICT = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string(), nullable=False),
                    pa.field("name", pa.string()), pa.field("v", pa.int64(), nullable=False)])
SPARK_SCHEMA = "id long, dt string, name string, v long"  # every column nullable in Spark


def _strict_table(warehouse, name: str, keyed: bool) -> str:
    """A table made by pypaimon (not lakesink), one row written by pypaimon's writer."""
    from pypaimon import CatalogFactory, Schema

    from tests.helpers import pypaimon_append
    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    keys = {"primary_keys": ["id", "dt"], "options": {"bucket": "2"}} if keyed else {}
    catalog.create_table(f"db.{name}", Schema.from_pyarrow_schema(STRICT, partition_keys=["dt"], **keys), False)
    pypaimon_append(catalog.get_table(f"db.{name}"),
                    pa.Table.from_pylist([{"id": 0, "dt": "d0", "name": "zero", "v": 0}], STRICT))
    return str(warehouse / "db.db" / name)


def _rows(path):
    return sorted((r["id"], r["dt"], r["name"], r["v"]) for r in read_table(path).to_pylist())


def _not_null_columns(path):
    from lakesink.paimon.table.tables import open_table
    return [f.name for f in open_table(path).table_schema.fields if not f.type.nullable]


def _assert_null_error(caught, column: str, path_kind: str):
    message = str(caught.value)
    assert f"NOT NULL column '{column}' is null in some row" in message or (
        f"primary-key column '{column}' is null in some row" in message), message
    if path_kind == "fast":  # lakesink's own API raises the typed error
        assert isinstance(caught.value, NullValueError) and caught.value.column == column
    else:  # through Spark's data source API: Spark's error, holding lakesink's
        assert "NullValueError" in message, message


# ./dev full: the native path into an append table (its keyed case runs the same checks in tasks).
@pytest.mark.parametrize("path_kind, keyed", [
    pytest.param(p, k, id=f"{p}-{'keyed' if k else 'append'}",
                 marks=pytest.mark.full if (p, k) == ("native", False) else ())
    for p in PATHS for k in (True, False)])
def test_nullable_columns_go_into_not_null_ones_and_a_null_fails_the_write_naming_it(
        spark, warehouse, path_kind, keyed):
    path = _strict_table(warehouse, f"strict_{path_kind}_{'k' if keyed else 'a'}", keyed)
    good = spark.createDataFrame([(1, "d1", None, 10), (2, "d1", "two", 20)], SPARK_SCHEMA)
    assert all(f.nullable for f in good.schema.fields)
    write(good, path, path_kind)
    assert _rows(path) == [(0, "d0", "zero", 0), (1, "d1", None, 10), (2, "d1", "two", 20)]
    assert _not_null_columns(path) == ["id", "dt", "v"]  # the table's constraints stay

    for column, row in [("v", (3, "d1", "x", None)), ("dt", (4, None, "x", 40)), ("id", (None, "d1", "x", 50))]:
        before = Unchanged(path)
        bad = spark.createDataFrame([(5, "d2", "fine", 5), row], SPARK_SCHEMA)
        with pytest.raises(Exception) as caught:
            write(bad, path, path_kind)
        _assert_null_error(caught, column, path_kind)
        assert "Nothing was written" in str(caught.value)
        before.check()  # no snapshot, no file left
    assert _rows(path) == [(0, "d0", "zero", 0), (1, "d1", None, 10), (2, "d1", "two", 20)]


def test_a_retraction_holding_a_null_in_a_not_null_column_fails_too(spark, warehouse):
    """Every input row is checked, whatever its kind (a -D row with a null value column)."""
    path = _strict_table(warehouse, "strict_kinds", True)
    before = Unchanged(path)
    changes = spark.createDataFrame([(0, "d0", "zero", None, "-D")], SPARK_SCHEMA + ", op string")
    with pytest.raises(NullValueError, match="NOT NULL column 'v'"):
        lakesink.write(changes, path, options={"rowkind.field": "op"})
    before.check()


def _source(directory, batches):
    directory.mkdir(exist_ok=True)
    schema = pa.schema([(f.name, f.type) for f in STRICT])  # nullable, as sources usually are
    for b, rows in enumerate(batches):
        path = directory / f"{b:03d}.parquet"
        if not path.exists():
            pq.write_table(pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema), path)
            os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))  # the file source reads oldest first
    return schema


@pytest.mark.parametrize("mode, keyed", [
    pytest.param(m, k, id=f"{m}-{'keyed' if k else 'append'}", marks=pytest.mark.full if m == "native" else ())
    for m in ("fast", "native") for k in (True, False)])
def test_a_micro_batch_with_a_null_fails_the_query_and_commits_nothing_of_it(spark, warehouse, tmp_path,
                                                                           mode, keyed):
    path = _strict_table(warehouse, f"stream_{mode}_{'k' if keyed else 'a'}", keyed)
    source, chk = tmp_path / "src", str(tmp_path / "chk")
    schema = _source(source, [[(1, "d1", "one", 10), (2, "d1", None, 20)]])
    query = start(spark, mode, source, path, chk, df=source_stream(spark, source, schema))
    query.awaitTermination(300)
    assert query.exception() is None
    assert _rows(path) == [(0, "d0", "zero", 0), (1, "d1", "one", 10), (2, "d1", None, 20)]
    committed = latest_snapshot_id(path)

    _source(source, [[], [(3, "d1", "three", 30), (4, "d1", "four", None)]])
    query = start(spark, mode, source, path, chk, df=source_stream(spark, source, schema))
    with pytest.raises(Exception) as caught:
        query.awaitTermination(300)
    assert "NOT NULL column 'v' is null in some row" in str(caught.value), str(caught.value)
    assert latest_snapshot_id(path) == committed
    assert _rows(path) == [(0, "d0", "zero", 0), (1, "d1", "one", 10), (2, "d1", None, 20)]
    assert leftover_files(path) == set()
