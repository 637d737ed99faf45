"""Paimon types Spark has no exact twin for, in tables Apache Paimon's Java writer (1.0) wrote.

* TIMESTAMP(0) / TIMESTAMP_LTZ(0) / TIMESTAMP(3): Paimon stores them as INT64 millis;
  pypaimon's Arrow type for precision 0 is seconds. The statistics lakesink writes for
  files it rewrites must be in the right unit, or a reader that prunes by them (Java
  Paimon with a filter) skips rows it must return.
* TIME: read as Spark's TIME(3) (Paimon keeps millis of day).
* TIMESTAMP(9) with sub-microsecond digits: refused with the column named, never
  truncated; writes into such tables are refused before anything is written.
"""

from __future__ import annotations

import datetime as dt
import os

import pytest

import lakesink
from lakesink.paimon.read import scan

from . import rows as R
from .type_tables import TypeTables

pytestmark = [pytest.mark.interop, pytest.mark.spark]

BASE = 1_704_067_200_000  # 2024-01-01T00:00:00Z, as in TypeTables.java
DAY = 86_400_000


@pytest.fixture(scope="module")
def type_tables(java_paimon):  # java_paimon: skips with the reason when Java is unavailable
    return TypeTables()


@pytest.fixture(scope="module")
def java_tables(type_tables, java_paimon, tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("java-types")
    paths = {kind: str(warehouse / "db.db" / kind.replace("-", "_")) for kind in ("ts-low", "time", "nanos")}
    for kind, path in paths.items():
        type_tables.write(kind, path)
    reads = java_paimon.read_many(list(paths.values()), tmp_path_factory.mktemp("java-types-read"))
    return {kind: (path, reads[path]) for kind, path in paths.items()}


def _rows(df) -> list[dict]:
    return R.from_arrow(df.toArrow())


def _stream_rows(spark, path, name) -> list[dict]:
    query = (lakesink.read_stream(spark, path).writeStream.format("memory").queryName(name)
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return _rows(spark.table(name))


def _naive(value):
    # pypaimon returns TIMESTAMP_LTZ stats as UTC-aware datetimes, TIMESTAMP ones as naive
    return value.replace(tzinfo=None) if isinstance(value, dt.datetime) and value.tzinfo == dt.timezone.utc else value


def _file_stats(path) -> list[dict]:
    """{column: (min, max)} of each live file, as the manifests hold them."""
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager

    table = scan.open_for_read(path)
    snapshot = table.snapshot_manager().get_latest_snapshot()
    files = {}
    manifests = ManifestFileManager(table)
    for meta in ManifestListManager(table).read_all(snapshot):
        for entry in manifests.read(meta.file_name, drop_stats=False, file_size=meta.file_size):
            if entry.kind == 0:
                files[entry.file.file_name] = entry.file
            else:
                files.pop(entry.file.file_name, None)
    out = []
    for f in files.values():
        names = f.value_stats_cols or [field.name for field in table.fields]
        lo, hi = f.value_stats.min_values, f.value_stats.max_values
        out.append({name: (_naive(lo.get_field(i)), _naive(hi.get_field(i))) for i, name in enumerate(names)})
    return out


@pytest.mark.full  # a Java-written table compacted (~30 s); the default run reads every type table by Java
def test_compacting_a_java_timestamp_0_table_writes_stats_in_the_right_unit(spark, java_tables, type_tables,
                                                                            tmp_path):
    # Before the fix the compaction failed (footer millis read as seconds: year out of range); with
    # smaller times it would have written stats 1000x too large, and Java would prune wrongly.
    path, expected = java_tables["ts-low"]
    report = lakesink.compact(spark, path, progress=False)
    assert report.files_removed == 2 and report.files_added == 1
    (stats,) = _file_stats(path)
    utc = dt.datetime(2024, 1, 1)
    assert stats["ts0"] == (utc, utc + dt.timedelta(days=31, seconds=2))
    assert stats["l0"] == (utc + dt.timedelta(seconds=3), utc + dt.timedelta(days=31, seconds=5))
    assert stats["ts3"] == (utc + dt.timedelta(milliseconds=7), utc + dt.timedelta(days=31, seconds=2, milliseconds=7))
    for reader in (lakesink.read(spark, path), spark.read.format("paimon").load(path)):
        R.assert_same_rows(_rows(reader), expected, "lakesink reading ts-low after compaction")
    # Java Paimon prunes the compacted file by lakesink's stats: it must keep every matching row.
    by_column = {"ts0": 0, "l0": 3000, "ts3": 7}
    for column, offset in by_column.items():
        for op, millis in (("lt", BASE + 1500), ("ge", BASE + 31 * DAY + 1500), ("lt", BASE + 1),
                           ("ge", BASE + 31 * DAY + 2000 + offset)):
            matching = {row["id"] for row in expected if row[column] is not None
                        and ((row[column] // 1000 < millis) if op == "lt" else (row[column] // 1000 >= millis))}
            got = set(type_tables.ids(path, column, op, millis, tmp_path / "ids.txt"))
            assert matching <= got, f"Java skipped rows of {column} {op} {millis}: {sorted(matching - got)}"
    # And a filter no row matches lets Java skip the file (the stats are not simply left out).
    assert type_tables.ids(path, "ts0", "ge", BASE + 40 * DAY, tmp_path / "ids.txt") == []
    assert type_tables.ids(path, "ts0", "lt", BASE, tmp_path / "ids.txt") == []


def test_time_columns_read_as_spark_time(spark, java_tables):
    path, expected = java_tables["time"]
    assert [row["t3"] for row in expected] == [45_296_789, None]  # millis of day, as Java reads them
    for what, df in (("lakesink.read", lakesink.read(spark, path)),
                     ("format(paimon)", spark.read.format("paimon").load(path))):
        assert df.schema["t"].dataType.simpleString() == "time(3)"
        R.assert_same_rows(_rows(df), expected, f"{what} reading Java's TIME table")


# ./dev full: TIME columns in a stream (the default run reads them in batch)
@pytest.mark.full
def test_time_columns_in_a_stream(spark, java_tables):
    path, expected = java_tables["time"]
    before = spark.conf.get("spark.sql.timeType.enabled")
    spark.conf.set("spark.sql.timeType.enabled", "false")
    try:
        with pytest.raises(lakesink.errors.UnsupportedTypeError, match=r"t \(TIME.*spark.sql.timeType.enabled"):
            lakesink.read_stream(spark, path)
        spark.conf.set("spark.sql.timeType.enabled", "true")
        R.assert_same_rows(_stream_rows(spark, path, "time_stream"), expected, "read_stream of a TIME table")
    finally:
        spark.conf.set("spark.sql.timeType.enabled", before)


def test_sub_microsecond_timestamps_are_refused_not_truncated(spark, java_tables):
    path, expected = java_tables["nanos"]
    assert expected[0]["ts9"] == 1_704_067_200_000_123  # Java reads 123456 ns past the second
    for what, run in (("lakesink.read", lambda: lakesink.read(spark, path).collect()),
                      ("format(paimon)", lambda: spark.read.format("paimon").load(path).collect()),
                      ("read_stream", lambda: _stream_rows(spark, path, "nanos_stream"))):
        with pytest.raises(Exception) as info:
            run()
        text = str(info.value)
        assert "UnsupportedTypeError" in text and "column ts9 (TIMESTAMP(9))" in text, (what, text[-600:])
        assert "does not truncate" in text
    # (Files whose values are whole micros read fine: test_java_tables, kind "nanos".)


def _snapshot_and_files(path):
    table = scan.open_for_read(path)
    files = sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)
    return table.snapshot_manager().get_latest_snapshot().id, files


def test_writes_into_nanosecond_columns_are_refused_and_change_nothing(spark, java_tables, java_paimon, tmp_path):
    path, expected = java_tables["nanos"]
    before = _snapshot_and_files(path)
    df = spark.sql("SELECT 3 AS id, timestamp_ntz'2024-01-01 00:00:00.5' AS ts9, "
                   "timestamp'2024-01-01 00:00:00.25' AS ltz9")
    with pytest.raises(lakesink.UnsupportedTableError, match=r"column\(s\) ts9, ltz9 are TIMESTAMP\(7\.\.9\)"):
        lakesink.write(df, path)
    with pytest.raises(Exception, match=r"UnsupportedTableError.*ts9, ltz9 are TIMESTAMP\(7\.\.9\)"):
        df.write.format("paimon").mode("append").save(path)
    assert _snapshot_and_files(path) == before
    R.assert_same_rows(java_paimon.read(path, tmp_path), expected, "Java Paimon after the refused writes")


def test_a_dataframe_with_a_time_column_is_refused_before_writing(spark, java_tables, tmp_path):
    # What a TIME table reads into cannot be written back yet: Arrow carries Spark's TIME as
    # nanoseconds, Paimon stores INT32 millis. Refused on both paths; no table is created.
    path, _ = java_tables["time"]
    df = lakesink.read(spark, path)
    target = str(tmp_path / "wh" / "db.db" / "copy")
    with pytest.raises(lakesink.errors.ConfigurationError, match=r"column 't'.*time"):
        lakesink.write(df, target)
    with pytest.raises(Exception, match=r"ConfigurationError.*column 't'.*time"):
        df.write.format("paimon").mode("append").save(target)
    assert not os.path.exists(target)
