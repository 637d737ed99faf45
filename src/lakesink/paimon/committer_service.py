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
sink's state directory; the next `commit()` (or `await_commits`) raises it, so
the query fails instead of running on, and the restarted query's service
retries the batch (an acknowledged batch keeps its files and pending state):

    {"format": "lakesink.committer-error", "version": 1, "identifier": 7,
     "error": "CommitFailedError", "message": "...", "time_ms": 1763740000000}

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
import fcntl
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import BackgroundCommitError, CorruptStateError
from ..protocol import PendingStore, StateStore

log = logging.getLogger(__name__)

IDLE_SECONDS = float(os.environ.get("LAKESINK_COMMITTER_IDLE_SECONDS", "60"))
POLL_SECONDS = 2.0
ERROR_DOCUMENT = "committer-error.json"
ERROR_FORMAT = "lakesink.committer-error"
ERROR_VERSION = 1


def runtime_dir() -> Path:
    directory = Path(tempfile.gettempdir()) / f"lakesink-committers-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


def _absolute(path: str) -> str:
    """Local paths made absolute: the service may not share the caller's working directory."""
    path = path.rstrip("/")
    return path if "://" in path or path.startswith("file:") else os.path.abspath(path)


def _key(checkpoint: str) -> str:
    return hashlib.sha256(_absolute(checkpoint).encode()).hexdigest()[:20]


class CheckpointLock:
    """The host-wide lock that makes one process at a time commit a checkpoint's pending batches."""

    def __init__(self, checkpoint: str):
        self.path = runtime_dir() / f"{_key(checkpoint)}.lock"
        self._fd: int | None = None

    def acquire(self, timeout: float | None = 0.0) -> bool:
        """`timeout=0`: try once; `None`: wait as long as it takes."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return True
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)

    @property
    def fd(self) -> int | None:
        return self._fd

    @classmethod
    def adopt(cls, checkpoint: str, fd: int) -> CheckpointLock:
        """The lock held through a descriptor inherited from `ensure_running`."""
        lock = cls(checkpoint)
        lock._fd = fd
        return lock

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    @contextlib.contextmanager
    def held(self, timeout: float, what: str):
        if not self.acquire(timeout):
            raise BackgroundCommitError(
                f"Another process kept the committer lock {self.path} for {timeout:.0f} s while {what}. "
                "Is another query running on the same checkpoint on this host?")
        try:
            yield
        finally:
            self.release()

    def is_held_elsewhere(self) -> bool:
        if self.acquire(0.0):
            self.release()
            return False
        return True


def _socket_path(checkpoint: str) -> str:
    return str(runtime_dir() / f"{_key(checkpoint)}.sock")


WAKE, STOP = b"w", b"q"


def wake(checkpoint: str, message: bytes = WAKE) -> bool:
    """Tell a running service that a batch is pending; False if none listens."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(message, _socket_path(checkpoint))
            return True
        except OSError:
            return False


def ask_to_stop(checkpoint: str) -> bool:
    """Ask a running service to exit once nothing is pending (a synchronous run takes over)."""
    return wake(checkpoint, STOP)


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
    log_path = runtime_dir() / f"{_key(checkpoint)}.log"
    try:
        with open(log_path, "ab") as out:
            # Not waited for: the service outlives this (per-batch) process on purpose.
            child = subprocess.Popen(
                [sys.executable, "-m", "lakesink.paimon.committer_service", str(lock.fd)],
                stdin=subprocess.PIPE, stdout=out, stderr=out, close_fds=True, pass_fds=(lock.fd,),
                start_new_session=not crash_group,
                preexec_fn=(lambda: os.setpgid(0, int(crash_group))) if crash_group else None)
    finally:
        lock.release()  # our copy only: the child's descriptor keeps the flock
    child.stdin.write(json.dumps(spec).encode())
    child.stdin.close()


def spec_for(path: str, checkpoint: str, schema, options: dict) -> dict:
    return {"path": _absolute(path), "checkpoint": _absolute(checkpoint), "options": options,
            "schema": base64.b64encode(schema.serialize().to_pybytes()).decode()}


def record_error(store: StateStore, identifier: int | None, exc: BaseException) -> None:
    store.write_json(ERROR_DOCUMENT, {"format": ERROR_FORMAT, "version": ERROR_VERSION,
                                      "identifier": identifier, "error": type(exc).__name__,
                                      "message": str(exc), "time_ms": int(time.time() * 1000)})


def raise_recorded_error(store: StateStore) -> None:
    """Raise (once) the failure the background committer left behind."""
    document = store.read_json(ERROR_DOCUMENT)
    if document is None:
        return
    if document.get("format") != ERROR_FORMAT or document.get("version") != ERROR_VERSION:
        raise CorruptStateError(f"{store.directory}/{ERROR_DOCUMENT} has an unknown format: {document!r}")
    store.delete(ERROR_DOCUMENT)
    raise BackgroundCommitError(
        f"The background commit of batch {document.get('identifier')} failed: {document['error']}: "
        f"{document['message']}")


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
    from .stream import StreamSink
    from .tables import arrow_schema, open_table

    binding = store.read_json("sink.json")
    if binding is None:
        raise BackgroundCommitError(f"{checkpoint} has pending batches but no sink.json: not a lakesink "
                                    "stream checkpoint, or a damaged one.")
    write_options = WriteOptions.parse({**options, "checkpointLocation": checkpoint})
    table = open_table(binding["table"], write_options.fs_options or None)
    if table is None:
        raise BackgroundCommitError(f"{checkpoint} has pending batches for {binding['table']}, "
                                    "which no longer exists.")
    StreamSink(binding["table"], checkpoint, arrow_schema(table), write_options,
               "lakesink.await_commits").restore()


def serve(spec: dict, lock_fd: int) -> int:
    """The service's life: commit pending batches in order until idle; 0 when done, 1 on failure."""
    import pyarrow as pa

    from ..options import WriteOptions
    from .stream import StreamSink

    checkpoint = spec["checkpoint"]
    lock = CheckpointLock.adopt(checkpoint, lock_fd)
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(spec["schema"])))
        sink = StreamSink(spec["path"], checkpoint, schema, WriteOptions.parse(spec["options"]),
                          "format('paimon')")
    except BaseException as exc:  # e.g. corrupt sink state: the next batch must hear of it
        record_error(StateStore(f"{checkpoint}/lakesink"), None, exc)
        log.exception("committer for %s could not start", checkpoint)
        lock.release()
        return 1
    sock_path = _socket_path(checkpoint)
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
