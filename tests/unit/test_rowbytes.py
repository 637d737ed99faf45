"""`paimon.files.rowbytes` gives, byte for byte, what pypaimon's own row serializer gives: for every
atomic type Paimon has, nulls, inline and long variable-length values, compact and
non-compact timestamps and decimals (with overflow), and rows it leaves to pypaimon."""

from __future__ import annotations

import datetime as dt
import pickle
import random
from decimal import Decimal

import pytest
from pypaimon.schema.data_types import AtomicType, DataField
from pypaimon.table.row.generic_row import GenericRow, GenericRowDeserializer, GenericRowSerializer
from pypaimon.table.row.internal_row import RowKind

from lakesink.paimon.files.datafiles import EncodedRow
from lakesink.paimon.files.rowbytes import row_bytes

UTC = dt.timezone.utc


def _values(type_name: str, rng: random.Random):
    """Values a column of `type_name` may hold, edge cases first."""
    head = type_name.split("(")[0]
    if head == "BOOLEAN":
        return [True, False]
    if head in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        bits = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}[head]
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return [low, high, 0, -1, rng.randint(low, high)]
    if head in ("FLOAT", "DOUBLE"):
        return [0.0, -0.0, 1.5, -3.25e10, float("inf"), rng.uniform(-1e6, 1e6)]
    if head == "DATE":
        return [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2026, 11, 26), dt.date(1, 1, 1)]
    if head == "TIME":
        return [dt.time(0, 0), dt.time(23, 59, 59, 999_000), dt.time(12, 30, 1, 250_000)]
    if head.startswith("TIMESTAMP"):
        naive = [dt.datetime(1970, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999_999),
                 dt.datetime(2026, 11, 26, 15, 4, 39, 123_456), dt.datetime(1900, 3, 1, 0, 0, 0, 1)]
        if head == "TIMESTAMP_LTZ" or "LOCAL TIME ZONE" in type_name:
            return naive + [dt.datetime(2026, 11, 26, 16, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))]
        return naive
    if head == "DECIMAL":
        precision, scale = (int(x) for x in type_name[len("DECIMAL("):-1].split(","))
        biggest = Decimal(10 ** precision - 1).scaleb(-scale)
        return [Decimal(0), biggest, -biggest, Decimal("1.5"), Decimal("-0.05"), biggest * 10,  # overflow: null
                Decimal(rng.randint(-10 ** (precision - 1), 10 ** (precision - 1))).scaleb(-scale)]
    if head in ("CHAR", "VARCHAR", "STRING"):
        return ["", "a", "seven77", "eight888", "ünïcödé text longer than a word", "x" * 100]
    return [b"", b"\x00", b"1234567", b"12345678", bytes(range(256))]


TYPES = ["BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DATE", "TIME", "TIME(3)",
         "TIMESTAMP(0)", "TIMESTAMP(3)", "TIMESTAMP(6)", "TIMESTAMP(9)", "TIMESTAMP_LTZ(3)", "TIMESTAMP_LTZ(6)",
         "TIMESTAMP(6) WITH LOCAL TIME ZONE", "DECIMAL(5,2)", "DECIMAL(18,4)", "DECIMAL(19,0)",
         "DECIMAL(38,10)", "CHAR(3)", "VARCHAR(20)", "STRING", "BINARY(8)", "VARBINARY(10)", "BYTES"]


def _fields(type_names):
    return [DataField(i, f"c{i}", AtomicType(t, nullable=i % 2 == 0)) for i, t in enumerate(type_names)]


@pytest.mark.parametrize("type_name", TYPES)
def test_each_type_alone_and_null(type_name):
    fields = _fields([type_name])
    for value in [None, *_values(type_name, random.Random(type_name))]:
        expected = GenericRowSerializer.to_bytes(GenericRow([value], fields))
        assert row_bytes([value], fields) == expected, value


def test_wide_rows_of_every_type_with_nulls_and_row_kinds():
    rng = random.Random(42)
    for arity in (1, 7, 56, 57, 64, 130):  # the null bit set grows by a word at 56 and 120 fields
        names = [rng.choice(TYPES) for _ in range(arity)]
        fields = _fields(names)
        for _ in range(20):
            values = [None if rng.random() < 0.2 else rng.choice(_values(n, rng)) for n in names]
            kind = rng.choice(list(RowKind))
            expected = GenericRowSerializer.to_bytes(GenericRow(values, fields, kind))
            assert row_bytes(values, fields, kind.value) == expected


def test_the_empty_row_and_rows_left_to_pypaimon():
    assert row_bytes([], []) == GenericRowSerializer.to_bytes(GenericRow([], []))
    fields = [DataField(0, "v", AtomicType("VARIANT")), DataField(1, "n", AtomicType("INT"))]
    assert row_bytes([None, 3], fields) == GenericRowSerializer.to_bytes(GenericRow([None, 3], fields))


def test_a_naive_timestamp_type_refuses_an_aware_value_as_pypaimon_does():
    fields = _fields(["TIMESTAMP(6)"])
    value = dt.datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(RuntimeError):
        GenericRowSerializer.to_bytes(GenericRow([value], fields))
    with pytest.raises(RuntimeError):
        row_bytes([value], fields)


def test_an_encoded_row_serializes_reads_compares_and_pickles_as_its_generic_row():
    fields = _fields(["BIGINT", "STRING", "TIMESTAMP(6)", "DECIMAL(38,10)"])
    values = [7, "a longer string", dt.datetime(2026, 11, 26, 1, 2, 3, 456_789), Decimal("-12.5")]
    generic = GenericRow(values, fields)
    encoded = EncodedRow.of(generic)
    assert GenericRowSerializer.to_bytes(encoded) == GenericRowSerializer.to_bytes(generic)
    assert encoded == generic and generic == encoded and encoded.values == values
    assert [encoded.get_field(i) for i in range(4)] == values and len(encoded) == 4
    decoded = GenericRowDeserializer.from_bytes(encoded.data, fields)
    assert decoded.values == values
    again = pickle.loads(pickle.dumps(encoded))
    assert again == generic and again.data == encoded.data and EncodedRow.of(again) is again
