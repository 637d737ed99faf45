"""The format("paimon") committer service's process plumbing, without Spark: its host-wide
lock, its error document, waiting for commits, and its compaction role (rounds after batches
other processes committed, or in the commit when no service can start)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from lakesink.errors import BackgroundCommitError, CorruptStateError
from lakesink.protocol import pipelined
from lakesink.spark import committer_service as service
from lakesink.protocol import PendingCheckpoint, PendingStore, StateStore


@pytest.fixture()
def checkpoint(tmp_path):
    return str(tmp_path / "chk")


def hold_lock_in_child(checkpoint: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import sys, time
        from lakesink.protocol.pipelined import CheckpointLock
        assert CheckpointLock({checkpoint!r}).acquire(0.0)
        print("held", flush=True)
        sys.stdin.read()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout.readline().strip() == b"held"
    return child


def test_one_process_at_a_time_holds_a_checkpoints_committer_lock_and_a_dead_holder_frees_it(checkpoint):
    child = hold_lock_in_child(checkpoint)
    try:
        lock = pipelined.CheckpointLock(checkpoint)
        assert lock.is_held_elsewhere()
        assert not lock.acquire(0.2)
        assert not pipelined.CheckpointLock(checkpoint + "-other").is_held_elsewhere()
    finally:
        child.kill()  # SIGKILL: the kernel drops the flock with the process
        child.wait()
    assert pipelined.CheckpointLock(checkpoint).acquire(1.0)


def test_a_recorded_background_failure_is_raised_once_with_its_cause(checkpoint):
    store = StateStore(f"{checkpoint}/lakesink")
    pipelined.record_error(store, 7, RuntimeError("disk full"))
    with pytest.raises(BackgroundCommitError, match="batch 7 failed: RuntimeError: disk full"):
        pipelined.raise_recorded_error(store)
    pipelined.raise_recorded_error(store)  # once, not forever


def test_an_error_document_of_another_format_is_a_corrupt_state_error(checkpoint):
    store = StateStore(f"{checkpoint}/lakesink")
    store.write_json(pipelined.ERROR_DOCUMENT, {"format": "something-else", "version": 9})
    with pytest.raises(CorruptStateError, match="unknown format"):
        pipelined.raise_recorded_error(store)


def test_await_commits_returns_at_once_when_nothing_is_pending(checkpoint):
    service.await_commits(checkpoint, timeout=1)


def test_await_commits_refuses_pending_batches_of_a_checkpoint_without_a_sink_binding(checkpoint):
    store = StateStore(f"{checkpoint}/lakesink")
    PendingStore(store).put(PendingCheckpoint("u", 3, [], acknowledged=True))
    with pytest.raises(BackgroundCommitError, match="pending batches but no sink.json"):
        service.await_commits(checkpoint, timeout=5)


def test_await_commits_waits_while_a_committer_holds_the_lock_and_gives_up_after_its_timeout(checkpoint):
    store = StateStore(f"{checkpoint}/lakesink")
    PendingStore(store).put(PendingCheckpoint("u", 3, [], acknowledged=True))
    child = hold_lock_in_child(checkpoint)
    try:
        with pytest.raises(BackgroundCommitError, match="still pending after"):
            service.await_commits(checkpoint, timeout=0.5)
    finally:
        child.kill()
        child.wait()


def test_a_wake_up_without_a_listening_committer_reports_false(checkpoint):
    assert pipelined.wake(checkpoint) is False


def test_a_service_that_cannot_start_records_why_for_the_next_batch(tmp_path, checkpoint):
    import json
    import os

    import pyarrow as pa

    store = StateStore(f"{checkpoint}/lakesink")
    store.write_json("sink.json", {"format": "lakesink.stream-sink", "version": 99})
    spec = service.spec_for(str(tmp_path / "wh" / "db.db" / "t"), checkpoint,
                            pa.schema([("id", pa.int64())]), {"checkpointlocation": checkpoint})
    json.dumps(spec)  # what goes over the service's stdin
    lock = pipelined.CheckpointLock(checkpoint)
    assert lock.acquire(0.0)
    inherited = os.dup(lock.fd)  # as the service inherits it: same lock, another descriptor
    lock.release()

    assert service.serve(spec, inherited) == 1

    assert not pipelined.CheckpointLock(checkpoint).is_held_elsewhere()
    with pytest.raises(BackgroundCommitError, match="CorruptStateError: .*sink.json is a .* of version 99"):
        pipelined.raise_recorded_error(store)


# -- the compaction role: rounds after batches other processes committed ----------------------

def _keyed_sink(tmp_path, checkpoint):
    import pyarrow as pa

    from lakesink.options import WriteOptions
    from lakesink.paimon.write.stream import StreamSink
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("hits", pa.int64())])
    options = {"primary-key": "id", "bucket": "1", "num-sorted-run.compaction-trigger": "2",
               "maintenance.enabled": "false", "commit.user": "keyed-service-test"}
    path = str(tmp_path / "wh" / "db.db" / "t")
    sink = StreamSink(path, checkpoint, schema, WriteOptions.parse(options), "test")
    sink.rounds_elsewhere = True  # as format("paimon")'s sync writer sets it
    return sink, schema, options


def _commit_batches(sink, schema, batches):
    """Batch b sets hits = b for keys b..b+9, committed as the format("paimon") task and commit do."""
    import pyarrow as pa

    from lakesink.paimon.write.keyed_plan import plan_batch
    from lakesink.spark.keyed_tasks import KeyedPlan, KeyedTaskSpec, KeyedTaskWriter
    for b in batches:
        plan = KeyedPlan(plan_batch(sink.target, b, ()), None)
        writer = KeyedTaskWriter(KeyedTaskSpec(sink.staging_dir(b), sink.layout, sink.keyed, plan), 0, f"b{b}")
        writer.write(pa.table({"id": list(range(b, b + 10)), "hits": [b] * 10}, schema=schema))
        sink.commit_batch(b, writer.finish())


def _expected(batches) -> dict:
    state = {}
    for b in batches:
        state.update({k: b for k in range(b, b + 10)})
    return state


def test_the_compaction_service_compacts_after_batches_others_committed_and_await_commits_waits(tmp_path,
                                                                                               checkpoint):
    from lakesink.protocol.coordinator import saved_progress
    from tests.helpers import leftover_files, read_table, snapshots

    sink, schema, options = _keyed_sink(tmp_path, checkpoint)
    _commit_batches(sink, schema, range(4))
    assert [s.commit_kind for s in snapshots(sink.path)] == ["APPEND"] * 4  # no round in the commits

    service.ensure_running(service.spec_for(sink.path, checkpoint, schema, options, pipelined.COMPACTION))
    service.await_commits(checkpoint, timeout=60)

    assert {s.commit_user for s in snapshots(sink.path) if s.commit_kind == "COMPACT"} == {"keyed-service-test.compact"}
    log = pipelined.runtime_dir() / pipelined.runtime_name(checkpoint, pipelined.COMPACTION, ".log")
    assert "compaction service for" in log.read_text() and "Traceback" not in log.read_text()
    assert saved_progress(sink.store) == (3, False)
    rows = read_table(sink.path).to_pylist()
    assert {r["id"]: r["hits"] for r in rows} == _expected(range(4)) and len(rows) == len(_expected(range(4)))
    assert leftover_files(sink.path) == set()


def test_a_sync_commit_that_cannot_start_the_service_compacts_in_the_commit(tmp_path, checkpoint, monkeypatch):
    from lakesink.protocol.coordinator import saved_progress
    from lakesink.spark.datasource import PaimonStreamWriter
    from tests.helpers import read_table, snapshots

    sink, schema, options = _keyed_sink(tmp_path, checkpoint)
    _commit_batches(sink, schema, range(3))

    def no_runtime_dir(spec):
        raise PermissionError("runtime directory not writable")
    monkeypatch.setattr(service, "ensure_running", no_runtime_dir)
    writer = PaimonStreamWriter.__new__(PaimonStreamWriter)  # the commit's writer, without Spark
    writer.sink = sink
    writer.rounds_spec = service.spec_for(sink.path, checkpoint, schema, options, pipelined.COMPACTION)
    writer._wake_rounds()

    assert any(s.commit_kind == "COMPACT" for s in snapshots(sink.path))
    assert saved_progress(sink.store) == (2, False)
    assert {r["id"]: r["hits"] for r in read_table(sink.path).to_pylist()} == _expected(range(3))


def test_the_compaction_service_starts_a_round_once_spark_recorded_the_batch(tmp_path, checkpoint):
    """Spark's commit-log write (`commits/<batch>`) follows the batch's commit; the round waits
    for it, then runs while the query idles until its next trigger."""
    import os
    import time

    from tests.helpers import snapshots

    sink, schema, options = _keyed_sink(tmp_path, checkpoint)
    os.makedirs(f"{checkpoint}/commits")  # a Spark checkpoint: batches 0..2 recorded, 3 not yet
    for b in range(3):
        open(f"{checkpoint}/commits/{b}", "w").close()
    _commit_batches(sink, schema, range(4))

    service.ensure_running(service.spec_for(sink.path, checkpoint, schema, options, pipelined.COMPACTION))
    time.sleep(1.0)
    assert not [s for s in snapshots(sink.path) if s.commit_kind == "COMPACT"]  # waiting for commits/3
    open(f"{checkpoint}/commits/3", "w").close()
    deadline = time.monotonic() + 30
    while not [s for s in snapshots(sink.path) if s.commit_kind == "COMPACT"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [s.commit_user for s in snapshots(sink.path) if s.commit_kind == "COMPACT"] == ["keyed-service-test.compact"]
    service.await_commits(checkpoint, timeout=60)
