"""Tables lakesink writes, read by Apache Paimon's Java reader and by paimon-rust.

Every table is written once per session (both write paths, partitioned or not,
every Spark type, after compaction, overwrite, CTAS and the small-file
aggregator); the expected rows are the source DataFrames as Spark itself
collects them, never what lakesink reads back.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql import types as T

import lakesink
from tests.helpers import write

from . import rows as R
from .oracle import JavaError

pytestmark = [pytest.mark.interop, pytest.mark.spark]

UTC = dt.timezone.utc

SCHEMA = T.StructType([
    T.StructField("id", T.IntegerType()),
    T.StructField("part", T.StringType()),
    T.StructField("flag", T.BooleanType()),
    T.StructField("i8", T.ByteType()),
    T.StructField("i16", T.ShortType()),
    T.StructField("i64", T.LongType()),
    T.StructField("f32", T.FloatType()),
    T.StructField("f64", T.DoubleType()),
    T.StructField("d5", T.DecimalType(5, 0)),     # precision ≤ 9: Paimon stores INT32
    T.StructField("d9", T.DecimalType(9, 2)),
    T.StructField("d18", T.DecimalType(18, 4)),   # ≤ 18: INT64
    T.StructField("d38", T.DecimalType(38, 10)),  # > 18: FIXED_LEN_BYTE_ARRAY
    T.StructField("s", T.StringType()),
    T.StructField("bin", T.BinaryType()),
    T.StructField("day", T.DateType()),
    T.StructField("ts", T.TimestampType()),        # Paimon TIMESTAMP_LTZ(6)
    T.StructField("ntz", T.TimestampNTZType()),    # Paimon TIMESTAMP(6)
    T.StructField("ints", T.ArrayType(T.IntegerType())),
    T.StructField("props", T.MapType(T.StringType(), T.LongType())),
    T.StructField("rec", T.StructType([
        T.StructField("a", T.IntegerType()),
        T.StructField("b", T.StringType()),
        T.StructField("c", T.ArrayType(T.DoubleType())),
    ])),
    T.StructField("recs", T.ArrayType(T.StructType([T.StructField("k", T.StringType()),
                                                    T.StructField("v", T.DecimalType(10, 3))]))),
    T.StructField("nested", T.MapType(T.IntegerType(), T.ArrayType(T.StringType()))),
])


D38_EXTREMES = [Decimal("9999999999999999999999999999.9999999999"), Decimal("-9999999999999999999999999999.9999999999")]


def source_row(i: int) -> tuple:
    """Row i; every seventh row is null but for id and part; values repeat (dictionary pages)."""
    part = ["a", "b", "c"][i % 3]
    if i % 7 == 6:
        return (i, part) + (None,) * (len(SCHEMA.fields) - 2)
    sign = -1 if i % 2 else 1
    return (
        i, part, i % 2 == 0, (i % 256) - 128, sign * i * 251, sign * i * 3_000_000_019,
        float(i) / 8, [float("nan"), float("inf"), -0.0, 1e300][i % 4] if i < 4 else i * 1.1,
        Decimal(sign * (i % 5) * 10001), Decimal(sign * (i % 4) * 1234567) / 100,
        Decimal(sign * (i % 6) * 98765432101234) / 10000,
        D38_EXTREMES[i] if i < 2 else Decimal(i * 7) / 4,
        f"s{i % 4}-ü✓", bytes([i % 256, 0, 255]),
        dt.date(1970, 1, 1) + dt.timedelta(days=(i % 5) * 4000 - 8000),
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC) + dt.timedelta(hours=i % 3, microseconds=i),
        dt.datetime(1900, 1, 1, 0, 0, 0, 1) + dt.timedelta(days=i % 4, microseconds=i),
        [i, None, -i] if i % 3 else [],
        {"k": i % 3, "z": None} if i % 2 else {},
        (i % 3, f"b{i % 2}", [1.5, None]),
        [(f"k{i % 2}", Decimal(i % 3) / 1000), (None, None)],
        {i % 4: ["x", None], 7: []},
    )


def source_df(spark, ids) -> "object":
    return spark.createDataFrame([source_row(i) for i in ids], SCHEMA)


def expected_rows(spark, ids) -> list[dict]:
    return R.from_arrow(source_df(spark, ids).toArrow())


# name -> how the table is written; every recipe returns the ids its latest snapshot holds.

def _fast_flat(spark, path):
    write(source_df(spark, range(40)), path, "fast")
    return range(40)


def _fast_part(spark, path):
    write(source_df(spark, range(40)), path, "fast", partition="part")
    return range(40)


def _native_flat(spark, path):
    write(source_df(spark, range(40)).repartition(2), path, "native")
    return range(40)


def _native_part(spark, path):
    write(source_df(spark, range(40)).repartition(2), path, "native", partition="part")
    return range(40)


def _compacted(spark, path):
    for lo in range(0, 40, 10):  # four commits of small files on both paths, then one rewrite
        write(source_df(spark, range(lo, lo + 10)), path, "fast" if lo % 20 else "native", partition="part")
    lakesink.compact(spark, path, progress=False)
    return range(40)


def _overwritten_fast(spark, path):
    write(source_df(spark, range(40)), path, "fast", partition="part")
    write(source_df(spark, range(100, 120)), path, "fast", mode="overwrite")
    return range(100, 120)


def _overwritten_native(spark, path):
    write(source_df(spark, range(40)), path, "native", partition="part")
    # dynamic partition overwrite: partitions a and b replaced, c kept
    (source_df(spark, [i for i in range(100, 120) if i % 3 != 2]).write.format("paimon").mode("overwrite")
     .option("partitionOverwriteMode", "dynamic").save(path))
    return [i for i in range(40) if i % 3 == 2] + [i for i in range(100, 120) if i % 3 != 2]


def _ctas(spark, path):
    lakesink.create_table_as(source_df(spark, range(40)), path, partition_by=["part"])
    return range(40)


def _aggregated_native(spark, path):
    (source_df(spark, range(40)).repartition(4).write.format("paimon").mode("append")
     .option("partition", "part").option("aggregator.enabled", "true").save(path))
    return range(40)


def _aggregated_fast(spark, path):
    lakesink.write(source_df(spark, range(40)).repartition(4), path,
                   options={"aggregator.enabled": "true", "partition": "part"})
    return range(40)


def _keyed(spark, path):
    # A primary-key table written twice with overlapping keys: each reader must merge them
    # (ids 20..39 twice on disk, once in what it returns).
    for ids in (range(40), range(20, 60)):
        lakesink.write(source_df(spark, ids).repartition(3), path, primary_key=["id", "part"],
                       partition_by=["part"], options={"bucket": "3"})
    return range(60)


def _evolved(spark, path):
    # Schema evolution on write: written first with id SMALLINT, d18 DECIMAL(16, 4) and without the
    # three nested columns (fast path), then with the full schema and write.merge-schema (native
    # path): id widens to INT, d18 to DECIMAL(18, 4), the nested columns are added (null in old rows).
    from pyspark.sql import functions as F
    added = ["rec", "recs", "nested"]
    old = source_df(spark, range(20)).select(
        *[F.col(c).cast({"id": "smallint", "d18": "decimal(16,4)"}[c]).alias(c) if c in ("id", "d18") else c
          for c in SCHEMA.names if c not in added])
    write(old, path, "fast", partition="part")
    write(source_df(spark, range(20, 40)), path, "native", partition="part", **{"write.merge-schema": "true"})
    full = source_df(spark, range(40))
    return full.select(*[F.when(F.col("id") >= 20, F.col(c)).alias(c) if c in added else c for c in SCHEMA.names])


RECIPES = {
    "fast_flat": _fast_flat, "fast_part": _fast_part, "native_flat": _native_flat, "native_part": _native_part,
    "compacted": _compacted, "overwritten_fast": _overwritten_fast, "overwritten_native": _overwritten_native,
    "ctas": _ctas, "aggregated_native": _aggregated_native, "aggregated_fast": _aggregated_fast,
    "keyed": _keyed, "evolved": _evolved,
}


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory):
    """{name: (path, expected rows)} for every recipe, written once."""
    warehouse = tmp_path_factory.mktemp("interop-wh")
    out = {}
    for name, recipe in RECIPES.items():
        path = str(warehouse / "db.db" / name)
        ids = recipe(spark, path)  # or the expected rows as a DataFrame
        out[name] = (path, R.from_arrow(ids.toArrow()) if hasattr(ids, "toArrow") else expected_rows(spark, ids))
    return out


@pytest.fixture(scope="module")
def java_reads(java_paimon, tables, tmp_path_factory):
    """What Java Paimon reads from every table, one JVM for all."""
    return java_paimon.read_many([path for path, _ in tables.values()], tmp_path_factory.mktemp("java-out"))


def test_the_recipes_wrote_what_they_claim(tables):
    # Guards the comparison itself: non-empty tables, all types present, some nulls and NaN.
    for name, (path, expected) in tables.items():
        assert len(expected) >= 20, name
        assert any(row["d38"] is not None for row in expected)
    _, expected = tables["fast_flat"]
    assert {row["f64"] for row in expected} >= {"NaN", "Infinity"}
    assert any(row["props"] for row in expected) and any(row["ints"] == [] for row in expected)


@pytest.mark.parametrize("name", list(RECIPES))
def test_java_paimon_reads_the_table_lakesink_wrote(name, tables, java_reads):
    path, expected = tables[name]
    got = java_reads[path]
    if isinstance(got, JavaError):
        raise AssertionError(f"Java Paimon cannot read {name}:\n{got}")
    # Rows are objects too: only values inside them are collapsed.
    expected = [{k: R.null_all_null_structs(v) for k, v in row.items()} for row in expected]
    R.assert_same_rows(got, expected, f"Java Paimon reading {name}")


@pytest.mark.parametrize("name", list(RECIPES))
def test_paimon_rust_reads_the_table_lakesink_wrote(name, tables, rust_paimon):
    path, expected = tables[name]
    R.assert_same_rows(R.from_arrow(rust_paimon.read(path)), expected, f"{rust_paimon.name} reading {name}")
