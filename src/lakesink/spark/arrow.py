"""Spark schemas ↔ Arrow schemas, and splitting Arrow data by partition."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError


def spark_to_arrow(schema) -> pa.Schema:
    """Spark StructType → Arrow schema (TimestampType → timestamp[us, UTC], NTZ → timestamp[us])."""
    from pyspark.sql.pandas.types import to_arrow_schema

    for field in schema.fields:
        unstorable = _unstorable(field.dataType)
        if unstorable:
            raise ConfigurationError(
                f"column {field.name!r} has Spark type {field.dataType.simpleString()}, which contains "
                f"{unstorable}: Paimon tables written by lakesink cannot store it. Cast the column "
                "first (e.g. to_json(...) for a variant, a number of seconds for an interval, a string for a time)."
            )
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except Exception as exc:  # e.g. VariantType, intervals, CalendarInterval
        raise ConfigurationError(f"The DataFrame has a column type Paimon cannot store: {exc}") from exc


def _unstorable(data_type) -> str | None:
    """The name of a type Paimon cannot store inside `data_type`, or None.

    Checked on Spark's side: Arrow would turn a variant into a plain struct of
    binaries, and the table would silently get the wrong type.
    """
    from pyspark.sql import types as T

    if isinstance(data_type, T.VariantType):
        return "variant"
    if isinstance(data_type, (T.DayTimeIntervalType, T.YearMonthIntervalType, T.CalendarIntervalType)):
        return "interval"
    time_type = getattr(T, "TimeType", None)
    if time_type is not None and isinstance(data_type, time_type):
        # Arrow hands Spark's TIME over as nanoseconds; Paimon stores TIME as INT32 millis of
        # day, a layout lakesink's writers do not produce yet.
        return "time"
    if isinstance(data_type, T.ArrayType):
        return _unstorable(data_type.elementType)
    if isinstance(data_type, T.MapType):
        return _unstorable(data_type.keyType) or _unstorable(data_type.valueType)
    if isinstance(data_type, T.StructType):
        return next((u for f in data_type.fields if (u := _unstorable(f.dataType))), None)
    return None


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
    """Yield (the key columns' values, those rows in input order) for each distinct combination."""
    if not keys:
        yield (), table
        return
    yield from _grouped(table, keys, with_rows=True)


def distinct_values(table: pa.Table, keys: list[str]) -> list[tuple]:
    """Each distinct combination of the key columns' values (no rows gathered)."""
    return [values for values, _ in _grouped(table, keys, with_rows=False)]


def _grouped(table: pa.Table, keys: list[str], with_rows: bool):
    columns = table.select(keys)
    if with_rows:
        columns = columns.append_column("__row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    groups = columns.group_by(keys, use_threads=False).aggregate([("__row", "list")] if with_rows else [])
    values = [groups.column(k).to_pylist() for k in keys]
    rows = groups.column("__row_list") if with_rows else None
    for i in range(groups.num_rows):
        yield (tuple(partition_value(column[i]) for column in values),
               table.take(rows[i].values) if with_rows else None)


__all__ = ["spark_to_arrow", "conform", "split_by_partition", "distinct_values", "pc"]
