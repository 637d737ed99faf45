"""A committer that outlives Spark's per-batch commit process (pipelined `format("paimon")`).

Spark runs a Python stream writer's `commit()` in a Python worker process it
builds the writer afresh in for every micro-batch; the worker may be reused
(here one worker served every commit of a session) or ended after any batch,
so nothing started there is sure to survive to commit in the background. In pipelined mode `commit()` only accepts the batch durably
(`StreamSink.accept_batch`, the batch's pending document) and wakes this
service: one process per checkpoint on the driver's host, which commits the
pending batches in batch order, removes their staging, and exits after
`IDLE_SECONDS` without work. The next batch starts it again.

One committer per checkpoint and host: the service holds an exclusive
`flock` on `<runtime dir>/<key>.lock` for its whole life (taken by the
process that starts it and inherited), and a synchronous
restore takes the same lock. Wake-ups arrive as datagrams on a Unix socket
beside the lock; the service also looks at the pending state every
`POLL_SECONDS`, so a lost wake-up only delays a commit.

A failed commit stops the service and leaves `committer-error.json` in the
sink's state directory (see `protocol.pipelined`); the next `commit()` (or
`await_commits`) raises it, so the query fails instead of running on, and the
restarted query's service retries the batch (an acknowledged batch keeps its
files and pending state).

The spec (table path, checkpoint, schema, writer options) reaches the service
on its stdin, never on disk: writer options may hold credentials. The service
runs in a session of its own, so it finishes accepted batches even when the
driver's process group dies (under the crash harness it joins the group it is
told to, to die with the driver like the rest of it).

The same service also runs a synchronous stream's compaction rounds (role
`compaction`, primary-key tables whose readers do not wait for the rounds:
`paimon.compaction.wiring.compacts_in_background`): each batch's commit process
commits the batch and wakes it; the service takes in the batches that landed
since its last round (`Coordinator.catch_up_round`) and compacts after the
newest, while Spark runs the next batch, as Paimon's writers compact in the
background. It has a lock of its own, so the per-batch restore, which takes
the commit lock, never stops it. A failed round is logged, never raised: the
batches already landed, and the next round looks again.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import logging
import os
import socket
import subprocess
import sys
import time

from .. import storage
from ..errors import BackgroundCommitError
from ..protocol import PendingStore, StateStore
from ..protocol.binding import sink_state
from .checkpoint import await_batch_end, query_id
from ..protocol.pipelined import (COMMIT, COMPACTION, IDLE_SECONDS, STOP, CheckpointLock, raise_recorded_error,
                                  record_error, runtime_dir, runtime_name, socket_path, wake)

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0


def ensure_running(spec: dict) -> None:
    """Wake the checkpoint's service, or start one if none runs on this host.

    The lock is taken here and handed to the new service as an inherited
    descriptor, so from this call on a committer holds it: no one can think the
    checkpoint has no committer while the service is still starting.
    """
    checkpoint, role = spec["checkpoint"], spec.get("role", COMMIT)
    lock = CheckpointLock(checkpoint, role)
    if not lock.acquire(0.0):
        wake(checkpoint, role=role)
        return
    crash_group = os.environ.get("LAKESINK_CRASH_PGID")
    log_path = runtime_dir() / runtime_name(checkpoint, role, ".log")
    try:
        with open(log_path, "ab") as out:
            # Not waited for: the service outlives this (per-batch) process on purpose.
            child = subprocess.Popen(
                [sys.executable, "-m", "lakesink.spark.committer_service", str(lock.fd)],
                stdin=subprocess.PIPE, stdout=out, stderr=out, close_fds=True, pass_fds=(lock.fd,),
                start_new_session=not crash_group,
                preexec_fn=(lambda: os.setpgid(0, int(crash_group))) if crash_group else None)
    finally:
        lock.release()  # our copy only: the child's descriptor keeps the flock
    child.stdin.write(json.dumps(spec).encode())
    child.stdin.close()


def spec_for(path: str, checkpoint: str, schema, options: dict, role: str = COMMIT) -> dict:
    return {"path": storage.normalize(path), "checkpoint": storage.normalize(checkpoint), "options": options,
            "schema": base64.b64encode(schema.serialize().to_pybytes()).decode(), "role": role}


def await_commits(checkpoint: str, timeout: float = 120.0, options: dict | None = None) -> None:
    """Wait until every accepted micro-batch of `checkpoint` is committed (pipelined mode).

    Batches no committer will commit (a driver died after Spark recorded them and
    the restarted query had no new batch to start one) are committed here, with
    the table's own schema and `options` (e.g. file-system credentials). Raises
    the background committer's failure, or `BackgroundCommitError` after `timeout`.
    """
    from ..options import storage_options
    options = options or {}
    store = sink_state(checkpoint, storage_options(options))
    pending = PendingStore(store)
    lock = CheckpointLock(checkpoint)
    deadline = time.monotonic() + timeout
    while True:
        raise_recorded_error(store)
        waiting = pending.identifiers()
        if not waiting:
            _await_rounds(checkpoint, store, options, deadline)
            return
        if not lock.is_held_elsewhere():
            time.sleep(0.2)  # the service may be starting, or just finished its last batch
            if pending.identifiers() and not lock.is_held_elsewhere():
                raise_recorded_error(store)
                _commit_pending_here(checkpoint, store, options)
                continue
        if time.monotonic() > deadline:
            raise BackgroundCommitError(f"Batches {list(waiting)} of {checkpoint} still pending after "
                                        f"{timeout:.0f} s.")
        time.sleep(0.05)


def _await_rounds(checkpoint: str, store: StateStore, options: dict, deadline: float) -> None:
    """Wait while compaction rounds are behind the committed batches: for the checkpoint's
    compaction service, or, when none runs (it died with the driver after Spark recorded the
    batch, and the restarted query had no batch to start one), run the round here. Looks at the
    binding, the table and the saved rounds only; builds the sink only to run a round."""
    from ..paimon.compaction.wiring import rounds_run_here
    if rounds_run_here(checkpoint):
        return  # this process's stream runs the rounds
    lock = CheckpointLock(checkpoint, COMPACTION)
    while _rounds_behind(store, options):
        if lock.acquire(0.0):
            try:
                sink = _sink_here(checkpoint, store, options, missing_ok=True)
                if sink is not None and sink.compacts:
                    sink.compaction_rounds().catch_up_round()  # restoring resolves a round left pending
            finally:
                lock.release()
            return
        if time.monotonic() > deadline:
            raise BackgroundCommitError(f"The compaction rounds of {checkpoint} have not caught up with its "
                                        "committed batches in time (the batches themselves are committed).")
        time.sleep(0.05)


def _rounds_behind(store: StateStore, options: dict) -> bool:
    """Whether a batch of the checkpoint's commit user landed after its newest compaction round (or
    that round is unresolved), for a primary-key table its writes compact; False when the checkpoint
    was never bound or the table is gone."""
    from ..options import storage_options
    from ..paimon.commit import identity
    from ..errors import UnsupportedTableError
    from ..paimon.compaction.keyed_aggregator import compacts_after_commit
    from ..paimon.keyed.lsm_policy import check_compactable
    from ..paimon.table.branches import parse_description
    from ..paimon.table.tables import open_table
    from ..paimon.write.stream import SINK_FILE
    from ..protocol.coordinator import saved_progress

    binding = store.read_json(SINK_FILE)
    if not isinstance(binding, dict):
        return False  # never bound: nothing to compact after
    path, branch = parse_description(binding["table"])
    table = open_table(path, storage_options(options) or None, branch)
    if table is None or not compacts_after_commit(dict(table.table_schema.options), table.primary_keys):
        return False  # the table is gone, or its writes never compact
    try:
        check_compactable(table)
    except UnsupportedTableError:
        return False  # written, never compacted by lakesink (as the sink decides: compacts_automatically)
    applied, pending = saved_progress(store)
    last = identity.last_committed(table, binding["commit_user"])
    return pending or (last is not None and (applied is None or applied < last))


def _commit_pending_here(checkpoint: str, store: StateStore, options: dict) -> None:
    _sink_here(checkpoint, store, options).restore()


def _sink_here(checkpoint: str, store: StateStore, options: dict, missing_ok: bool = False):
    """The checkpoint's sink, built from its binding and the table's own schema (None when
    the table no longer exists and `missing_ok`)."""
    from ..options import WriteOptions
    from ..paimon.table.branches import parse_description
    from ..paimon.table.tables import arrow_schema, open_table
    from ..paimon.write.stream import SINK_FILE, StreamSink

    binding = store.read_json(SINK_FILE)
    if binding is None:
        raise BackgroundCommitError(f"{checkpoint} has pending batches but no sink.json: not a lakesink "
                                    "stream checkpoint, or a damaged one.")
    path, branch = parse_description(binding["table"])  # a branch's stream writes that branch
    extra = {"checkpointLocation": checkpoint, **({"branch": branch} if branch else {})}
    write_options = WriteOptions.parse({**{k: v for k, v in options.items() if k.lower() != "branch"}, **extra})
    table = open_table(path, write_options.fs_options or None, branch)
    if table is None:
        if missing_ok:
            return None
        raise BackgroundCommitError(f"{checkpoint} has pending batches for {binding['table']}, "
                                    "which no longer exists.")
    return StreamSink(path, checkpoint, arrow_schema(table), write_options, "lakesink.await_commits",
                      query_id(checkpoint, write_options.fs_options))


class _Committing:
    """The commit role: pending batches, in order."""

    def __init__(self, sink):
        self.sink = sink

    def step(self) -> bool:
        reports = self.sink.restore_holding_lock()
        for r in reports:
            log.debug("batch %s: snapshot %s (%.1f ms)", r.identifier, r.snapshot_id, r.duration_ms)
        return bool(reports)

    def has_work(self) -> bool:
        return bool(self.sink.committer().pending.identifiers())

    def failed(self, exc: BaseException) -> None:
        pending = self.sink.committer().pending.identifiers()
        record_error(self.sink.store, pending[0] if pending else None, exc)  # the next batch raises it


class _Compacting:
    """The compaction role: a round after the batches that landed since the last one.

    A round starts once the newest batch is over (`checkpoint.await_batch_end`): until then
    Spark's own commit-log write and bookkeeping run, and from then the query idles until its
    next trigger.
    """

    RECORDED_WAIT_SECONDS = 2.0  # then it runs anyway: the batch may have failed after landing

    def __init__(self, sink):
        self.sink = sink
        self.coordinator = sink.compaction_rounds()
        self._waited_for: int | None = None

    def step(self) -> bool:
        self._await_recorded()
        report = self.coordinator.catch_up_round()
        if report is not None and (report.error or report.conflict):
            log.warning("compaction round after batch %s: %s", report.checkpoint, report.error or report.conflict)
        return report is not None

    def has_work(self) -> bool:
        return self.sink.rounds_behind(self.coordinator)

    def _await_recorded(self) -> None:
        last = self.sink.target.last_committed(self.sink.bind())
        if last is None or last == self._waited_for:
            return  # nothing landed, or waited for once already (a batch Spark may never record)
        self._waited_for = last
        await_batch_end(self.sink.checkpoint, last, timeout=self.RECORDED_WAIT_SECONDS)

    def failed(self, exc: BaseException) -> None:
        pass  # the batches landed; the next batch starts a service that looks again


def serve(spec: dict, lock_fd: int) -> int:
    """The service's life: its role's work until idle; 0 when done, 1 on failure."""
    import pyarrow as pa

    from ..options import WriteOptions, storage_options
    from ..paimon.write.stream import StreamSink

    checkpoint, role = spec["checkpoint"], spec.get("role", COMMIT)
    lock = CheckpointLock.adopt(checkpoint, lock_fd, role)
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(spec["schema"])))
        options = WriteOptions.parse(spec["options"])
        sink = StreamSink(spec["path"], checkpoint, schema, options, "format('paimon')",
                          query_id(checkpoint, options.fs_options))
        work = _Committing(sink) if role == COMMIT else _Compacting(sink)
    except BaseException as exc:  # e.g. corrupt sink state: the next batch must hear of it
        if role == COMMIT:
            record_error(sink_state(checkpoint, storage_options(spec.get("options") or {})), None, exc)
        log.exception("%s service for %s could not start", role, checkpoint)
        lock.release()
        return 1
    sock_path = socket_path(checkpoint, role)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(POLL_SECONDS)
    log.info("%s service for %s started (pid %d)", role, checkpoint, os.getpid())
    idle_since = time.monotonic()
    stop_asked = False
    try:
        while True:
            try:
                worked = work.step()
            except BaseException as exc:
                work.failed(exc)
                log.exception("background %s of %s failed", role, checkpoint)
                return 1
            if worked:
                idle_since = time.monotonic()
                continue  # more may have arrived meanwhile
            if stop_asked or time.monotonic() - idle_since > IDLE_SECONDS:
                lock.release()
                # Work that arrived between our last look and the release would be stranded:
                # look again, and stay if there is some and no new service took over.
                if work.has_work() and lock.acquire(0.0):
                    idle_since = time.monotonic()
                    continue
                log.info("%s service for %s stopped: nothing to do", role, checkpoint)
                return 0
            try:
                stop_asked = stop_asked or sock.recv(64) == STOP
            except TimeoutError:
                pass
            except OSError as exc:
                if exc.errno != errno.EINTR:
                    raise
    finally:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            if lock.fd is not None:  # still ours: no newer service has bound the path
                os.unlink(sock_path)
        lock.release()


def main() -> int:
    # One log per checkpoint and host, kept small: start, stop and failures, not every batch.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    spec = json.loads(sys.stdin.read())
    return serve(spec, int(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
