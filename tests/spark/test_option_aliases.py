"""Delta's and Spark's time-travel names read the snapshot Paimon's names read."""

from __future__ import annotations

import datetime as dt

import pytest

import lakesink
from tests.helpers import read_table, snapshots
from tests.unit.test_maintenance import Writer

pytestmark = pytest.mark.spark


@pytest.fixture()
def table(table_path):
    writer = Writer(table_path)
    for rows in (1, 2, 3):  # snapshot n holds 1 + ... + n rows
        writer.commit(rows=rows)
    return table_path


def _ids(df) -> list[int]:
    return sorted(r["id"] for r in df.select("id").collect())


def _expected(path, snapshot_id) -> list[int]:
    return sorted(read_table(path, snapshot_id).column("id").to_pylist())


def test_version_as_of_reads_that_snapshot_through_format_paimon_and_lakesink_read(spark, table):
    assert _ids(spark.read.format("paimon").option("versionAsOf", 1).load(table)) == _expected(table, 1)
    assert _ids(lakesink.read(spark, table, options={"versionAsOf": 2})) == _expected(table, 2)
    assert _expected(table, 2) == [0, 1, 2]


def test_timestamp_as_of_takes_an_iso_time_and_reads_the_newest_snapshot_at_or_before_it(spark, table):
    second = snapshots(table)[1]
    expected_id = max(s.id for s in snapshots(table) if s.time_millis <= second.time_millis)
    iso = dt.datetime.fromtimestamp(second.time_millis / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    assert _ids(lakesink.read(spark, table, options={"timestampAsOf": iso})) == _expected(table, expected_id)
    df = spark.read.format("paimon").option("timestampAsOf", str(second.time_millis)).load(table)
    assert _ids(df) == _expected(table, expected_id)


def test_an_option_and_the_argument_for_the_same_time_travel_are_refused_together(spark, table):
    with pytest.raises(lakesink.ConfigurationError, match="snapshot= and option scan.snapshot-id"):
        lakesink.read(spark, table, snapshot=1, options={"versionAsOf": 2})

