"""A committer that outlives Spark's per-batch commit process (pipelined `format("paimon")`).

Spark runs a Python stream writer's `commit()` in a fresh Python process for
every micro-batch, so nothing started there survives to commit in the
background. In pipelined mode `commit()` only accepts the batch durably
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
from .checkpoint import query_id
from ..protocol.pipelined import (IDLE_SECONDS, STOP, CheckpointLock, checkpoint_key, raise_recorded_error,
                                  record_error, runtime_dir, socket_path, wake)

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0


def ensure_running(spec: dict) -> None:
    """Wake the checkpoint's service, or start one if none runs on this host.

    The lock is taken here and handed to the new service as an inherited
    descriptor, so from this call on a committer holds it: no one can think the
    checkpoint has no committer while the service is still starting.
    """
    checkpoint = spec["checkpoint"]
    lock = CheckpointLock(checkpoint)
    if not lock.acquire(0.0):
        wake(checkpoint)
        return
    crash_group = os.environ.get("LAKESINK_CRASH_PGID")
    log_path = runtime_dir() / f"{checkpoint_key(checkpoint)}.log"
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


def spec_for(path: str, checkpoint: str, schema, options: dict) -> dict:
    return {"path": storage.normalize(path), "checkpoint": storage.normalize(checkpoint), "options": options,
            "schema": base64.b64encode(schema.serialize().to_pybytes()).decode()}


def await_commits(checkpoint: str, timeout: float = 120.0, options: dict | None = None) -> None:
    """Wait until every accepted micro-batch of `checkpoint` is committed (pipelined mode).

    Batches no committer will commit (a driver died after Spark recorded them and
    the restarted query had no new batch to start one) are committed here, with
    the table's own schema and `options` (e.g. file-system credentials). Raises
    the background committer's failure, or `BackgroundCommitError` after `timeout`.
    """
    store = StateStore(f"{checkpoint.rstrip('/')}/lakesink")
    pending = PendingStore(store)
    lock = CheckpointLock(checkpoint)
    deadline = time.monotonic() + timeout
    while True:
        raise_recorded_error(store)
        waiting = pending.identifiers()
        if not waiting:
            return
        if not lock.is_held_elsewhere():
            time.sleep(0.2)  # the service may be starting, or just finished its last batch
            if pending.identifiers() and not lock.is_held_elsewhere():
                raise_recorded_error(store)
                _commit_pending_here(checkpoint, store, options or {})
                continue
        if time.monotonic() > deadline:
            raise BackgroundCommitError(f"Batches {list(waiting)} of {checkpoint} still pending after "
                                        f"{timeout:.0f} s.")
        time.sleep(0.05)


def _commit_pending_here(checkpoint: str, store: StateStore, options: dict) -> None:
    from ..options import WriteOptions
    from ..paimon.stream import StreamSink
    from ..paimon.tables import arrow_schema, open_table

    binding = store.read_json("sink.json")
    if binding is None:
        raise BackgroundCommitError(f"{checkpoint} has pending batches but no sink.json: not a lakesink "
                                    "stream checkpoint, or a damaged one.")
    write_options = WriteOptions.parse({**options, "checkpointLocation": checkpoint})
    table = open_table(binding["table"], write_options.fs_options or None)
    if table is None:
        raise BackgroundCommitError(f"{checkpoint} has pending batches for {binding['table']}, "
                                    "which no longer exists.")
    StreamSink(binding["table"], checkpoint, arrow_schema(table), write_options, "lakesink.await_commits",
               query_id(checkpoint, write_options.fs_options)).restore()


def serve(spec: dict, lock_fd: int) -> int:
    """The service's life: commit pending batches in order until idle; 0 when done, 1 on failure."""
    import pyarrow as pa

    from ..options import WriteOptions
    from ..paimon.stream import StreamSink

    checkpoint = spec["checkpoint"]
    lock = CheckpointLock.adopt(checkpoint, lock_fd)
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(spec["schema"])))
        options = WriteOptions.parse(spec["options"])
        sink = StreamSink(spec["path"], checkpoint, schema, options, "format('paimon')",
                          query_id(checkpoint, options.fs_options))
    except BaseException as exc:  # e.g. corrupt sink state: the next batch must hear of it
        record_error(StateStore(f"{checkpoint}/lakesink"), None, exc)
        log.exception("committer for %s could not start", checkpoint)
        lock.release()
        return 1
    sock_path = socket_path(checkpoint)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(POLL_SECONDS)
    log.info("committer for %s started (pid %d)", checkpoint, os.getpid())
    idle_since = time.monotonic()
    stop_asked = False
    try:
        while True:
            try:
                reports = sink.restore_holding_lock()
            except BaseException as exc:
                pending = sink.committer().pending.identifiers()
                record_error(sink.store, pending[0] if pending else None, exc)
                log.exception("background commit of %s failed", checkpoint)
                return 1
            if reports:
                idle_since = time.monotonic()
                for r in reports:
                    log.debug("batch %s: snapshot %s (%.1f ms)", r.identifier, r.snapshot_id, r.duration_ms)
                continue  # more may have arrived meanwhile
            if stop_asked or time.monotonic() - idle_since > IDLE_SECONDS:
                lock.release()
                # A batch accepted between our last look and the release would be stranded:
                # look again, and stay if one is there and no new service took over.
                if sink.committer().pending.identifiers() and lock.acquire(0.0):
                    idle_since = time.monotonic()
                    continue
                log.info("committer for %s stopped: nothing pending", checkpoint)
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
