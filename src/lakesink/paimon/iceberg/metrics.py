"""A data file's Paimon statistics as Iceberg's column metrics: value and null counts, lower and
upper bounds (Iceberg's single-value binary form), keyed by field id.

Readers skip files by these, so only exact statistics are given: bounds of booleans, integers,
dates, strings and decimals (encoded for the column's type in the current schema, so a widened
INT reads as a long), none of floats (NaN) or timestamps; nothing for a column the file's
statistics leave out (`value_stats_cols`)."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

_EPOCH = dt.date(1970, 1, 1)


def encode(iceberg_type, value) -> bytes | None:
    """`value` in Iceberg's single-value serialization for `iceberg_type`, or None (no bound)."""
    if value is None or not isinstance(iceberg_type, str):
        return None
    if iceberg_type == "boolean" and isinstance(value, bool):
        return b"\x01" if value else b"\x00"
    if iceberg_type in ("int", "long") and isinstance(value, int) and not isinstance(value, bool):
        return struct.pack("<i" if iceberg_type == "int" else "<q", value)
    if iceberg_type == "date":
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return struct.pack("<i", (value - _EPOCH).days)
        if isinstance(value, int) and not isinstance(value, bool):
            return struct.pack("<i", value)
        return None
    if iceberg_type == "string" and isinstance(value, str):
        return value.encode("utf-8")
    if iceberg_type.startswith("decimal(") and isinstance(value, decimal.Decimal):
        scale = int(iceberg_type[len("decimal("):-1].split(",")[1])
        if -value.as_tuple().exponent > scale:
            return None
        unscaled = int(value.scaleb(scale))
        magnitude = unscaled if unscaled >= 0 else ~unscaled
        return unscaled.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)  # with a sign bit
    return None


def of_file(meta, file_fields: list, current_types: dict[int, object]) -> dict[str, list[dict]]:
    """Iceberg's `value_counts`, `null_value_counts`, `lower_bounds`, `upper_bounds` of one Paimon
    file (`meta`: its DataFileMeta; `file_fields`: the fields of the schema it was written with;
    `current_types`: field id -> Iceberg type in the current schema)."""
    stats = meta.value_stats
    columns = meta.value_stats_cols
    names = [f.name for f in file_fields] if columns is None else list(columns)
    ids = {f.name: f.id for f in file_fields}
    out: dict[str, list[dict]] = {"value_counts": [], "null_value_counts": [], "lower_bounds": [],
                                  "upper_bounds": []}
    if not names or stats is None:
        return out
    nulls = stats.null_counts or []
    for index, name in enumerate(names):
        field_id = ids.get(name)
        if field_id is None or field_id not in current_types:
            continue
        kind = current_types[field_id]
        if not isinstance(kind, str):  # nested: Paimon keeps no statistics of them
            continue
        if index < len(nulls) and nulls[index] is not None:
            out["value_counts"].append({"key": field_id, "value": meta.row_count})
            out["null_value_counts"].append({"key": field_id, "value": int(nulls[index])})
        try:
            low, high = stats.min_values.get_field(index), stats.max_values.get_field(index)
        except (IndexError, ValueError, TypeError):
            continue
        low, high = encode(kind, low), encode(kind, high)
        if low is not None and high is not None:
            out["lower_bounds"].append({"key": field_id, "value": low})
            out["upper_bounds"].append({"key": field_id, "value": high})
    return out
