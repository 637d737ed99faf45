"""Spark column types -> PostgreSQL / SQLite column types, and values on their way in.

Only types with an exact counterpart are accepted; anything else is refused
before a row is written. SQLite keeps decimals as text (its NUMERIC affinity
would round them to doubles) and timestamps as ISO-8601 text (UTC with
`+00:00` for Spark's TimestampType); a NaN fails the task (SQLite would store NULL).
"""

from __future__ import annotations

import datetime as dt
import io
import re
from dataclasses import dataclass

from ..errors import UnsupportedTypeError


@dataclass(frozen=True)
class Column:
    name: str
    kind: str          # boolean, byte, short, int, long, float, double, decimal, string, binary, date,
    precision: int = 0  # timestamp (with time zone), timestamp_ntz
    scale: int = 0
    nullable: bool = True


_SPARK_KINDS = {
    "BooleanType": "boolean", "ByteType": "byte", "ShortType": "short", "IntegerType": "int",
    "LongType": "long", "FloatType": "float", "DoubleType": "double", "DecimalType": "decimal",
    "StringType": "string", "CharType": "string", "VarcharType": "string", "BinaryType": "binary",
    "DateType": "date", "TimestampType": "timestamp", "TimestampNTZType": "timestamp_ntz",
}

POSTGRES_TYPES = {
    "boolean": "boolean", "byte": "smallint", "short": "smallint", "int": "integer", "long": "bigint",
    "float": "real", "double": "double precision", "string": "text", "binary": "bytea", "date": "date",
    "timestamp": "timestamp with time zone", "timestamp_ntz": "timestamp without time zone",
}
SQLITE_TYPES = {
    "boolean": "BOOLEAN", "byte": "SMALLINT", "short": "SMALLINT", "int": "INTEGER", "long": "BIGINT",
    "float": "REAL", "double": "DOUBLE", "decimal": "TEXT", "string": "TEXT", "binary": "BLOB",
    "date": "DATE", "timestamp": "TIMESTAMPTZ", "timestamp_ntz": "TIMESTAMP",
}


def columns_of(schema) -> list[Column]:
    """Columns of a Spark StructType; raises UnsupportedTypeError naming every unsupported column."""
    columns, refused = [], []
    for f in schema.fields:
        kind = _SPARK_KINDS.get(type(f.dataType).__name__)
        if kind is None:
            refused.append(f"{f.name} ({f.dataType.simpleString()})")
            continue
        precision, scale = (f.dataType.precision, f.dataType.scale) if kind == "decimal" else (0, 0)
        columns.append(Column(f.name, kind, precision, scale, f.nullable))
    if refused:
        raise UnsupportedTypeError(
            f"Column type(s) with no exact PostgreSQL/SQLite counterpart: {', '.join(refused)}. Supported: "
            "boolean, tinyint, smallint, int, bigint, float, double, decimal, string, binary, date, timestamp, "
            "timestamp_ntz. Cast or serialise these columns (e.g. to_json) first. Nothing was written.")
    names = [c.name.lower() for c in columns]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UnsupportedTypeError(f"Column names differ only in case: {dupes}. Rename them first.")
    return columns


def sql_type(column: Column, dialect: str) -> str:
    if column.kind == "decimal" and dialect == "postgres":
        return f"numeric({column.precision},{column.scale})"
    return (POSTGRES_TYPES if dialect == "postgres" else SQLITE_TYPES)[column.kind]


# -- schema checks against an existing table ------------------------------------------------
_PG_ACCEPTS = {
    "boolean": {"boolean"}, "byte": {"smallint", "integer", "bigint"}, "short": {"smallint", "integer", "bigint"},
    "int": {"integer", "bigint"}, "long": {"bigint"}, "float": {"real", "double precision"},
    "double": {"double precision"}, "binary": {"bytea"}, "date": {"date"},
    "timestamp": {"timestamp with time zone", "timestamp(6) with time zone"},
    "timestamp_ntz": {"timestamp without time zone", "timestamp(6) without time zone"},
}


def postgres_accepts(column: Column, target_type: str) -> bool:
    """Whether a PostgreSQL column of `target_type` (format_type) holds the column's values exactly."""
    t = target_type.lower()
    if column.kind == "string":
        return t == "text" or t.startswith(("character varying", "character(", "character", "citext"))
    if column.kind == "decimal":
        if t == "numeric":
            return True
        m = re.fullmatch(r"numeric\((\d+),(\d+)\)", t)
        return bool(m) and int(m.group(2)) == column.scale and \
            int(m.group(1)) - int(m.group(2)) >= column.precision - column.scale
    return t in _PG_ACCEPTS[column.kind]


def sqlite_affinity(declared: str) -> str:
    """SQLite's rules for the affinity of a declared column type (sqlite.org/datatype3.html 3.1)."""
    t = declared.upper()
    if "INT" in t:
        return "INTEGER"
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in t or not t:
        return "BLOB"
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


_SQLITE_ACCEPTS = {
    "boolean": {"INTEGER", "NUMERIC"}, "byte": {"INTEGER", "NUMERIC"}, "short": {"INTEGER", "NUMERIC"},
    "int": {"INTEGER", "NUMERIC"}, "long": {"INTEGER", "NUMERIC"}, "float": {"REAL", "NUMERIC"},
    "double": {"REAL", "NUMERIC"},
    # NUMERIC/INTEGER/REAL affinity would turn "1.10" into the double 1.1, "007" into 7
    "decimal": {"TEXT", "BLOB"}, "string": {"TEXT", "BLOB"},
    "binary": {"BLOB", "TEXT", "NUMERIC", "INTEGER", "REAL"},
    "date": {"TEXT", "NUMERIC", "BLOB"}, "timestamp": {"TEXT", "NUMERIC", "BLOB"},
    "timestamp_ntz": {"TEXT", "NUMERIC", "BLOB"},
}


def sqlite_accepts(column: Column, declared: str) -> bool:
    return sqlite_affinity(declared) in _SQLITE_ACCEPTS[column.kind]


# -- values ------------------------------------------------------------------------------------
def sqlite_rows(batch, columns: list[Column]):
    """Python rows of an Arrow batch as SQLite stores them (see the module docstring)."""
    converted = [_sqlite_values(batch.column(i).to_pylist(), c) for i, c in enumerate(columns)]
    return zip(*converted)


def _sqlite_values(values: list, column: Column) -> list:
    kind = column.kind
    if kind in ("float", "double") and any(v != v for v in values if v is not None):
        # SQLite stores a NaN as NULL: refusing beats losing the value silently.
        raise UnsupportedTypeError(f"Column {column.name!r} holds NaN, which SQLite cannot store (it becomes NULL). "
                                   "Replace NaN first (e.g. nanvl or a null). The task failed; nothing was committed.")
    if kind == "decimal":
        return [None if v is None else format(v, "f") for v in values]
    if kind == "boolean":
        return [None if v is None else int(v) for v in values]
    if kind == "date":
        return [None if v is None else v.isoformat() for v in values]
    if kind == "timestamp":
        return [None if v is None else _utc(v).isoformat(" ", "microseconds") for v in values]
    if kind == "timestamp_ntz":
        return [None if v is None else v.isoformat(" ", "microseconds") for v in values]
    return values


def _utc(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def postgres_csv(batch, columns: list[Column]) -> bytes:
    """An Arrow batch as PostgreSQL `COPY ... (FORMAT csv)` input, formatted by Arrow's C++ writer.

    Arrow quotes every string, so an empty string ("") and NULL (nothing) stay
    apart; timestamps are written in UTC with a `Z`; floats in their shortest
    exact form. bytea goes as `\\x<hex>` text, which CSV leaves alone.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    arrays, names = [], []
    for i, c in enumerate(columns):
        array = batch.column(i)
        if c.kind == "binary":
            array = pa.array([None if v is None else "\\x" + v.hex() for v in array.to_pylist()], pa.string())
        elif c.kind == "timestamp" and getattr(array.type, "tz", None) not in (None, "UTC"):
            array = array.cast(pa.timestamp(array.type.unit, "UTC"))
        arrays.append(array)
        names.append(f"c{i}")
    out = io.BytesIO()
    pacsv.write_csv(pa.RecordBatch.from_arrays(arrays, names=names), out,
                    pacsv.WriteOptions(include_header=False, quoting_style="needed"))
    return out.getvalue()
