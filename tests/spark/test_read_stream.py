"""Streaming reads: spark.readStream.format("paimon") / lakesink.read_stream deliver each added row once."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

import lakesink
from lakesink.errors import InvalidOptionError, UnknownOptionError, UnsupportedTableError
from lakesink.errors import SnapshotNotFoundError
from lakesink.spark.read import stream_options
from lakesink.spark.stream_reader import PaimonStreamReader
from tests.helpers import read_table, snapshots

pytestmark = pytest.mark.spark


def _append(spark, path, start, count):
    lakesink.write(spark.range(start, start + count, 1, 1).selectExpr("id", "cast(id as string) as s"), path)


def _run_once(sdf, sink_path, checkpoint):
    """Process everything available now into the paimon table at sink_path, then stop."""
    query = (sdf.writeStream.format("paimon").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(sink_path))
    query.awaitTermination(120)
    assert not query.isActive
    assert query.exception() is None


def _ids(path):
    return sorted(read_table(path).column("id").to_pylist())


def test_a_chain_a_to_b_holds_each_row_of_a_exactly_once_across_restarts(spark, warehouse, tmp_path):
    a, b = str(warehouse / "db.db" / "a"), str(warehouse / "db.db" / "b")
    checkpoint = str(tmp_path / "chk")
    _append(spark, a, 0, 10)
    _append(spark, a, 10, 10)
    source = spark.readStream.format("paimon").option("scan.mode", "earliest").load(a)
    _run_once(source, b, checkpoint)
    assert _ids(b) == list(range(20))
    _append(spark, a, 20, 5)  # while the query is down
    _append(spark, a, 25, 5)
    _run_once(spark.readStream.format("paimon").option("scan.mode", "earliest").load(a), b, checkpoint)
    assert _ids(b) == _ids(a) == list(range(30))
    _run_once(spark.readStream.format("paimon").option("scan.mode", "earliest").load(a), b, checkpoint)
    assert _ids(b) == list(range(30))  # nothing new: nothing again


def test_a_running_query_picks_up_each_new_snapshot_once(spark, table_path):
    _append(spark, table_path, 0, 3)
    seen = []
    query = (lakesink.read_stream(spark, table_path, starting="latest").writeStream
             .foreachBatch(lambda df, batch_id: seen.extend(r.id for r in df.collect()))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        _append(spark, table_path, 3, 4)
        query.processAllAvailable()
        _append(spark, table_path, 7, 2)
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(seen) == list(range(3, 9))  # starting="latest": rows committed after the start


def _read_all_available(reader) -> list:
    """Drive the real stream reader as Spark does: offsets, then partitions, then read."""
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    if end == start:
        return []
    return sorted(i for p in reader.partitions(start, end) for batch in reader.read(p)
                  for i in batch.column("id").to_pylist())


def test_starting_positions_earliest_snapshot_timestamp_and_latest(spark, table_path):
    for start in (0, 10, 20):
        _append(spark, table_path, start, 10)
    snap2 = snapshots(table_path)[1]
    schema = spark.read.format("paimon").load(table_path).schema

    def collected(starting):
        return _read_all_available(PaimonStreamReader(table_path, stream_options(starting), schema))

    assert collected("earliest") == list(range(30))
    assert collected(2) == list(range(10, 30))
    assert collected("latest-full") == list(range(30))
    assert collected("latest") == []
    after_snap2 = dt.datetime.fromtimestamp(snap2.time_millis / 1000, dt.timezone.utc)
    assert collected(after_snap2) == list(range(20, 30))
    with pytest.raises(SnapshotNotFoundError, match=r"snapshot 9: available snapshots are 1\.\.3"):
        collected(9)
    with pytest.raises(Exception, match=r"snapshot 9: available snapshots are 1\.\.3"):
        lakesink.read_stream(spark, table_path, starting=9).writeStream.format("memory") \
            .queryName("never").start().processAllAvailable()


def test_a_consumer_id_records_progress_in_the_table_and_a_new_query_resumes_there(spark, table_path, tmp_path):
    _append(spark, table_path, 0, 5)

    def run(checkpoint):
        out = []
        query = (lakesink.read_stream(spark, table_path, consumer_id="silver", starting="earliest").writeStream
                 .foreachBatch(lambda df, _: out.extend(r.id for r in df.collect()))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(120)
        return sorted(out)

    _append(spark, table_path, 5, 5)
    assert run(str(tmp_path / "c1")) == list(range(10))
    with open(os.path.join(table_path, "consumer", "consumer-silver")) as f:
        assert json.load(f) == {"nextSnapshot": 3}  # Paimon's consumer file: snapshots 1..2 read
    _append(spark, table_path, 10, 5)
    assert run(str(tmp_path / "c2")) == list(range(10, 15))  # a new checkpoint resumes at the consumer


def test_overwrite_snapshots_are_skipped_unless_asked(spark, table_path):
    _append(spark, table_path, 0, 5)
    lakesink.write(spark.range(100, 103).selectExpr("id", "cast(id as string) as s"), table_path, mode="overwrite")
    _append(spark, table_path, 5, 5)
    assert [s.commit_kind for s in snapshots(table_path)] == ["APPEND", "OVERWRITE", "APPEND"]
    schema = spark.read.format("paimon").load(table_path).schema
    skip = PaimonStreamReader(table_path, stream_options("earliest"), schema)
    assert _read_all_available(skip) == list(range(10))
    read = PaimonStreamReader(table_path, stream_options("earliest", read_overwrite=True), schema)
    assert _read_all_available(read) == list(range(10)) + [100, 101, 102]


def test_streaming_a_primary_key_table_is_refused_with_a_clear_error(warehouse):
    import pyarrow as pa
    from pypaimon import CatalogFactory, Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table("db.pk", Schema.from_pyarrow_schema(
        pa.schema([pa.field("id", pa.int64(), nullable=False)]), primary_keys=["id"], options={"bucket": "1"}), False)
    with pytest.raises(UnsupportedTableError, match="primary-key table"):
        PaimonStreamReader(str(warehouse / "db.db" / "pk"), {}, None)


def test_bad_stream_options_are_errors_naming_the_option(table_path, spark):
    _append(spark, table_path, 0, 1)
    with pytest.raises(InvalidOptionError, match="scan.mode"):
        PaimonStreamReader(table_path, {"scan.mode": "from-snapshot"}, None)
    with pytest.raises(InvalidOptionError, match="scan.mode"):
        PaimonStreamReader(table_path, {"scan.mode": "newest"}, None)
    with pytest.raises(InvalidOptionError, match="consumer-id"):
        PaimonStreamReader(table_path, {"consumer-id": "a/b"}, None)
    with pytest.raises(UnknownOptionError, match="consumer_id"):
        PaimonStreamReader(table_path, {"consumer_id": "x"}, None)
    with pytest.raises(InvalidOptionError, match="maxRowsPerTrigger"):
        PaimonStreamReader(table_path, {"read.stream.maxRowsPerTrigger": "0"}, None)


# ./dev full: the option's two spellings on format("paimon") (one lookup: tests/unit covers the alias).
@pytest.mark.parametrize("how", [pytest.param("read.stream.maxRowsPerTrigger", marks=pytest.mark.full),
                                 pytest.param("maxRowsPerTrigger", marks=pytest.mark.full), "read_stream"])
def test_max_rows_per_trigger_takes_whole_snapshots_up_to_the_limit_and_a_larger_one_alone(
        spark, table_path, tmp_path, how):
    for start, count in ((0, 10), (10, 10), (20, 10), (30, 30), (60, 5)):
        _append(spark, table_path, start, count)
    batches = []
    if how == "read_stream":
        sdf = lakesink.read_stream(spark, table_path, starting="earliest", max_rows_per_trigger=25)
    else:
        sdf = spark.readStream.format("paimon").option("scan.mode", "earliest").option(how, 25).load(table_path)
    query = (sdf.writeStream
             .foreachBatch(lambda df, _: batches.append(sorted(r.id for r in df.collect())))
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert [len(b) for b in batches if b] == [20, 10, 30, 5]
    assert sorted(i for b in batches for i in b) == list(range(65))


def test_a_new_stream_starts_with_the_current_rows_then_new_ones_as_paimon_does(spark, table_path):
    _append(spark, table_path, 0, 10)
    _append(spark, table_path, 10, 10)
    schema = spark.read.format("paimon").load(table_path).schema
    assert _read_all_available(PaimonStreamReader(table_path, {}, schema)) == list(range(20))
    assert _read_all_available(PaimonStreamReader(table_path, {"scan.mode": "default", "scan.snapshot-id": "2"},
                                                   schema)) == list(range(10, 20))
    assert stream_options("latest-full") == lakesink_default_stream_options()


def lakesink_default_stream_options():
    import inspect
    return stream_options(inspect.signature(lakesink.read_stream).parameters["starting"].default)
