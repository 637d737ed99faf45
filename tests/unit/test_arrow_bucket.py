"""Paimon's bucket function over Arrow columns (lakesink.paimon.files.keyhash, what the Spark-native
path's tasks route rows with) equals pypaimon's, and Java's layout where pypaimon 2.1 differs.

The same random keys as tests/spark/test_keyed_bucket.py (which checks the JVM version), no Spark.
"""

from __future__ import annotations

import random
from decimal import Decimal

import pyarrow as pa
import pytest

from lakesink.paimon.files.keyhash import bucket_ids, key_hashes
from tests.spark.test_keyed_bucket import (BUCKETS, KINDS, _NO_NULLS, _murmur_bucket, _pypaimon_buckets, _values,
                                          composite_keys)


def _fields(table: pa.Table):
    from pypaimon.schema.data_types import PyarrowFieldParser
    return PyarrowFieldParser.to_paimon_schema(table.schema)


def _compare(table: pa.Table, key_names, n):
    hashes, buckets, fields = _pypaimon_buckets(table, key_names, n)
    got_h = key_hashes(table, key_names, fields).tolist()
    got_b = bucket_ids(table, key_names, fields, n).tolist()
    bad = [i for i in range(len(hashes)) if hashes[i] != got_h[i] or buckets[i] != got_b[i]]
    assert not bad, [(table.slice(i, 1).to_pylist(), hashes[i], got_h[i], buckets[i], got_b[i]) for i in bad[:5]]


@pytest.mark.parametrize("kind", KINDS)
def test_single_key_matches_pypaimon(kind):
    rng = random.Random(hash(kind) & 0xFFFF)
    arrow_type, values = _values(kind, rng)
    if kind not in _NO_NULLS:
        values = [None if rng.random() < 0.05 else v for v in values]
    n = BUCKETS[KINDS.index(kind) % len(BUCKETS)]
    _compare(pa.table({"k": pa.array(values, arrow_type)}), ["k"], n)


def test_composite_keys_match_pypaimon():
    """Several var-length fields in one row: offsets of later fields depend on earlier lengths."""
    table, names = composite_keys(random.Random(7))
    for n in (5, 64):
        _compare(table, names, n)
    # Sliced and chunked input (Spark hands tasks many batches): same answer per row.
    chunked = pa.concat_tables([table.slice(0, 700), table.slice(700, 1), table.slice(701)])
    fields = _fields(table)
    assert bucket_ids(chunked.slice(3), names, fields, 64).tolist() == bucket_ids(table, names, fields, 64).tolist()[3:]


def _one(arrow_type, value, n):
    table = pa.table({"k": pa.array([value], arrow_type)})
    fields = _fields(table)
    return key_hashes(table, ["k"], fields).tolist()[0], bucket_ids(table, ["k"], fields, n).tolist()[0]


def test_null_wide_decimal_and_timestamp_follow_java():
    # header: null bit of field 0 is bit 8; slot: offset (16) << 32, size 0; var: zeros.
    header = (1 << 8).to_bytes(8, "little")
    slot = (16 << 32).to_bytes(8, "little")
    assert _one(pa.decimal128(38, 2), None, 7) == _murmur_bucket(header + slot + bytes(16), 7)
    assert _one(pa.timestamp("us"), None, 7) == _murmur_bucket(header + slot + bytes(8), 7)


@pytest.mark.parametrize("unscaled", [-128, -2**63, -2**15, -1, 0, 127, 128, 2**63])
def test_wide_decimal_bytes_are_java_minimal(unscaled):
    """BigInteger.toByteArray(): minimal two's complement (-128 is one byte 0x80)."""
    length = (unscaled.bit_length() if unscaled >= 0 else (-unscaled - 1).bit_length()) // 8 + 1
    body = unscaled.to_bytes(length, "big", signed=True)
    row = bytes(8) + ((16 << 32) | length).to_bytes(8, "little") + body + bytes(16 - length)
    assert _one(pa.decimal128(20, 0), Decimal(unscaled), 9) == _murmur_bucket(row, 9)


def test_large_string_and_nan_keys():
    from pypaimon.schema.data_types import PyarrowFieldParser
    values = ["", "a", "exactly7", "longer than seven", None, "é漢😀"]
    small = pa.table({"k": pa.array(values, pa.string())})
    large = pa.table({"k": pa.array(values, pa.large_string())})
    fields = PyarrowFieldParser.to_paimon_schema(small.schema)
    assert bucket_ids(large, ["k"], fields, 16).tolist() == bucket_ids(small, ["k"], fields, 16).tolist()
    # Java's doubleToLongBits: every NaN hashes as the canonical one.
    nans = pa.table({"k": pa.array([float("nan"), -float("nan")], pa.float64())})
    assert len(set(key_hashes(nans, ["k"], _fields(nans)).tolist())) == 1
