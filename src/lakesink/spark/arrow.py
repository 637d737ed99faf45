"""Spark schemas ↔ Arrow schemas, and splitting Arrow data by partition."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError


def spark_to_arrow(schema) -> pa.Schema:
    """Spark StructType → Arrow schema (TimestampType → timestamp[us, UTC], NTZ → timestamp[us])."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except Exception as exc:  # e.g. VariantType, intervals, CalendarInterval
        raise ConfigurationError(f"The DataFrame has a column type Paimon cannot store: {exc}") from exc


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder and cast incoming data to the table's Arrow schema (same values, table types)."""
    table = table.select(schema.names)
    if table.schema.equals(schema, check_metadata=False):
        return table
    return table.cast(schema)


def partition_value(value):
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def split_by_partition(table: pa.Table, keys: list[str]):
    """Yield (partition tuple, rows) for each distinct combination of the key columns."""
    if not keys:
        yield (), table
        return
    if table.num_rows == 0:
        return
    indexed = table.select(keys).append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    groups = indexed.group_by(keys, use_threads=False).aggregate([("__row", "list")])
    rows = groups.column("__row_list")
    key_columns = [groups.column(k).to_pylist() for k in keys]
    for i in range(groups.num_rows):
        partition = tuple(partition_value(col[i]) for col in key_columns)
        yield partition, table.take(rows[i].values)


__all__ = ["spark_to_arrow", "conform", "split_by_partition", "pc"]
