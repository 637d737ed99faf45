"""Rows of any reader as comparable JSON values, encoded as PaimonOracle.java encodes them.

DECIMAL: plain string; DATE: ISO; TIMESTAMP / TIMESTAMP_LTZ: epoch microseconds;
BINARY: base64; FLOAT/DOUBLE: numbers (NaN and infinities as strings);
ARRAY: list; MAP: [key, value] pairs sorted by the key's JSON text; ROW: object.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from decimal import Decimal

import pyarrow as pa

_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH = dt.datetime(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)


def encode(value, type_: pa.DataType):
    if value is None:
        return None
    if pa.types.is_timestamp(type_):
        if not isinstance(value, dt.datetime):  # pandas Timestamp for ns
            value = value.to_pydatetime()
        return (value - (_EPOCH_UTC if value.tzinfo else _EPOCH)) // _MICRO
    if pa.types.is_date(type_):
        return value.isoformat()
    if pa.types.is_decimal(type_):
        return format(Decimal(value), "f")
    if (pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or pa.types.is_fixed_size_binary(type_)
            or pa.types.is_binary_view(type_)):
        return base64.b64encode(value).decode("ascii")
    if pa.types.is_floating(type_):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN") \
            if math.isnan(value) or math.isinf(value) else float(value)
    if pa.types.is_map(type_):
        pairs = [[encode(k, type_.key_type), encode(v, type_.item_type)] for k, v in value]
        return sorted(pairs, key=lambda pair: json.dumps(pair[0], ensure_ascii=False))
    if (pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_)
            or pa.types.is_list_view(type_) or pa.types.is_large_list_view(type_)):
        return [encode(v, type_.value_type) for v in value]
    if pa.types.is_struct(type_):
        return {type_.field(i).name: encode(value.get(type_.field(i).name), type_.field(i).type)
                for i in range(type_.num_fields)}
    if isinstance(value, (dt.time,)):
        return (value.hour * 3600 + value.minute * 60 + value.second) * 1000 + value.microsecond // 1000
    return value


def from_arrow(table: pa.Table) -> list[dict]:
    columns = {name: [encode(v, table.schema.field(name).type) for v in table.column(name).to_pylist()]
               for name in table.column_names}
    return [{name: columns[name][i] for name in table.column_names} for i in range(table.num_rows)]


def null_all_null_structs(value):
    """`value` with every struct whose fields are all null replaced by null, recursively.

    Paimon's Java Parquet reader 1.0 reads such a struct as null, also from files its own
    writer wrote (tests/interop/test_java_tables.py shows it), so comparisons with that
    reader treat the two as equal. Structs are the only objects in the encoding.
    """
    if isinstance(value, dict):
        inner = {k: null_all_null_structs(v) for k, v in value.items()}
        return None if inner and all(v is None for v in inner.values()) else inner
    if isinstance(value, list):
        return [null_all_null_structs(v) for v in value]
    return value


def canonical(rows: list[dict]) -> list[str]:
    """Order-free form of a list of rows: each row as sorted-key JSON, the list sorted."""
    return sorted(json.dumps(row, sort_keys=True, ensure_ascii=False) for row in rows)


def assert_same_rows(got: list[dict], expected: list[dict], what: str) -> None:
    got_c, expected_c = canonical(got), canonical(expected)
    if got_c == expected_c:
        return
    missing = [r for r in expected_c if r not in set(got_c)]
    extra = [r for r in got_c if r not in set(expected_c)]
    detail = ""
    if all("id" in row for row in got + expected):
        # Same ids on both sides: name the columns that differ (first rows only).
        by_id = {row["id"]: row for row in got}
        diffs = []
        for row in expected:
            other = by_id.get(row["id"])
            if other is not None and other != row:
                diffs.append({k: (other.get(k), row.get(k)) for k in row if other.get(k) != row.get(k)})
        detail = f"; differing columns (read, expected): {diffs[:3]}"
    raise AssertionError(
        f"{what}: {len(got_c)} rows read, {len(expected_c)} expected{detail}; "
        f"{len(missing)} expected rows not read, e.g. {missing[:2]}; "
        f"{len(extra)} rows read but not expected, e.g. {extra[:2]}")
