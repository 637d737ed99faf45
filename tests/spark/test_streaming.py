"""Structured Streaming into Paimon, in-process: snapshots per batch, identity, replays, checks at start.

Both paths: Spark-native `writeStream.format("paimon")` and the fast path
`lakesink.stream` (foreachBatch). Sources are directories of Parquet files
read one file per micro-batch, so batch k holds exactly file k's rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

import lakesink
from lakesink.errors import CheckpointMismatchError, ConfigurationError, SchemaMismatchError
from tests.crash.driver import SOURCE_SCHEMA
from tests.crash.harness import append_as_other_writer, make_source, source_rows
from tests.helpers import leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark

ROWS = 20


def source_stream(spark, directory, schema=SOURCE_SCHEMA):
    from pyspark.sql.pandas.types import from_arrow_schema
    return (spark.readStream.schema(from_arrow_schema(schema)).option("maxFilesPerTrigger", 1)
            .parquet(str(directory)))


def start(spark, mode: str, source, table: str, checkpoint: str | None, options: dict | None = None,
          df=None, output_mode: str = "append"):
    """Start a query writing `source` through `mode` ('native', 'native-pipelined', 'fast',
    'fast-pipelined')."""
    df = source_stream(spark, source) if df is None else df
    options = dict(options or {})
    if mode == "native-pipelined":
        options["commit.mode"] = "pipelined"
    if mode.startswith("native"):
        writer = df.writeStream.format("paimon").outputMode(output_mode).trigger(availableNow=True)
        if checkpoint is not None:
            writer = writer.option("checkpointLocation", checkpoint)
        for key, value in options.items():
            writer = writer.option(key, value)
        return writer.start(table)
    commit_mode = "pipelined" if mode == "fast-pipelined" else "sync"
    return lakesink.stream(df, table, checkpoint=checkpoint, trigger="availableNow",
                           commit_mode=commit_mode, options=options)


def run(spark, mode: str, source, table: str, checkpoint: str, options: dict | None = None) -> None:
    query = start(spark, mode, source, table, checkpoint, options)
    assert query.awaitTermination(300), "query did not catch up"
    if query.exception() is not None:
        raise query.exception()
    handler = getattr(query, "lakesink_sink", None)
    if handler is not None:
        handler.close()
    if mode == "native-pipelined":
        lakesink.await_commits(checkpoint)


def failure_of(query) -> str:
    """The error a native query died of (the data source raises when its writer is planned)."""
    from pyspark.errors import StreamingQueryException
    with pytest.raises(StreamingQueryException) as caught:
        query.awaitTermination(120)
    return str(caught.value)


def ours(table: str, user: str):
    return [s for s in snapshots(table) if s.commit_user == user]


def commit_user_of(checkpoint: str) -> str:
    return json.loads(Path(checkpoint, "lakesink", "sink.json").read_text())["commit_user"]


def query_id_of(checkpoint: str) -> str:
    return json.loads(Path(checkpoint, "metadata").read_text().splitlines()[0])["id"]


def assert_exactly_once(table: str, source) -> None:
    got = read_table(table).select(SOURCE_SCHEMA.names).sort_by("id")
    want = source_rows(source).sort_by("id")
    got = got.filter(pa.compute.greater_equal(got.column("id"), 0))
    assert got.column("id").to_pylist() == want.column("id").to_pylist()
    assert got.column("name").to_pylist() == want.column("name").to_pylist()
    assert leftover_files(table) == set()


@pytest.fixture()
def paths(tmp_path):
    return tmp_path / "source", str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "chk")


@pytest.mark.parametrize("mode", ["native", pytest.param("native-pipelined", marks=pytest.mark.full), "fast"])
def test_each_micro_batch_is_one_snapshot_whose_identifier_is_the_batch_id_and_empty_batches_make_none(
        spark, paths, mode):
    source, table, chk = paths
    make_source(source, files=4, rows_per_file=ROWS, empty_files=(1,))
    run(spark, mode, source, table, chk)
    snaps = ours(table, commit_user_of(chk))
    assert [s.commit_identifier for s in snaps] == [0, 2, 3]
    assert [s.commit_kind for s in snaps] == ["APPEND"] * 3
    for snap in snaps:  # each snapshot adds exactly its batch's file: ids k*ROWS .. (k+1)*ROWS-1
        before = read_table(table, snap.id - 1).num_rows if snap.id > 1 else 0
        rows = read_table(table, snap.id)
        assert rows.num_rows - before == ROWS
        k = snap.commit_identifier
        assert set(range(k * ROWS, (k + 1) * ROWS)) <= set(rows.column("id").to_pylist())
    assert_exactly_once(table, source)


@pytest.mark.parametrize("mode", ["native", "fast"])
def test_an_empty_micro_batch_makes_an_empty_snapshot_when_asked(spark, paths, mode):
    source, table, chk = paths
    make_source(source, files=3, rows_per_file=ROWS, empty_files=(1,))
    run(spark, mode, source, table, chk, {"commit.empty-batches": "true"})
    snaps = ours(table, commit_user_of(chk))
    assert [s.commit_identifier for s in snaps] == [0, 1, 2]
    assert read_table(table, snaps[1].id).num_rows == read_table(table, snaps[0].id).num_rows
    assert_exactly_once(table, source)


@pytest.mark.parametrize("mode", ["native", "fast"])
def test_the_commit_user_comes_from_the_query_id_and_survives_a_restart(spark, paths, mode):
    source, table, chk = paths
    make_source(source, files=2, rows_per_file=ROWS)
    run(spark, mode, source, table, chk)
    user = commit_user_of(chk)
    assert user == f"lakesink-stream-{query_id_of(chk)}"
    pa.parquet.write_table(pa.table({"id": pa.array(range(2 * ROWS, 3 * ROWS), pa.int64()),
                                     "name": [f"row-{i}" for i in range(2 * ROWS, 3 * ROWS)],
                                     "grp": pa.array([0] * ROWS, pa.int32())}, schema=SOURCE_SCHEMA),
                           source / "part-00002.parquet")
    os.utime(source / "part-00002.parquet")  # newer than the files already read
    run(spark, mode, source, table, chk)
    assert commit_user_of(chk) == user
    assert [(s.commit_user, s.commit_identifier) for s in snapshots(table)] == [(user, 0), (user, 1), (user, 2)]
    assert_exactly_once(table, source)


@pytest.mark.parametrize("mode", ["native", "native-pipelined", "fast", "fast-pipelined"])
def test_a_batch_replayed_after_its_snapshot_landed_is_skipped_and_its_files_removed(spark, paths, mode):
    """The driver died after the snapshot but before Spark's commit log: Spark runs the batch again.

    Simulated by deleting the batch's entry in `<checkpoint>/commits/`. Meanwhile another
    writer added snapshots of its own: the check still finds the batch.
    """
    source, table, chk = paths
    make_source(source, files=3, rows_per_file=ROWS)
    run(spark, mode, source, table, chk)
    commits = Path(chk, "commits")
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    assert last == 2
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)
    others = append_as_other_writer(table, snapshots_to_add=3)
    snapshots_before = len(snapshots(table))

    run(spark, mode, source, table, chk)

    assert Path(commits, str(last)).exists(), "Spark did not replay the batch"
    assert len(snapshots(table)) == snapshots_before, "the replay made a snapshot"
    user = commit_user_of(chk)
    assert [s.commit_identifier for s in ours(table, user)] == [0, 1, 2]
    assert read_table(table).num_rows == 3 * ROWS + others
    assert_exactly_once(table, source)
    assert not list(Path(table, "_lakesink", "staging").glob("*/*.parquet"))


@pytest.mark.parametrize("mode", ["native", "fast"])
def test_the_same_checkpoint_pointed_at_another_table_fails_at_start(spark, paths, mode):
    source, table, chk = paths
    make_source(source, files=1, rows_per_file=ROWS)
    run(spark, mode, source, table, chk)
    other = str(Path(table).parent / "other")
    if mode == "fast":
        with pytest.raises(CheckpointMismatchError, match="belongs to table"):
            start(spark, mode, source, other, chk)
    else:
        # Spark plans the native writer only for a batch to write: give it one.
        make_source(source / "more", files=1, rows_per_file=ROWS)
        (source / "more" / "part-00000.parquet").rename(source / "part-00001.parquet")
        error = failure_of(start(spark, mode, source, other, chk))
        assert "CheckpointMismatchError" in error and "belongs to table" in error
    assert not Path(other, "snapshot").exists()


def test_a_stream_without_checkpoint_location_is_refused(spark, paths):
    source, table, _ = paths
    make_source(source, files=1, rows_per_file=ROWS)
    with pytest.raises(ConfigurationError, match="checkpoint"):
        start(spark, "fast", source, table, None)
    with pytest.raises(Exception, match="checkpointLocation"):
        start(spark, "native", source, table, None)
    assert not Path(table).exists()


def test_a_continuous_trigger_is_refused_before_anything_is_written(spark, paths):
    source, table, chk = paths
    make_source(source, files=1, rows_per_file=ROWS)
    with pytest.raises(ConfigurationError, match="Continuous triggers are not supported"):
        lakesink.stream(source_stream(spark, source), table, checkpoint=chk, trigger={"continuous": "1 second"})
    with pytest.raises(ConfigurationError, match="Continuous triggers are not supported"):
        lakesink.stream(source_stream(spark, source), table, checkpoint=chk, trigger="continuous 1 second")
    assert not Path(chk).exists() and not Path(table).exists()


def test_complete_output_mode_is_refused_by_the_native_sink(spark, paths):
    source, table, chk = paths
    make_source(source, files=1, rows_per_file=ROWS)
    counts = source_stream(spark, source).groupBy("grp").count()
    error = failure_of(start(spark, "native", source, table, chk, df=counts, output_mode="complete"))
    assert "Output mode 'complete' is not supported" in error and "outputMode('append')" in error
    assert not Path(table, "snapshot").exists()


@pytest.mark.parametrize("mode", ["native", "fast"])
def test_a_stream_whose_schema_does_not_match_the_table_is_refused(spark, paths, mode):
    source, table, chk = paths
    make_source(source, files=1, rows_per_file=ROWS)
    run(spark, mode, source, table, chk)
    wider = source_stream(spark, source).selectExpr("*", "id * 2 AS extra")
    if mode == "fast":
        with pytest.raises(SchemaMismatchError, match="extra"):
            start(spark, mode, source, table, str(Path(chk).parent / "chk2"), df=wider)
    else:
        error = failure_of(start(spark, mode, source, table, str(Path(chk).parent / "chk2"), df=wider))
        assert "SchemaMismatchError" in error and "'extra'" in error
    assert len(snapshots(table)) == 1


def _cdc_files(directory, batches):
    """One Parquet file per micro-batch of (id, name, op) changes; returns the final state."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    state = {}
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("op", pa.string())])
    directory.mkdir(exist_ok=True)
    for b, changes in enumerate(batches):
        for i, name, op in changes:
            if op == "-D":
                state.pop(i, None)
            elif op != "-U":
                state[i] = name
        path = directory / f"{b:03d}.parquet"
        if not path.exists():  # Spark's file source remembers the files it read: only new ones
            pq.write_table(pa.table({"id": [c[0] for c in changes], "name": [c[1] for c in changes],
                                     "op": [c[2] for c in changes]}, schema=schema), path)
            os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))  # the file source reads oldest first
    return state


def test_a_cdc_stream_into_a_primary_key_table_ends_in_the_sources_final_state_key_for_key(spark, paths):
    import pyarrow as pa
    source, table, checkpoint = paths
    batches = [[(i, f"v0-{i}", "+I") for i in range(40)],
               [(i, f"v1-{i}", "+U") for i in range(0, 40, 3)] + [(i, None, "-D") for i in range(1, 40, 5)],
               [(i, f"v2-{i}", "+I") for i in range(40, 60)] + [(5, "v1-5", "-U"), (5, "v2-5", "+U")],
               [(i, None, "-D") for i in range(50, 60)] + [(1, "back-1", "+I")]]
    state = _cdc_files(source, batches[:2])
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("op", pa.string())])
    options = {"primary-key": "id", "bucket": "4", "rowkind.field": "op"}
    first = lakesink.stream(source_stream(spark, source, schema), table, checkpoint=checkpoint,
                            trigger="availableNow", options=options)
    assert first.awaitTermination(300) and first.exception() is None
    state = _cdc_files(source, batches)  # two more batches arrive; the query restarts on its checkpoint
    query = lakesink.stream(source_stream(spark, source, schema), table, checkpoint=checkpoint,
                            trigger="availableNow", options=options)
    assert query.awaitTermination(300) and query.exception() is None
    rows = read_table(table).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key was returned twice"
    assert {r["id"]: r["name"] for r in rows} == state
    assert [s.commit_identifier for s in snapshots(table)] == [0, 1, 2, 3]


def test_a_pipelined_cdc_stream_into_a_primary_key_table_ends_in_the_sources_final_state_key_for_key(
        spark, paths, monkeypatch):
    """Pipelined commits of a keyed table: each batch is planned while the one before is still
    being committed (each commit is held back a little, so that always happens), with automatic
    compaction between batches. Its sequence numbers must continue above the pending batch's,
    or a later update or delete would lose to an earlier version of its key."""
    import time

    from lakesink.paimon.write.stream import StreamSink
    from lakesink.paimon.commit.target import PaimonTarget

    source, table, checkpoint = paths
    batches = [[(i, f"v0-{i}", "+I") for i in range(40)],
               [(i, f"v1-{i}", "+U") for i in range(0, 40, 3)] + [(i, None, "-D") for i in range(1, 40, 5)],
               [(i, f"v2-{i}", "+U") for i in range(0, 40, 2)] + [(6, None, "-D")],
               [(i, f"v3-{i}", "+I") for i in range(40, 60)] + [(5, "v1-5", "-U"), (5, "v3-5", "+U"),
                                                                (1, "back-1", "+I")],
               [(i, None, "-D") for i in range(50, 60)] + [(i, f"v4-{i}", "+U") for i in range(0, 12)]]
    commit, seen_pending = PaimonTarget.commit, []

    def slow_commit(self, *args, **kwargs):
        # Held until the next micro-batch has planned (or 5 s, after the last one): on a loaded
        # machine a fixed delay can pass before the next plan starts.
        planned, deadline = len(seen_pending), time.monotonic() + 5
        while len(seen_pending) == planned and time.monotonic() < deadline:
            time.sleep(0.05)
        return commit(self, *args, **kwargs)

    def recorded(self):
        files = pending_files(self)
        seen_pending.append(len(files))
        return files

    pending_files = StreamSink.pending_files
    monkeypatch.setattr(PaimonTarget, "commit", slow_commit)
    monkeypatch.setattr(StreamSink, "pending_files", recorded)
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("op", pa.string())])
    options = {"primary-key": "id", "bucket": "2", "rowkind.field": "op",
               "num-sorted-run.compaction-trigger": "2"}

    def run_pipelined():
        query = lakesink.stream(source_stream(spark, source, schema), table, checkpoint=checkpoint,
                                trigger="availableNow", commit_mode="pipelined", options=options)
        assert query.awaitTermination(300) and query.exception() is None
        query.lakesink_sink.close()

    state = _cdc_files(source, batches[:3])
    run_pipelined()
    assert any(seen_pending), "no batch was planned while an earlier one was pending"
    state = _cdc_files(source, batches)  # two more batches; the query restarts on its checkpoint
    run_pipelined()
    run_pipelined()  # nothing new: commits nothing

    rows = read_table(table).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key was returned twice"
    assert {r["id"]: r["name"] for r in rows} == state
    user = commit_user_of(checkpoint)
    appends = [s for s in ours(table, user) if s.commit_kind == "APPEND"]
    assert [s.commit_identifier for s in appends] == [0, 1, 2, 3, 4]
    assert any(s.commit_kind == "COMPACT" for s in snapshots(table))
    assert not list(Path(checkpoint, "lakesink").glob("pending-*.json"))
    assert leftover_files(table) == set()



def _interrupted_call(spark):
    """A real Py4JJavaError of a JVM call interrupted as query.stop() interrupts a batch's job."""
    from py4j.protocol import Py4JJavaError
    jvm = spark.sparkContext._jvm
    jvm.java.lang.Thread.currentThread().interrupt()  # this Python thread's JVM thread (pinned)
    with pytest.raises(Py4JJavaError) as caught:
        jvm.java.lang.Thread.sleep(1)
    return caught.value


def _spark_sees_a_stop(spark, traceback_text: str) -> bool:
    """Spark's own test of a foreachBatch failure: was the query stopped (StreamExecution, Spark 4.x)?
    The text reaches it as py4j's Py4JException of the Python callback."""
    jvm = spark.sparkContext._jvm
    error = jvm.py4j.Py4JException("An exception was raised by the Python Proxy. Return Message: " + traceback_text)
    for name in ("org.apache.spark.sql.execution.streaming.runtime.StreamExecution",
                 "org.apache.spark.sql.execution.streaming.StreamExecution"):
        owner = jvm.org.apache.spark.util.Utils.classForName(name + "$", True, False)
        if owner is not None:
            module = owner.getField("MODULE$").get(None)
            return module.isInterruptionException(error, spark.sparkContext._jsc.sc())
    pytest.fail("Spark's StreamExecution was not found")


def _formatted(exc: BaseException) -> str:
    """The traceback py4j's callback server hands to Java for an exception a foreachBatch raised."""
    import traceback
    try:
        raise exc
    except BaseException:
        return traceback.format_exc()


def test_a_stop_inside_a_fast_path_batch_is_one_spark_recognises_without_overflowing(spark):
    # An interrupted Spark job's Py4JJavaError carries ~10 KB of JVM frames; Spark's regex over it
    # recursed once per character and the stream thread died of a StackOverflowError on stop.
    from py4j.protocol import Py4JJavaError
    from lakesink.errors import StreamStopped
    from lakesink.spark.streaming import stopped_by_interrupt

    interrupted = _interrupted_call(spark)
    stopped = stopped_by_interrupt(interrupted, 7)
    assert isinstance(stopped, StreamStopped) and "micro-batch 7" in str(stopped)
    assert "java.lang.InterruptedException" in str(stopped)
    text = _formatted(stopped)
    assert len(text) < 2_000, text
    assert _spark_sees_a_stop(spark, text)
    # What the batch raised before: the real error, its JVM frames as long as a job's.
    raw = _formatted(interrupted) + "\tat org.apache.spark.scheduler.DAGScheduler.runJob(DAGScheduler.scala:1)\n" * 150
    with pytest.raises(Py4JJavaError, match="StackOverflowError"):
        _spark_sees_a_stop(spark, raw)
    # Other failures pass through unchanged, reported by Spark as the query's failure.
    assert stopped_by_interrupt(ValueError("bad row"), 7) is None
    with pytest.raises(Py4JJavaError) as other:
        spark.sparkContext._jvm.java.lang.Class.forName("no.such.Class")
    assert stopped_by_interrupt(other.value, 7) is None
    assert not _spark_sees_a_stop(spark, _formatted(other.value))
