"""Pipelined commits: accept a checkpoint durably, commit it in the background.

The engine may start the next checkpoint as soon as `submit` returns, because
the committables are already in the `PendingStore`; if the driver dies before
the background commit finishes, `Committer.restore()` commits them after the
restart. Commits run in identifier order on one thread. A failure is raised by
the next `submit` or `flush`, never swallowed; the failed checkpoint keeps its
files and pending state (the engine has already moved on past it), so the
restarted query's `restore()` retries it.

A background committer may also live in a process of its own (an engine that
runs commits in short-lived processes): `CheckpointLock` then makes one
process per checkpoint and host commit its pending checkpoints, and a failed
background commit leaves `committer-error.json` in the state directory, raised
once by the next checkpoint (`raise_recorded_error`):

    {"format": "lakesink.committer-error", "version": 1, "identifier": 7,
     "error": "CommitFailedError", "message": "...", "time_ms": 1763740000000}
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import storage
from ..errors import BackgroundCommitError
from . import crashpoints
from .committer import Committer
from .state import StateStore
from .target import C, CommitReport, Overwrite

ERROR_DOCUMENT = "committer-error.json"
ERROR = storage.DocumentKind("lakesink.committer-error", 1, "lakesink committer error record",
                             "Delete it; the batch it names stays pending and is committed on restart.")
# A background committer process leaves after this long without work.
IDLE_SECONDS = float(os.environ.get("LAKESINK_COMMITTER_IDLE_SECONDS", "60"))


class PipelinedCommitter:
    """The one pipelining mechanism: accept a checkpoint durably, commit what is accepted in the
    background, in identifier order.

    `submit()` runs on the engine's thread: a replay of a checkpoint that landed is dropped at
    once; otherwise the checkpoint is accepted (durable, acknowledged) and the committer woken.
    The committer commits everything pending with `commit_pending` (by default
    `Committer.restore`: identifier order, a checkpoint found committed is dropped, missing files
    are a `RestoreError`). It runs here on a thread of the engine's process; an engine whose
    commits run in short-lived processes runs the same `commit_pending` step in a committer
    process of its own instead (fed by `wake()` datagrams, holding the `CheckpointLock`).
    A failure stops the committer and is raised by the next `submit` or `flush`; the failed
    checkpoint keeps its files and pending state for the restarted query.
    """

    def __init__(self, committer: Committer, on_report: Callable[[CommitReport], None] | None = None,
                 commit_pending: Callable[[], list[CommitReport]] | None = None):
        if committer.pending is None:
            raise ValueError("pipelined commits need a PendingStore to survive failover")
        self.committer = committer
        self.on_report = on_report
        self._commit_pending = commit_pending or committer.restore
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._requested = 0   # wake-ups asked for
        self._served = 0      # wake-ups whose pending checkpoints were all committed (or failed)
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="lakesink-committer", daemon=True)
        self._thread.start()

    def submit(self, identifier: int, committables: Sequence[C],
               overwrite: Overwrite | None = None, properties: dict[str, str] | None = None) -> None:
        self._raise_pending_error()
        if self.committer.is_committed(identifier):
            # A replay of a checkpoint that already landed: drop its files now.
            self.committer.commit(identifier, committables, overwrite, properties)
            return
        self.committer.accept(identifier, committables, overwrite, properties, acknowledged=True)
        crashpoints.reached("accepted")
        self.wake()

    def wake(self) -> None:
        """Something was accepted: commit what is pending."""
        with self._changed:
            self._requested += 1
            self._changed.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every wake-up so far was served (committed, or stopped by a failure)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._served >= self._requested, timeout)

    def flush(self) -> None:
        self.wait_idle()
        self._raise_pending_error()

    def close(self) -> None:
        self.flush()
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join(timeout=30)

    def _raise_pending_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._closing or self._requested > self._served)
                if self._requested <= self._served:
                    return  # closing, nothing asked for
                target = self._requested
            if self._error is None:  # after a failure, later checkpoints wait for a restart
                try:
                    for report in self._commit_pending():
                        if self.on_report is not None:
                            self.on_report(report)
                except BaseException as exc:  # surfaced on the caller's thread
                    self._error = exc
            with self._changed:
                self._served = max(self._served, target)
                self._changed.notify_all()


def runtime_dir() -> Path:
    directory = Path(tempfile.gettempdir()) / f"lakesink-committers-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


def checkpoint_key(checkpoint: str) -> str:
    return hashlib.sha256(storage.normalize(checkpoint).encode()).hexdigest()[:20]


# What a checkpoint's background process does: commit its pending batches, or run the
# compaction rounds after batches that other processes committed. Each role has its own lock
# and socket, so a synchronous restore (which takes the commit lock) never stops compaction.
COMMIT, COMPACTION = "commit", "compaction"


def runtime_name(checkpoint: str, role: str, suffix: str) -> str:
    return f"{checkpoint_key(checkpoint)}{'' if role == COMMIT else '.' + role}{suffix}"


class CheckpointLock:
    """The host-wide lock that makes one process at a time play `role` for a checkpoint
    (commit its pending batches, or compact after its batches)."""

    def __init__(self, checkpoint: str, role: str = COMMIT):
        self.checkpoint, self.role = checkpoint, role
        self.path = runtime_dir() / runtime_name(checkpoint, role, ".lock")
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
    def adopt(cls, checkpoint: str, fd: int, role: str = COMMIT) -> CheckpointLock:
        """The lock held through a descriptor inherited from `ensure_running`."""
        lock = cls(checkpoint, role)
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


def record_error(store: StateStore, identifier: int | None, exc: BaseException) -> None:
    store.write_document(ERROR_DOCUMENT, ERROR, identifier=identifier, error=type(exc).__name__,
                         message=str(exc), time_ms=int(time.time() * 1000))


def raise_recorded_error(store: StateStore) -> None:
    """Raise (once) the failure the background committer left behind."""
    document = store.read_document(ERROR_DOCUMENT, ERROR)
    if document is None:
        return
    store.delete(ERROR_DOCUMENT)
    raise BackgroundCommitError(
        f"The background commit of batch {document.get('identifier')} failed: {document['error']}: "
        f"{document['message']}")


def socket_path(checkpoint: str, role: str = COMMIT) -> str:
    return str(runtime_dir() / runtime_name(checkpoint, role, ".sock"))


WAKE, STOP = b"w", b"q"


def wake(checkpoint: str, message: bytes = WAKE, role: str = COMMIT) -> bool:
    """Tell a running service that there is work (a batch pending, or committed); False if
    none listens."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(message, socket_path(checkpoint, role))
            return True
        except OSError:
            return False


def ask_to_stop(checkpoint: str) -> bool:
    """Ask a running service to exit once nothing is pending (a synchronous run takes over)."""
    return wake(checkpoint, STOP)
