"""The pipelined format("paimon") committer's process plumbing, without Spark:
its host-wide lock, its error document, and waiting for commits."""

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
    with pytest.raises(BackgroundCommitError, match="CorruptStateError: .*sink.json has an unknown format"):
        pipelined.raise_recorded_error(store)
