"""Paimon's BinaryRow bytes of a row of values, with each field's layout decided once per schema.

pypaimon's `GenericRowSerializer.to_bytes` decides every field's layout from its type's
name for every value (~0.1 ms a row). A key-value file's description holds six rows (first
and last key, key and value stats), and a keyed micro-batch describes a file per bucket
and task, so that cost lands on every batch. `row_bytes` gives the same bytes (tests hold
them equal to pypaimon's for every type) from a plan made once per field list; a type it
has no plan for (variant, blob, nested) is left to pypaimon, as is the conversion of
timestamps, dates, times and decimals to their stored numbers.

Layout (Paimon's BinaryRow, with the 4-byte big-endian arity in front as pypaimon keeps
it): a null bit set of 8-byte words (the first byte is the row kind), 8 bytes per field,
then the variable part. Values of up to 7 bytes (strings, binaries) sit in the field's
8 bytes with 0x80 | length in the last; longer ones, timestamps of precision > 3 (millis)
and decimals of precision > 18 (16 bytes) go to the variable part, the field holding
(offset << 32) | length (or nanos of the milli for timestamps).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from decimal import Decimal

from pypaimon.schema.data_types import AtomicType
from pypaimon.table.row import generic_row as _pp

_S = _pp.GenericRowSerializer
_FIXED: dict[str, Callable] = {
    "BOOLEAN": lambda v: b"\x01\x00\x00\x00\x00\x00\x00\x00" if v else bytes(8),
    "TINYINT": struct.Struct("<b7x").pack,
    "SMALLINT": struct.Struct("<h6x").pack,
    "INT": struct.Struct("<i4x").pack,
    "INTEGER": struct.Struct("<i4x").pack,
    "BIGINT": struct.Struct("<q").pack,
    "FLOAT": struct.Struct("<f4x").pack,
    "DOUBLE": struct.Struct("<d").pack,
    "DATE": lambda v: _S._serialize_date(v) + bytes(4),
}
for _alias, _name in (("BOOL", "BOOLEAN"), ("BYTE", "TINYINT"), ("SHORT", "SMALLINT"), ("LONG", "BIGINT"),
                      ("REAL", "FLOAT")):
    _FIXED[_alias] = _FIXED[_name]
_TEXT = ("CHAR", "VARCHAR", "STRING")
_BINARY = ("BINARY", "VARBINARY", "BYTES")
_LONG = struct.Struct("<q")


def _field_plan(data_type):
    """(kind, encode) of one field: kind "fixed" (8 bytes), "var" (bytes), "ts" (millis, nanos),
    "compact" or "dec" (unscaled, overflowed); None when pypaimon must serialize the row."""
    if not isinstance(data_type, AtomicType):
        return None
    name = data_type.type.upper()
    head = name.split("(", 1)[0].split()[0] if name.strip() else ""
    if head in _FIXED:
        return "fixed", _FIXED[head]
    if head == "TIME":
        return "fixed", lambda v: _S._serialize_time(v) + bytes(4)
    if head in _TEXT:
        return "var", lambda v: str(v).encode("utf-8")
    if head in _BINARY:
        return "var", bytes
    if head in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        precision, _ = _pp._parse_type_precision_scale(data_type)
        normalize = _pp._normalize_ltz if _pp._is_ltz_type(name) else _naive
        if precision <= 3:
            return "fixed", lambda v: _S._serialize_timestamp(normalize(v))
        return "ts", lambda v: _pp._datetime_to_millis_and_nanos(normalize(v))
    if head in ("DECIMAL", "NUMERIC"):
        precision, scale = _pp._parse_type_precision_scale(data_type)

        def unscaled(v):
            return _pp._decimal_to_unscaled_with_check(v if isinstance(v, Decimal) else Decimal(str(v)),
                                                       precision, scale)
        return ("compact" if precision <= 18 else "dec"), unscaled
    return None


def _naive(value):
    if value.tzinfo is not None:
        raise RuntimeError("datetime tzinfo not supported yet")  # as pypaimon refuses it
    return value


_plans: dict[tuple, tuple | None] = {}


def _plan(fields: Sequence):
    key = tuple(f.type.type if isinstance(f.type, AtomicType) else repr(f.type) for f in fields)
    if key not in _plans:
        plans = tuple(_field_plan(f.type) for f in fields)
        _plans[key] = None if any(p is None for p in plans) else plans
    return _plans[key]


def row_bytes(values: Sequence, fields: Sequence, row_kind: int = 0) -> bytes:
    """The bytes pypaimon's `GenericRowSerializer.to_bytes(GenericRow(values, fields))` gives."""
    plans = _plan(fields)
    if plans is None:
        return _S.to_bytes(_pp.GenericRow(list(values), list(fields), _pp.RowKind(row_kind)))
    arity = len(fields)
    null_bytes = ((arity + 63 + 8) // 64) * 8
    fixed_size = null_bytes + arity * 8
    fixed = bytearray(fixed_size)
    fixed[0] = row_kind
    var: list[bytes] = []
    var_size = 0
    for i, (value, (kind, encode)) in enumerate(zip(values, plans)):
        at = null_bytes + i * 8
        if value is None:
            fixed[(i + 8) // 8] |= 1 << ((i + 8) % 8)
            continue
        if kind == "fixed":
            fixed[at:at + 8] = encode(value)
        elif kind == "var":
            data = encode(value)
            length = len(data)
            if length <= 7:
                fixed[at:at + length] = data
                fixed[at + 7] = 0x80 | length
            else:
                padded = (length + 7) & ~7
                var.append(data + bytes(padded - length))
                _LONG.pack_into(fixed, at, ((fixed_size + var_size) << 32) | length)
                var_size += padded
        elif kind == "ts":
            millis, nanos = encode(value)
            var.append(_LONG.pack(millis))
            _LONG.pack_into(fixed, at, ((fixed_size + var_size) << 32) | nanos)
            var_size += 8
        else:  # a decimal: unscaled; one that overflows its precision is stored as null
            unscaled, overflow = encode(value)
            if overflow:
                fixed[(i + 8) // 8] |= 1 << ((i + 8) % 8)
                continue
            if kind == "compact":
                _LONG.pack_into(fixed, at, unscaled)
                continue
            # 16 bytes in the variable part, big-endian two's complement
            data = b"\x00" if unscaled == 0 else unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big",
                                                                   signed=True)
            var.append(data + bytes(16 - len(data)))
            _LONG.pack_into(fixed, at, ((fixed_size + var_size) << 32) | len(data))
            var_size += 16
    return struct.pack(">i", arity) + bytes(fixed) + b"".join(var)
