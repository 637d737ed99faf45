"""Every Spark type Paimon stores round-trips exactly, on both batch paths.

The source DataFrame is collected (as Arrow, so timestamps keep their time zone
and nothing goes through the local clock) and compared row for row with what
pypaimon itself reads back.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import types as T

import lakesink
from tests.helpers import leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc

SCHEMA = T.StructType([
    T.StructField("id", T.IntegerType()),
    T.StructField("i8", T.ByteType()),
    T.StructField("i16", T.ShortType()),
    T.StructField("i32", T.IntegerType()),
    T.StructField("i64", T.LongType()),
    T.StructField("f32", T.FloatType()),
    T.StructField("f64", T.DoubleType()),
    T.StructField("d9", T.DecimalType(9, 2)),
    T.StructField("d18", T.DecimalType(18, 3)),
    T.StructField("d38", T.DecimalType(38, 10)),
    T.StructField("s", T.StringType()),
    T.StructField("b", T.BinaryType()),
    T.StructField("flag", T.BooleanType()),
    T.StructField("day", T.DateType()),
    T.StructField("ts", T.TimestampType()),
    T.StructField("ts_ntz", T.TimestampNTZType()),
    T.StructField("ints", T.ArrayType(T.IntegerType())),
    T.StructField("words", T.ArrayType(T.StringType())),
    T.StructField("props", T.MapType(T.StringType(), T.LongType())),
    T.StructField("rec", T.StructType([
        T.StructField("a", T.IntegerType()),
        T.StructField("b", T.StringType()),
        T.StructField("c", T.ArrayType(T.DoubleType())),
    ])),
])

D9_MAX, D18_MAX = Decimal("9999999.99"), Decimal("999999999999999.999")
D38_MAX = Decimal("9999999999999999999999999999.9999999999")
D38_MIN = Decimal("-9999999999999999999999999999.9999999999")  # not -D38_MAX: 28-digit context
LONG_TEXT = "ünïcødé ✓ 日本語 " * 400  # > 4 KB: Parquet keeps no min/max for it

ROWS = [
    (0, -128, -32768, -2**31, -2**63, float("-inf"), float("-inf"), -D9_MAX, -D18_MAX, D38_MIN,
     "", b"", False, dt.date(1, 1, 1), dt.datetime(1900, 1, 1, tzinfo=UTC), dt.datetime(1900, 1, 1),
     [], [], {}, (0, "", [])),
    (1, 127, 32767, 2**31 - 1, 2**63 - 1, float("inf"), float("inf"), D9_MAX, D18_MAX, D38_MAX,
     LONG_TEXT, bytes(range(256)) * 20, True, dt.date(9999, 12, 31),
     dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC), dt.datetime(2262, 4, 11, 23, 47, 16, 854775),
     [1, None, 3], ["x", None], {"a": 1, "b": None}, (1, None, [1.5, None])),
    (2, 0, 0, 0, 0, float("nan"), float("nan"), Decimal("0.01"), Decimal("-0.001"),
     Decimal("0.0000000001"), "héllo\nworld\x00", b"\x00\xff", None, dt.date(1969, 12, 31),
     dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), dt.datetime(1970, 1, 1),
     None, [LONG_TEXT], {"k": -1}, None),
    (3, 7, -7, 123456, -123456789012, 1.5, -2.5e-300, Decimal("12.34"), Decimal("5.000"),
     Decimal("-1.5"), "plain", b"bytes", True, dt.date(2024, 2, 29),
     dt.datetime(2024, 2, 29, 12, 34, 56, 123456, tzinfo=UTC), dt.datetime(2024, 2, 29, 12, 34, 56, 123456),
     [2**31 - 1], ["a", "b"], {"x": 2**63 - 1}, (-1, "nested", [float("nan"), float("inf")])),
    (4,) + (None,) * (len(SCHEMA.fields) - 1),  # nulls in every column
]


def _canon(value):
    """A comparable form: NaN equal to itself, aware datetimes in UTC, maps as sorted pairs."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return ("utc", value.astimezone(UTC).replace(tzinfo=None))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return ("map", sorted((_canon(k), _canon(v)) for k, v in value))
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    return value


def rows_of(table: pa.Table, key: str = "id") -> list[dict]:
    table = table.sort_by(key)
    return [{k: _canon(v) for k, v in row.items()} for row in table.to_pylist()]


def source_rows(df) -> list[dict]:
    return rows_of(df.toArrow())


def write_both_ways(df, path_fast: str, path_native: str, partition_by=None) -> None:
    lakesink.write(df, path_fast, partition_by=partition_by)
    writer = df.write.format("paimon").mode("append")
    if partition_by:
        writer = writer.option("partition", ",".join(partition_by))
    writer.save(path_native)


@pytest.fixture(scope="module")
def typed_df(spark):
    return spark.createDataFrame(ROWS, SCHEMA).repartition(2)


@pytest.mark.parametrize("path_kind", ["fast", "native"])
def test_every_type_round_trips_exactly(spark, typed_df, warehouse, path_kind):
    path = str(warehouse / "db.db" / f"types_{path_kind}")
    if path_kind == "fast":
        lakesink.write(typed_df, path)
    else:
        typed_df.write.format("paimon").mode("append").save(path)
    back = read_table(path)
    assert rows_of(back) == source_rows(typed_df)
    assert len(snapshots(path)) == 1
    assert leftover_files(path) == set()


def test_spark_timestamp_kinds_map_to_paimons(spark, typed_df, warehouse):
    path = str(warehouse / "db.db" / "ts_kinds")
    lakesink.write(typed_df.select("id", "ts", "ts_ntz", "d38", "i8", "b"), path)
    from pypaimon.table.file_store_table import FileStoreTable
    types = {f.name: str(f.type) for f in FileStoreTable.from_path(path).table_schema.fields}
    assert types["ts"].startswith("TIMESTAMP_LTZ(6)") or types["ts"].startswith("TIMESTAMP(6) WITH LOCAL TIME ZONE")
    assert types["ts_ntz"].startswith("TIMESTAMP(6)") and "LOCAL" not in types["ts_ntz"]
    assert types["d38"].startswith("DECIMAL(38, 10)")
    assert types["i8"].startswith("TINYINT") and types["b"].startswith("BYTES")


PARTITION_SCHEMA = T.StructType([
    T.StructField("id", T.LongType()),
    T.StructField("p_str", T.StringType()),
    T.StructField("p_int", T.IntegerType()),
    T.StructField("p_date", T.DateType()),
    T.StructField("v", T.StringType()),
])
PARTITION_ROWS = [
    (1, "a", 1, dt.date(2024, 1, 1), "one"),
    (2, "a", 1, dt.date(2024, 1, 1), "two"),
    (3, "b", 2, dt.date(1970, 1, 1), "three"),
    (4, None, None, None, "all-null"),
    (5, "a b/c=d", -3, dt.date(1969, 12, 31), "needs-escaping"),
    (6, "", 0, dt.date(2024, 1, 2), "empty-string"),
]


def _partition_dirs(path: str) -> set[str]:
    """`k=v/k=v/k=v` of every directory holding a bucket directory (Paimon's layout on disk)."""
    out = set()
    for root, dirs, _ in os.walk(path):
        rel = os.path.relpath(root, path)
        if rel.startswith(("_lakesink", "schema", "snapshot", "manifest")):
            continue
        if any(d.startswith("bucket-") for d in dirs):
            out.add(rel)
    return out


@pytest.mark.parametrize("path_kind", ["fast", "native"])
def test_partitioned_tables_use_paimons_directory_names_and_round_trip(spark, warehouse, path_kind):
    df = spark.createDataFrame(PARTITION_ROWS, PARTITION_SCHEMA).repartition(2)
    path = str(warehouse / "db.db" / f"parts_{path_kind}")
    keys = ["p_str", "p_int", "p_date"]
    if path_kind == "fast":
        lakesink.write(df, path, partition_by=keys)
    else:
        df.write.format("paimon").mode("append").option("partition", ",".join(keys)).save(path)

    epoch_day = (dt.date(2024, 1, 1) - dt.date(1970, 1, 1)).days
    dirs = _partition_dirs(path)
    assert f"p_str=a/p_int=1/p_date={epoch_day}" in dirs  # a DATE is its epoch day (legacy names)
    assert "p_str=b/p_int=2/p_date=0" in dirs
    assert "p_str=__DEFAULT_PARTITION__/p_int=__DEFAULT_PARTITION__/p_date=__DEFAULT_PARTITION__" in dirs
    assert "p_str=__DEFAULT_PARTITION__/p_int=0/p_date=" + str(epoch_day + 1) in dirs  # '' is null-like
    assert len(dirs) == 5
    assert all(not d.startswith("lakesink_partition") for d in dirs)

    assert rows_of(read_table(path)) == source_rows(df)
    assert leftover_files(path) == set()


@pytest.mark.parametrize("path_kind", ["fast", "native"])
def test_rows_land_in_the_partition_their_values_name(spark, warehouse, path_kind):
    df = spark.createDataFrame(PARTITION_ROWS, PARTITION_SCHEMA)
    path = str(warehouse / "db.db" / f"placed_{path_kind}")
    if path_kind == "fast":
        lakesink.write(df, path, partition_by=["p_int"])
    else:
        df.write.format("paimon").mode("append").option("partition", "p_int").save(path)
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(path)
    builder = table.new_read_builder()
    for split in builder.new_scan().plan().splits():
        (partition_value,) = split.partition.values
        rows = builder.new_read().to_arrow([split])
        assert set(rows.column("p_int").to_pylist()) == {partition_value}
