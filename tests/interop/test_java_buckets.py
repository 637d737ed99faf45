"""Java Paimon and lakesink put a key in the same bucket, also where pypaimon 2.1 does not.

A DECIMAL(38, 10) key whose unscaled value is -2^7 or -2^15 is serialized by Java's
BinaryRowWriter in 1 or 2 bytes (BigInteger.toByteArray), by pypaimon 2.1 in one byte more, so
pypaimon buckets it elsewhere (docs/keyed.md, "Bucket function"). Java Paimon writes the keys,
lakesink upserts every one of them: each key must read back once, with lakesink's value, through
Java Paimon's reader and pypaimon's (a key in two buckets would read twice).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

import lakesink
from tests.helpers import read_table

pytestmark = [pytest.mark.interop, pytest.mark.spark]

KEYS = [Decimal(-128).scaleb(-10), Decimal(-32768).scaleb(-10), Decimal(-2**63).scaleb(-10),
        Decimal(-127).scaleb(-10), Decimal(128).scaleb(-10), Decimal("12345.6789"), Decimal(0)]


# ./dev full: Java's own bucketing of wide decimals (the default run compares lakesink's with Java's bytes, tests/spark/test_keyed_bucket.py)
@pytest.mark.full
def test_java_paimon_and_lakesink_bucket_wide_decimal_keys_alike(spark, java_paimon, tmp_path):
    from pyspark.sql.types import DecimalType, StringType, StructField, StructType

    path = str(tmp_path / "db.db" / "wide_keys")
    spec = {"columns": [["k", "DECIMAL(38, 10)"], ["v", "STRING"]], "primary_key": ["k"], "partition": [],
            "options": {"bucket": "8"}, "batches": [[["+I", [str(k), "java"]] for k in KEYS]]}
    java_paimon.replay(spec, path, tmp_path / "replay")

    schema = StructType([StructField("k", DecimalType(38, 10)), StructField("v", StringType())])
    lakesink.write(spark.createDataFrame([(k, "lake") for k in KEYS], schema), path)

    expected = sorted((k, "lake") for k in KEYS)
    by_java = sorted((Decimal(str(r["k"])), r["v"]) for r in java_paimon.read(path, tmp_path / "java"))
    assert by_java == expected
    by_pypaimon = read_table(path)
    assert sorted(zip(by_pypaimon.column("k").to_pylist(), by_pypaimon.column("v").to_pylist())) == expected
