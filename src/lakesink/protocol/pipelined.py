"""Pipelined commits: accept a checkpoint durably, commit it in the background.

The engine may start the next checkpoint as soon as `submit` returns, because
the committables are already in the `PendingStore`; if the driver dies before
the background commit finishes, `Committer.restore()` commits them after the
restart. Commits run in identifier order on one thread. A failure is raised by
the next `submit` or `flush`, never swallowed; the failed checkpoint keeps its
files and pending state (the engine has already moved on past it), so the
restarted query's `restore()` retries it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence

from . import crashpoints
from .committer import Committer
from .target import C, CommitReport, Overwrite


class PipelinedCommitter:
    def __init__(self, committer: Committer, on_report: Callable[[CommitReport], None] | None = None):
        if committer.pending is None:
            raise ValueError("pipelined commits need a PendingStore to survive failover")
        self.committer = committer
        self.on_report = on_report
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
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
        self._queue.put((identifier, list(committables), overwrite, properties))

    def flush(self) -> None:
        self._queue.join()
        self._raise_pending_error()

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _raise_pending_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None:  # after a failure, later checkpoints wait for a restart
                    identifier, committables, overwrite, properties = item
                    report = self.committer.commit(identifier, committables, overwrite, properties,
                                                   already_accepted=True)
                    if self.on_report is not None:
                        self.on_report(report)
            except BaseException as exc:  # surfaced on the caller's thread
                self._error = exc
            finally:
                self._queue.task_done()
