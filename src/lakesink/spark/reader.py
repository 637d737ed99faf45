"""The Spark-native read path: `spark.read.format("paimon")` (Python Data Source API);
streams: spark/stream_reader.py.

The driver plans with pypaimon (`paimon/read/scan.py`) and hands each pypaimon split
to a Spark task in pypaimon's own compact binary form (`split_serializer`);
tasks read them with pypaimon's reader, so primary-key tables are merged on
read, and yield Arrow record batches.

Filters: Spark passes filters to `pushFilters` only with
`spark.sql.python.filterPushdown.enabled=true`, and does not re-check the
filters a reader accepts. This reader accepts only filters it evaluates exactly
itself, on the rows, with pyarrow (top-level integer, string, boolean and date
columns); they also prune files. Everything else stays with Spark.

Options: scopes `read` and `stream-read` of `lakesink.options` (docs/options.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import (DataSourceReader, EqualNullSafe, EqualTo,
                                    GreaterThan, GreaterThanOrEqual, In, InputPartition, IsNotNull,
                                    IsNull, LessThan, LessThanOrEqual, Not, StringContains,
                                    StringEndsWith, StringStartsWith)

from .. import filters
from .. import options as registry
from ..errors import SnapshotNotFoundError


@dataclass
class SplitsPartition(InputPartition):
    """pypaimon splits in SplitSerializer v1 bytes (compact; Spark pickles partitions)."""

    splits: list  # of bytes


@dataclass
class ChangesPartition(InputPartition):
    """Changelog rows (`read.readChangeLog`): a full snapshot's merged splits (each row +I) or
    change files read as stored (paimon.read.changes)."""

    splits: list  # of bytes
    files: list   # of paimon.read.changes.ChangeFile


# ---------------------------------------------------------------- filters evaluated exactly

_COMPARISONS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}
_STRINGS = {StringStartsWith: "starts_with", StringEndsWith: "ends_with", StringContains: "contains"}


def exact_filter(spark_filter, arrow_types: dict) -> filters.Term | None:
    """`spark_filter` as a filter we evaluate exactly, or None to leave it to Spark."""
    column_path = getattr(spark_filter, "attribute", None)
    if isinstance(spark_filter, Not):
        inner = exact_filter(spark_filter.child, arrow_types)
        return filters.Not(inner) if inner is not None else None
    if not column_path or len(column_path) != 1 or column_path[0] not in arrow_types:
        return None
    column = column_path[0]
    arrow_type = arrow_types[column]
    kind = type(spark_filter)
    if kind in _COMPARISONS or kind is EqualNullSafe:
        value = spark_filter.value
        op = _COMPARISONS.get(kind, "eq_null_safe")
        return filters.Filter(column, op, value) if filters.exact_value(value, arrow_type) else None
    if kind is In:
        values = list(spark_filter.value)
        ok = values and all(filters.exact_value(v, arrow_type) for v in values)
        return filters.Filter(column, "in", values) if ok else None
    if kind in (IsNull, IsNotNull):
        return filters.Filter(column, "is_null" if kind is IsNull else "is_not_null")
    if kind in _STRINGS and isinstance(spark_filter.value, str) and filters.exact_value(spark_filter.value, arrow_type):
        return filters.Filter(column, _STRINGS[kind], spark_filter.value)
    return None


# ---------------------------------------------------------------- reading splits in tasks

def read_branch(parsed: dict) -> str | None:
    """The branch a read asks for (option `branch`, parsed), None for main."""
    from ..paimon.table.branches import is_main
    branch = parsed.get("branch")
    return None if is_main(branch) else branch


def read_splits(path: str, serialized: list, expected_schema, terms: list, fs_options: dict | None = None,
                system_columns: bool = False, branch: str | None = None):
    """Yield Arrow record batches of `serialized` splits (of `branch`, None: main), filtered by
    `terms`, as `expected_schema` (`system_columns`: with the rows' `_ROW_ID` and `_SEQUENCE_NUMBER`)."""
    from pypaimon.read.split_serializer import deserialize_split_v1

    from ..paimon.files.lineage import COLUMNS
    from ..paimon.read.scan import open_for_read

    table = open_for_read(path, fs_options, branch)
    key_fields = _key_fields(table)
    splits = [deserialize_split_v1(blob, table.partition_keys_fields, key_fields) for blob in serialized]
    builder = table.new_read_builder()
    if system_columns:
        builder = builder.with_projection([f.name for f in table.fields] + list(COLUMNS))
    reader = builder.new_read().to_arrow_batch_reader(splits)
    paimon_types = {f.name: _type_text(f) for f in table.fields}
    for batch in reader:
        if terms:
            batch = batch.filter(filters.mask(terms, batch))
        if batch.num_rows:
            yield conform_batch(batch, expected_schema, paimon_types, path)


# ---------------------------------------------------------------- Paimon types Spark lacks

def _type_text(field) -> str:
    return str(getattr(field.type, "type", field.type))


def _spark_time_type():
    """Spark's TIME type (precision 3) when this PySpark can carry it through Arrow, else None."""
    try:
        from pyspark.sql.pandas.types import to_arrow_type
        from pyspark.sql.types import TimeType

        to_arrow_type(TimeType(3))
        return TimeType(3)
    except Exception:  # PySpark without TIME, or without its Arrow conversion
        return None


def _has_time(type_) -> bool:
    import pyarrow as pa

    if pa.types.is_time(type_):
        return True
    if pa.types.is_struct(type_):
        return any(_has_time(type_.field(i).type) for i in range(type_.num_fields))
    if pa.types.is_map(type_):
        return _has_time(type_.key_type) or _has_time(type_.item_type)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _has_time(type_.value_type)
    return False


def _times_as_spark(spark_type, time_type):
    """`spark_type` with every TIME as `time_type`: pypaimon reads every Paimon TIME(p) as
    millis of day (Paimon keeps no finer digits), so TIME(3) holds each value exactly."""
    from pyspark.sql import types as T

    if isinstance(spark_type, T.TimeType):
        return time_type
    if isinstance(spark_type, T.StructType):
        return T.StructType([T.StructField(f.name, _times_as_spark(f.dataType, time_type), f.nullable, f.metadata)
                             for f in spark_type.fields])
    if isinstance(spark_type, T.ArrayType):
        return T.ArrayType(_times_as_spark(spark_type.elementType, time_type), spark_type.containsNull)
    if isinstance(spark_type, T.MapType):
        return T.MapType(_times_as_spark(spark_type.keyType, time_type),
                         _times_as_spark(spark_type.valueType, time_type), spark_type.valueContainsNull)
    return spark_type


def spark_schema(table, schema=None):
    """The Spark schema a read of `table` returns (`schema`: its Arrow schema, if not the table's).

    Paimon TIME columns become Spark's TIME(3) where this PySpark has it (Arrow carries
    it; pypaimon's time32 is not accepted there, time64 is); otherwise they are refused,
    naming the columns. TIMESTAMP(7..9) become Spark timestamps (micros): values with
    sub-microsecond digits are refused when read (`conform_batch`), never truncated.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    from ..errors import UnsupportedTypeError
    from ..paimon.table.tables import arrow_schema

    schema = arrow_schema(table) if schema is None else schema
    timed = [f.name for f in schema if _has_time(f.type)]
    if not timed:
        return from_arrow_schema(schema)
    time_type = _spark_time_type()
    if time_type is None:
        import pyspark

        types = {f.name: _type_text(f) for f in table.fields}
        raise UnsupportedTypeError(
            f"Table {table.table_path}: column(s) {', '.join(f'{n} ({types[n]})' for n in timed)} hold "
            f"Paimon TIME values, and this PySpark ({pyspark.__version__}) has no TIME type to read them "
            "into. Use a PySpark with TIME (4.1 or later with TimeType), or read the table with pypaimon "
            "(table.new_read_builder()). Nothing was read.", table=str(table.table_path))

    def retype(type_):
        # Only for from_arrow_schema: it accepts time64, not time32 (the values are cast in tasks).
        if pa.types.is_time(type_):
            return pa.time64("us")
        if pa.types.is_struct(type_):
            return pa.struct([f.with_type(retype(f.type)) for f in type_])
        if pa.types.is_map(type_):
            return pa.map_(retype(type_.key_type), retype(type_.item_type))
        if pa.types.is_list(type_) or pa.types.is_large_list(type_):
            return pa.list_(type_.value_field.with_type(retype(type_.value_type)))
        return type_

    converted = from_arrow_schema(pa.schema([f.with_type(retype(f.type)) for f in schema]))
    return _times_as_spark(converted, time_type)


def with_system_columns(table, schema):
    """`schema` (of a read of `table`) with the row-tracking columns; only row-tracking tables have them."""
    from ..errors import ConfigurationError
    from ..paimon.files.lineage import lineage_fields, tracks_rows

    if table.is_primary_key_table or not tracks_rows(table.table_schema.options):
        raise ConfigurationError(
            f"read.system-columns: {table.table_path} has no _ROW_ID or _SEQUENCE_NUMBER columns to read: only "
            "tables created with row-tracking.enabled=true have them. Nothing was read.",
            option="read.system-columns", table=str(table.table_path))
    import pyarrow as pa
    return pa.schema([*schema, *lineage_fields()])


def _key_fields(table):
    if not table.is_primary_key_table:
        return None
    by_name = {f.name: f for f in table.fields}
    return [by_name[name] for name in table.trimmed_primary_keys]


def conform_batch(batch, schema, paimon_types: dict | None = None, path: str | None = None):
    """`batch` as `schema` (Spark's Arrow types). Casts are safe: a value the Spark type cannot
    hold (nanoseconds in microseconds) is an error naming the column, never rounded."""
    import pyarrow as pa

    batch = batch.select(schema.names)
    if batch.schema.equals(schema):
        return batch
    arrays = []
    for column, field in zip(batch.columns, schema):
        if column.type == field.type:
            arrays.append(column)
            continue
        try:
            arrays.append(column.cast(field.type))
        except pa.ArrowInvalid as exc:
            from ..errors import UnsupportedTypeError

            paimon_type = (paimon_types or {}).get(field.name, str(column.type))
            raise UnsupportedTypeError(
                f"Table {path}: column {field.name} ({paimon_type}) holds a value Spark cannot hold "
                f"exactly ({exc}). Spark timestamps have microseconds; lakesink does not truncate "
                "nanoseconds. Read this column with a Paimon reader that keeps them (pypaimon, Flink), "
                "or store it as TIMESTAMP(6) if microseconds are enough.", table=path) from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _serialize(splits) -> list:
    from pypaimon.read.split_serializer import serialize_split_v1
    return [serialize_split_v1(split) for split in splits]


def _partitions(splits) -> list:
    # One Spark task per pypaimon split: pypaimon already packs small files into
    # splits of `source.split.target-size` (and keeps a primary-key bucket whole).
    return [SplitsPartition([blob]) for blob in _serialize(splits)]


def _expected_arrow_schema(schema):
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(schema, timezone="UTC")  # what Spark checks returned batches against


# ---------------------------------------------------------------- batch

class PaimonBatchReader(DataSourceReader):
    """One snapshot of a Paimon table, fixed when the reader is created.

    Spark fails a reader that defines `pushFilters` while
    `spark.sql.python.filterPushdown.enabled` is false, and a reader cannot see
    that setting: `filter-pushdown=true` selects the subclass that takes filters.
    """

    def __new__(cls, path: str | None = None, options: dict | None = None, schema=None):
        # (no arguments when unpickled in a task)
        wants = registry.parse(options or {}, ("read",)).get("filter-pushdown", False)
        if cls is PaimonBatchReader and wants:
            cls = PaimonFilteringBatchReader
        return super().__new__(cls)

    def __init__(self, path: str, options: dict, schema):
        from ..paimon.read import scan

        opts = registry.parse(options, ("read",))
        self.path = path
        self.schema = schema
        self.fs_options = registry.storage_options(options) or None
        self.branch = read_branch(opts)  # the branch's snapshots, schema and tags (None: main)
        table = scan.open_for_read(path, self.fs_options, self.branch)
        snapshot = scan.resolve_snapshot(table, snapshot=opts.get("scan.snapshot-id"),
                                         tag=opts.get("scan.tag-name"),
                                         timestamp=opts.get("scan.timestamp-millis"))
        self.snapshot_id = snapshot.id if snapshot is not None else None
        self.arrow_schema = _expected_arrow_schema(schema)
        self.system_columns = bool(opts.get("read.system-columns"))
        self.terms: list = []

    def plan(self):
        from ..paimon.read import scan

        table = scan.open_for_read(self.path, self.fs_options, self.branch)
        snapshot = (table.snapshot_manager().get_snapshot_by_id(self.snapshot_id)
                    if self.snapshot_id is not None else None)
        if self.snapshot_id is not None and snapshot is None:
            raise SnapshotNotFoundError(
                f"Snapshot {self.snapshot_id} of {self.path} expired while the query was planned; "
                f"{scan.describe_range(table)}.")
        predicate = scan.to_predicate(table, filters.prunable(self.terms))
        return scan.plan_snapshot(table, snapshot, predicate)

    def partitions(self):
        return _partitions(self.plan().splits)

    def read(self, partition):
        if partition is None or getattr(partition, "splits", None) is None:
            return iter(())  # Spark's placeholder partition for an empty plan
        return read_splits(self.path, partition.splits, self.arrow_schema, self.terms, self.fs_options,
                           self.system_columns, self.branch)


class PaimonFilteringBatchReader(PaimonBatchReader):
    """The batch reader taking the filters it evaluates exactly (`filter-pushdown=true`)."""

    def pushFilters(self, filters):
        from ..paimon.files.lineage import COLUMNS
        # Row-tracking columns prune no file (statistics are the table columns'): left to Spark.
        types = {f.name: f.type for f in self.arrow_schema if f.name not in COLUMNS}
        for spark_filter in filters:
            term = exact_filter(spark_filter, types)
            if term is None:
                yield spark_filter
            else:
                self.terms.append(term)
