"""Batch reads: lakesink.read (fast path) and spark.read.format("paimon") equal pypaimon's read."""

from __future__ import annotations

import datetime as dt
import os
import time

import pyarrow as pa
import pytest
from pypaimon import CatalogFactory, Schema
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNull, Not

import lakesink
from lakesink.errors import UnknownOptionError
from lakesink.errors import SnapshotNotFoundError
from lakesink.filters import Filter as F_
from lakesink.filters import Not as Not_
from lakesink.filters import parse_sql as parse_conjuncts
from lakesink.spark.read import plan
from lakesink.spark.reader import PaimonBatchReader, exact_filter
from tests.helpers import read_table

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("dt", pa.string()), ("day", pa.date32())])


def _rows(table: pa.Table, key="id") -> list[tuple]:
    """Rows as sorted tuples, comparable across Spark and pypaimon."""
    names = table.column_names
    return sorted((tuple(r[n] for n in names) for r in table.to_pylist()), key=lambda r: tuple(
        (v is None, str(v)) for v in r))


def _spark_rows(df, names) -> list[tuple]:
    return sorted((tuple(r[n] for n in names) for r in df.collect()), key=lambda r: tuple(
        (v is None, str(v)) for v in r))


def _pypaimon_table(warehouse, name, schema, partition_keys=None, primary_keys=None, options=None):
    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table(f"db.{name}", Schema.from_pyarrow_schema(
        schema, partition_keys=partition_keys, primary_keys=primary_keys, options=options or {}), False)
    return catalog, catalog.get_table(f"db.{name}")


def _pypaimon_append(table, data: pa.Table) -> None:
    builder = table.new_batch_write_builder()
    writer, commit = builder.new_write(), builder.new_commit()
    writer.write_arrow(data)
    commit.commit(writer.prepare_commit())
    writer.close()
    commit.close()


def _batch(start: int, count: int, dt_value: str, name="n") -> pa.Table:
    return pa.table({"id": list(range(start, start + count)), "name": [f"{name}{i}" for i in range(count)],
                     "dt": [dt_value] * count, "day": [dt.date(2024, 1, 1) + dt.timedelta(days=start % 7)] * count},
                    schema=SCHEMA)


def _assert_same(df, path, snapshot_id=None):
    expected = read_table(path, snapshot_id)
    assert _spark_rows(df, expected.column_names) == _rows(expected)
    assert df.columns == expected.column_names


def test_fast_path_reads_a_table_written_by_lakesink_with_sparks_parquet_reader(spark, table_path):
    df = spark.range(300).selectExpr("id", "cast(id % 3 as string) as p", "cast(id * 1.5 as double) as x")
    lakesink.write(df, table_path, partition_by=["p"])
    lakesink.write(df.limit(10), table_path, partition_by=["p"])
    out = lakesink.read(spark, table_path)
    _assert_same(out, table_path)
    planned = plan(table_path)
    assert sorted(os.path.normpath(f.replace("file:", "")) for f in out.inputFiles()) == \
        sorted(os.path.normpath(p) for p in planned.file_paths())
    assert out.select("x").where("p = '1'").count() == 103


def test_fast_path_reads_an_append_table_written_by_pypaimon_alone(spark, warehouse):
    _, table = _pypaimon_table(warehouse, "a", SCHEMA, partition_keys=["dt"])
    _pypaimon_append(table, _batch(0, 50, "x"))
    _pypaimon_append(table, _batch(50, 50, "y"))
    path = str(warehouse / "db.db" / "a")
    out = lakesink.read(spark, path)
    _assert_same(out, path)
    assert out.inputFiles()  # Spark's own Parquet reader, not the Python one
    _assert_same(spark.read.format("paimon").load(path), path)


def test_primary_key_table_written_by_pypaimon_is_merged_on_read_like_pypaimon(spark, warehouse):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                        pa.field("dt", pa.string(), nullable=False), ("day", pa.date32())])
    _, table = _pypaimon_table(warehouse, "pk", schema, partition_keys=["dt"], primary_keys=["dt", "id"],
                               options={"bucket": "2"})
    _pypaimon_append(table, _batch(0, 40, "x").cast(schema))
    _pypaimon_append(table, _batch(20, 40, "x", name="updated").cast(schema))  # ids 20..39 updated
    path = str(warehouse / "db.db" / "pk")
    expected = read_table(path)
    assert expected.num_rows == 60  # merged: 0..59 once each
    _assert_same(lakesink.read(spark, path), path)
    _assert_same(spark.read.format("paimon").load(path), path)
    _assert_same(lakesink.read(spark, path, snapshot=1), path, 1)
    assert lakesink.read(spark, path).where("name like 'updated%'").count() == 40


def test_time_travel_by_snapshot_tag_and_timestamp_reads_that_snapshot(spark, table_path):
    for i in range(3):
        lakesink.write(spark.range(i * 10, i * 10 + 10), table_path)
        time.sleep(0.01)
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(table_path)
    table.create_tag("first", snapshot_id=1)
    snap2 = table.snapshot_manager().get_snapshot_by_id(2)
    assert lakesink.read(spark, table_path, snapshot=2).count() == 20
    _assert_same(lakesink.read(spark, table_path, snapshot=2), table_path, 2)
    _assert_same(lakesink.read(spark, table_path, tag="first"), table_path, 1)
    _assert_same(lakesink.read(spark, table_path, timestamp=snap2.time_millis), table_path, 2)
    _assert_same(spark.read.format("paimon").option("snapshot-id", 2).load(table_path), table_path, 2)
    _assert_same(spark.read.format("paimon").option("scan.tag-name", "first").load(table_path), table_path, 1)
    _assert_same(spark.read.format("paimon").option("scan.timestamp-millis", snap2.time_millis)
                 .load(table_path), table_path, 2)


def test_a_snapshot_that_does_not_exist_is_an_error_naming_the_available_range(spark, table_path):
    lakesink.write(spark.range(3), table_path)
    lakesink.write(spark.range(3), table_path)
    with pytest.raises(SnapshotNotFoundError, match=r"Snapshot 7 .*available snapshots are 1\.\.2"):
        lakesink.read(spark, table_path, snapshot=7)
    with pytest.raises(SnapshotNotFoundError, match=r"Tag 'nope' does not exist.*1\.\.2"):
        lakesink.read(spark, table_path, tag="nope")
    with pytest.raises(SnapshotNotFoundError, match=r"at or before 2001.*1\.\.2"):
        lakesink.read(spark, table_path, timestamp=dt.datetime(2001, 1, 1))
    with pytest.raises(Exception, match=r"Snapshot 9 .*1\.\.2"):
        spark.read.format("paimon").option("snapshot-id", 9).load(table_path).collect()


def test_a_selective_filter_reads_only_the_files_that_can_match(spark, table_path):
    # ten files: ids [100 i, 100 i + 99], in partition 'even' or 'odd' by the parity of i
    lakesink.write(spark.range(0, 1000, 1, 10).selectExpr(
        "id", "case when floor(id / 100) % 2 = 0 then 'even' else 'odd' end as p"), table_path, partition_by=["p"])
    assert len(plan(table_path).files) == 10
    out = lakesink.read(spark, table_path, filter="id >= 950 AND p = 'odd'")
    assert len(out.inputFiles()) == 1
    assert sorted(r.id for r in out.collect()) == list(range(950, 1000))
    partition_only = lakesink.read(spark, table_path, filter=[("p", "=", "even")])
    assert len(partition_only.inputFiles()) == 5 and partition_only.count() == 500
    # a condition that cannot prune still filters the rows exactly
    either = lakesink.read(spark, table_path, filter="id < 5 OR id > 994")
    assert len(either.inputFiles()) == 10 and either.count() == 10


def test_a_read_through_pypaimons_reader_still_prunes_by_the_filter(spark, table_path):
    """Tables Spark's Parquet reader cannot read (keyed here; any table on S3) go through the
    native reader: the filter must reach it and prune there too (one split per partition)."""
    df = spark.range(0, 300, 1, 3).selectExpr("id", "cast(floor(id / 100) as int) as p")
    lakesink.write(df, table_path, partition_by=["p"], primary_key=["id", "p"], options={"bucket": "1"})
    assert lakesink.read(spark, table_path).rdd.getNumPartitions() == 3
    for condition in ("p = 2", [("p", "=", 2)]):
        pruned = lakesink.read(spark, table_path, filter=condition)
        assert pruned.rdd.getNumPartitions() == 1
        assert sorted(r.id for r in pruned.collect()) == list(range(200, 300))
    either = lakesink.read(spark, table_path, filter="p = 2 OR id < 5")  # cannot prune: exact all the same
    assert sorted(r.id for r in either.collect()) == list(range(5)) + list(range(200, 300))


def test_the_native_reader_prunes_files_with_the_filters_it_accepts(spark, table_path):
    lakesink.write(spark.range(0, 400, 1, 4), table_path)  # four files of 100 ids
    schema = spark.read.format("paimon").load(table_path).schema
    reader = PaimonBatchReader(table_path, {"path": table_path, "filter-pushdown": "true"}, schema)
    left = list(reader.pushFilters([GreaterThanOrEqual(("id",), 350)]))
    assert left == []
    partitions = reader.partitions()
    assert sum(len(p.splits) for p in partitions) == 1
    rows = [r for p in partitions for batch in reader.read(p) for r in batch.column("id").to_pylist()]
    assert sorted(rows) == list(range(350, 400))


def test_pushed_filters_give_the_same_rows_as_spark_evaluating_them(spark, table_path):
    df = spark.range(200).selectExpr("id", "case when id % 7 = 0 then null else cast(id % 5 as string) end as s",
                                     "cast(id / 3 as double) as x", "date_add(date'2024-01-01', cast(id % 4 as int)) as d")
    lakesink.write(df, table_path)
    conditions = ["id > 150 and s is not null and x < 60", "s is null and d = date'2024-01-03'",
                  "not (s = '2') and s in ('1', '4', '2')", "s <=> '1' and id >= 10", "s like '1%' and id < 100"]
    # expected: Spark itself evaluating the conditions over the same files
    expected = {c: sorted(map(tuple, lakesink.read(spark, table_path).where(c).collect())) for c in conditions}
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        for condition in conditions:
            got = sorted(map(tuple, spark.read.format("paimon").option("filter-pushdown", "true")
                             .load(table_path).where(condition).collect()))
            assert got == expected[condition], condition
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_only_filters_evaluated_exactly_are_accepted():
    types = {"i": pa.int32(), "s": pa.string(), "f": pa.float64(), "t": pa.timestamp("us", "UTC")}
    assert exact_filter(EqualTo(("i",), 3), types) == F_("i", "=", 3)
    assert exact_filter(Not(IsNull(("s",))), types) == Not_(F_("s", "is_null"))
    assert exact_filter(GreaterThan(("f",), 1.0), types) is None  # NaN orders differently
    assert exact_filter(EqualTo(("t",), dt.datetime(2024, 1, 1)), types) is None
    assert exact_filter(EqualTo(("i",), 2 ** 40), types) is None  # does not fit the column
    assert exact_filter(In(("i",), (1, None)), types) is None
    assert exact_filter(EqualTo(("s", "nested"), "x"), types) is None


def test_sql_conditions_are_split_into_prunable_conjuncts():
    found = parse_conjuncts("`dt` = '2024-05-01' AND id >= 10 and name in ('a', 'it''s') AND x IS NOT NULL "
                            "AND upper(name) = 'A'")
    assert [(f.column, f.op, f.value) for f in found] == [
        ("dt", "=", "2024-05-01"), ("id", ">=", 10), ("name", "in", ["a", "it's"]), ("x", "is_not_null", None)]
    assert parse_conjuncts("id = 1 OR id = 2") == []


def test_an_empty_table_reads_as_an_empty_dataframe_with_the_tables_schema(spark, warehouse):
    _pypaimon_table(warehouse, "empty", SCHEMA)
    path = str(warehouse / "db.db" / "empty")
    for df in (lakesink.read(spark, path), spark.read.format("paimon").load(path)):
        assert df.columns == SCHEMA.names and df.count() == 0


def test_files_of_an_older_schema_are_read_through_pypaimon(spark, warehouse):
    from pypaimon.schema.data_types import AtomicType
    from pypaimon.schema.schema_change import SchemaChange

    catalog, table = _pypaimon_table(warehouse, "evolved", SCHEMA)
    _pypaimon_append(table, _batch(0, 5, "x"))
    catalog.alter_table("db.evolved", [SchemaChange.add_column("extra", AtomicType("INT"))])
    table = catalog.get_table("db.evolved")
    _pypaimon_append(table, pa.table({**{n: _batch(5, 5, "y").column(n) for n in SCHEMA.names},
                                      "extra": pa.array([1] * 5, pa.int32())}))
    path = str(warehouse / "db.db" / "evolved")
    out = lakesink.read(spark, path)
    assert out.inputFiles() == []  # not Spark's Parquet reader: it would not fill the new column right
    _assert_same(out, path)
    assert sorted((r.id, r.extra) for r in out.collect())[:6] == [(i, None) for i in range(5)] + [(5, 1)]


def test_unknown_read_options_are_an_error_naming_the_option(spark, table_path):
    lakesink.write(spark.range(3), table_path)
    with pytest.raises(Exception, match="snapshot-idd"):
        spark.read.format("paimon").option("snapshot-idd", 1).load(table_path).collect()
    with pytest.raises(UnknownOptionError):
        PaimonBatchReader(table_path, {"snapshot-idd": "1"}, None)
