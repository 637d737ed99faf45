"""Paimon's key hash and fixed-bucket function over Arrow columns, vectorized with numpy (no row in Python).

The same function as `spark.bucket` computes in the JVM, for the Spark-native write path,
whose tasks get their rows as Arrow batches: `abs(h % n)` (Java's truncating `%`), `h` the
Murmur3-32 (seed 42, 4-byte little-endian words) of the bucket-key row in Paimon's
`BinaryRow` layout (see `spark.bucket` for the layout and where lakesink follows Java's
`BinaryRowWriter` rather than pypaimon 2.1: null wide decimals and timestamps reserve their
var bytes, wide decimals take `BigInteger.toByteArray()`'s minimal bytes).

Every row's fixed part (header and one 8-byte slot per field) is a column of words;
variable-length parts (strings and binaries over 7 bytes, wide decimals, wide
timestamps) are copied into one flat buffer, and the hash runs word by word over all
rows at once, rows sorted by length so that each step touches only the rows still long
enough. Checked row for row against pypaimon's `FixedBucketRowKeyExtractor` and Java's
layout (tests/unit/test_arrow_bucket.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ...errors import ConfigurationError

HEADER_BYTES = 8  # row kind byte + null bits for up to 56 fields
MAX_KEY_FIELDS = 56


@dataclass(frozen=True)
class KeyType:
    """A bucket-key field's Paimon type, reduced to what its serialization needs."""

    kind: str  # bool, i8, i16, i32, i64, f32, f64, str, bin, dec, ts, date
    precision: int = 0
    scale: int = 0

    @property
    def compact(self) -> bool:
        if self.kind == "dec":
            return self.precision <= 18
        if self.kind == "ts":
            return self.precision <= 3
        return True


_SIMPLE = {"BOOLEAN": "bool", "TINYINT": "i8", "SMALLINT": "i16", "INT": "i32", "INTEGER": "i32",
           "BIGINT": "i64", "FLOAT": "f32", "DOUBLE": "f64", "STRING": "str", "BYTES": "bin",
           "DATE": "date"}


def key_type(paimon_type) -> KeyType:
    """Parse a pypaimon field type; refuse types Paimon or this module cannot bucket by."""
    text = str(getattr(paimon_type, "type", paimon_type)).upper().replace(" NOT NULL", "").strip()
    if text in _SIMPLE:
        return KeyType(_SIMPLE[text])
    head, _, params = text.partition("(")
    numbers = [int(n) for n in re.findall(r"\d+", params)]
    if head in ("CHAR", "VARCHAR"):
        return KeyType("str")
    if head in ("BINARY", "VARBINARY"):
        return KeyType("bin")
    if head in ("DECIMAL", "NUMERIC"):
        precision, scale = (numbers + [10, 0])[:2] if numbers else (10, 0)
        return KeyType("dec", precision, scale)
    if head in ("TIMESTAMP", "TIMESTAMP_LTZ") or text.startswith("TIMESTAMP"):
        return KeyType("ts", numbers[0] if numbers else 6)
    raise ConfigurationError(
        f"bucket-key type {text} is not supported by lakesink's bucket function (supported: boolean, "
        "tinyint, smallint, int, bigint, float, double, string/char/varchar, binary/bytes, decimal, "
        "date, timestamp, timestamp_ltz)."
    )



_U32 = np.uint32
_C1, _C2 = _U32(0xCC9E2D51), _U32(0x1B873593)
_FMIX1, _FMIX2 = _U32(0x85EBCA6B), _U32(0xC2B2AE35)
_FLOAT_NAN, _DOUBLE_NAN = 0x7FC00000, 0x7FF8000000000000  # Java's canonical NaN bits
_PER_MILLI = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


def bucket_ids(table: pa.Table, key_names, paimon_fields, num_buckets: int) -> np.ndarray:
    """int32 array: each row's bucket for the bucket key `key_names` (Paimon field types from
    `paimon_fields`, values in the table's Arrow types)."""
    return buckets_of_hashes(key_hashes(table, key_names, paimon_fields), num_buckets)


def buckets_of_hashes(hashes: np.ndarray, num_buckets: int) -> np.ndarray:
    """abs(h % n) with Java's truncating remainder, `h` the signed 32-bit hash."""
    signed = hashes.astype(np.int64)
    return np.abs(np.fmod(signed, num_buckets)).astype(np.int32)


def key_hashes(table: pa.Table, key_names, paimon_fields) -> np.ndarray:
    """int32 array: Paimon's `BinaryRow.hashCode()` of each row's bucket-key row."""
    if not key_names:
        raise ConfigurationError("a bucket key needs at least one column")
    if len(key_names) > MAX_KEY_FIELDS:
        raise ConfigurationError(f"a bucket key of {len(key_names)} columns is not supported "
                                 f"(at most {MAX_KEY_FIELDS}).")
    by_name = {f.name: f for f in paimon_fields}
    types = [key_type(by_name[k].type) for k in key_names]
    n = table.num_rows
    k = len(key_names)
    fixed_bytes = HEADER_BYTES + 8 * k
    header = np.zeros(n, np.uint64)
    fields = []
    for i, (name, t) in enumerate(zip(key_names, types)):
        column = table.column(name)
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        field = _Field(column, t)
        header |= np.where(field.null, np.uint64(1 << (8 + i)), np.uint64(0))
        fields.append(field)
    # Where each field's var bytes start (from the row's start), in field order.
    var_total = np.zeros(n, np.int64)
    offsets = []
    for field in fields:
        offsets.append(fixed_bytes + var_total)
        var_total = var_total + field.var_len
    words = [header & np.uint64(0xFFFFFFFF), header >> np.uint64(32)]
    for field, offset in zip(fields, offsets):
        slot = field.slot(offset)
        words += [slot & np.uint64(0xFFFFFFFF), slot >> np.uint64(32)]
    h = np.full(n, 42, _U32)
    for word in words:
        h = _mix(h, word.astype(_U32))
    if var_total.any():
        h = _mix_var(h, fields, offsets, fixed_bytes, var_total)
    h = _fmix(h, (fixed_bytes + var_total).astype(_U32))
    return h.view(np.int32)


# -- one field: its slot and var bytes ---------------------------------------------------------

class _Field:
    def __init__(self, column: pa.Array, t: KeyType):
        self.column, self.t = column, t
        n = len(column)
        self.null = (column.is_null().to_numpy(zero_copy_only=False) if column.null_count
                     else np.zeros(n, bool))
        self.var_len = np.zeros(n, np.int64)
        if t.kind in ("str", "bin"):
            self.data, self.starts, self.lengths = _binary_parts(column)
            self.lengths = np.where(self.null, 0, self.lengths)
            self.var_len = np.where(self.lengths > 7, (self.lengths + 7) // 8 * 8, 0)
        elif t.kind == "dec" and not t.compact:
            self.var_len = np.full(n, 16, np.int64)  # reserved for nulls too (Java)
            self.var_bytes, self.length = _wide_decimal(column)
        elif t.kind == "ts" and not t.compact:
            self.var_len = np.full(n, 8, np.int64)
            millis, self.length = _millis_nanos(column)  # the slot holds nano-of-milli
            self.var_bytes = millis.astype("<i8").view(np.uint8).reshape(-1, 8)

    def slot(self, offset: np.ndarray) -> np.ndarray:
        """uint64 per row: the 8-byte slot as a little-endian number; `offset`: where this
        field's var bytes start."""
        t, null = self.t, self.null
        pointer = offset.astype(np.uint64) << np.uint64(32)
        if t.kind in ("str", "bin"):
            inline = _inline(self.data, self.starts, self.lengths)
            out = np.where(self.lengths > 7, pointer | self.lengths.astype(np.uint64), inline)
        elif t.compact:
            out = _fixed(self.column, t)
        else:  # wide decimal / timestamp: a null still points at its (zero) var bytes
            return pointer | np.where(null, 0, self.length).astype(np.uint64)
        return np.where(null, np.uint64(0), out)

    def write_var(self, buffer: np.ndarray, at: np.ndarray) -> None:
        """Copy this field's var bytes into `buffer` at positions `at` (per row)."""
        t = self.t
        if t.kind in ("str", "bin"):
            rows = np.flatnonzero(self.var_len)
            _ragged_copy(self.data, self.starts[rows], self.lengths[rows], buffer, at[rows])
        else:  # wide decimal (16 bytes) or wide timestamp (8 bytes): nulls stay zero
            rows = np.flatnonzero(~self.null)
            width = self.var_bytes.shape[1]
            index = at[rows, None] + np.arange(width)
            buffer[index] = self.var_bytes[rows]


def _binary_parts(column: pa.Array):
    """(data bytes, start, length) per row of a string or binary array."""
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    elif not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        column = column.cast(pa.binary())
    offset_type = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    buffers = column.buffers()
    n = len(column)
    offsets = np.frombuffer(buffers[1], offset_type, n + 1, column.offset * np.dtype(offset_type).itemsize)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1].astype(np.int64)
    return data, starts, offsets[1:].astype(np.int64) - starts


def _inline(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Slots of values of at most 7 bytes: the bytes, then 0x80 | length in the last byte."""
    out = np.zeros(len(starts), np.uint64)
    short = lengths <= 7
    for j in range(7):
        has = short & (lengths > j)
        if not has.any():
            break
        byte = np.zeros(len(starts), np.uint64)
        byte[has] = data[starts[has] + j]
        out |= byte << np.uint64(8 * j)
    return out | (np.where(short, 0x80 | lengths, 0).astype(np.uint64) << np.uint64(56))


def _fixed(column: pa.Array, t: KeyType) -> np.ndarray:
    """Slots of fixed-size values (garbage where null: the caller zeroes those)."""
    kind = t.kind
    if kind == "bool":
        return column.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint64)
    if kind == "date":
        values = column.cast(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False)
        return values.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)
    if kind in ("i8", "i16", "i32", "i64"):
        values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64).astype(np.uint64)
        mask = {"i8": 0xFF, "i16": 0xFFFF, "i32": 0xFFFFFFFF, "i64": 0xFFFFFFFFFFFFFFFF}[kind]
        return values & np.uint64(mask)
    if kind == "f32":
        values = column.cast(pa.float32()).fill_null(0.0).to_numpy(zero_copy_only=False)
        bits = values.view(np.uint32).astype(np.uint64)
        return np.where(np.isnan(values), np.uint64(_FLOAT_NAN), bits)
    if kind == "f64":
        values = column.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        return np.where(np.isnan(values), np.uint64(_DOUBLE_NAN), values.view(np.uint64))
    if kind == "dec":  # compact: the unscaled value as a long
        return _unscaled_words(column)[:, 0].view(np.uint64)
    if kind == "ts":   # compact: epoch milliseconds
        return _millis_nanos(column)[0].astype(np.int64).view(np.uint64)
    raise AssertionError(t)


def _unscaled_words(column: pa.Array) -> np.ndarray:
    """(n, 2) int64: the little-endian words of each decimal's 128-bit unscaled value."""
    if not pa.types.is_decimal128(column.type):
        column = column.cast(pa.decimal128(column.type.precision, column.type.scale))
    buffer = column.buffers()[1]
    return np.frombuffer(buffer, np.int64, 2 * len(column), column.offset * 16).reshape(-1, 2)


def _wide_decimal(column: pa.Array):
    """((n, 16) uint8 var bytes, length): `BigInteger.toByteArray()` of the unscaled value
    (minimal big-endian two's complement), zero-padded to 16 bytes."""
    words = _unscaled_words(column)
    big_endian = words.astype("<i8").view(np.uint8).reshape(-1, 16)[:, ::-1]
    negative = big_endian[:, 0] >= 0x80
    fill = np.where(negative, 0xFF, 0x00).astype(np.uint8)
    redundant = np.zeros(len(column), np.int64)  # leading bytes the minimal form drops
    still = np.ones(len(column), bool)
    for j in range(15):
        still &= (big_endian[:, j] == fill) & ((big_endian[:, j + 1] >= 0x80) == negative)
        redundant += still
    index = redundant[:, None] + np.arange(16)
    inside = index < 16
    out = np.where(inside, np.take_along_axis(big_endian, np.minimum(index, 15), axis=1), 0).astype(np.uint8)
    return out, 16 - redundant


def _millis_nanos(column: pa.Array):
    """(epoch millis floored, nano-of-millisecond) of a timestamp column, as Paimon's Timestamp."""
    unit = column.type.unit
    values = column.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if unit == "s":
        return values * 1000, np.zeros(len(values), np.int64)
    per_milli = _PER_MILLI[unit]
    millis = np.floor_divide(values, per_milli)
    sub = values - millis * per_milli
    return millis, sub * (1_000_000 // per_milli)


def _ragged_copy(src: np.ndarray, starts: np.ndarray, lengths: np.ndarray, dst: np.ndarray,
                 at: np.ndarray) -> None:
    """dst[at[i] : at[i] + lengths[i]] = src[starts[i] : starts[i] + lengths[i]] for every i."""
    total = int(lengths.sum())
    if total == 0:
        return
    before = np.cumsum(lengths) - lengths
    within = np.arange(total) - np.repeat(before, lengths)
    dst[np.repeat(at, lengths) + within] = src[np.repeat(starts, lengths) + within]


# -- Murmur3-32 ----------------------------------------------------------------------------------

def _mix(h: np.ndarray, k1: np.ndarray) -> np.ndarray:
    k1 = k1 * _C1
    k1 = (k1 << _U32(15)) | (k1 >> _U32(17))
    k1 = k1 * _C2
    h = h ^ k1
    h = (h << _U32(13)) | (h >> _U32(19))
    return h * _U32(5) + _U32(0xE6546B64)


def _fmix(h: np.ndarray, length: np.ndarray) -> np.ndarray:
    h = h ^ length
    h = h ^ (h >> _U32(16))
    h = h * _FMIX1
    h = h ^ (h >> _U32(13))
    h = h * _FMIX2
    return h ^ (h >> _U32(16))


def _mix_var(h: np.ndarray, fields, offsets, fixed_bytes: int, var_total: np.ndarray) -> np.ndarray:
    """Continue the hash over each row's var part (its own length; a multiple of 8 bytes)."""
    starts = np.cumsum(var_total) - var_total
    buffer = np.zeros(int(var_total.sum()), np.uint8)
    for field, offset in zip(fields, offsets):
        if field.var_len.any():
            field.write_var(buffer, starts + (offset - fixed_bytes))
    words = buffer.view("<u4")
    count = var_total // 4
    order = np.argsort(-count, kind="stable")  # longest first: step j touches a prefix
    first = (starts // 4)[order]
    remaining = count[order]
    hs = h[order]
    for j in range(int(remaining[0]) if len(remaining) else 0):
        active = int(np.searchsorted(-remaining, -j, side="left"))  # rows with more than j words
        hs[:active] = _mix(hs[:active], words[first[:active] + j])
    out = np.empty_like(h)
    out[order] = hs
    return out
