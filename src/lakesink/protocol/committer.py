"""The committer: turns one checkpoint's committables into one snapshot, once.

Engine-neutral. The rules, after Flink's committer and Paimon's commit user:

* A checkpoint is identified by (commit_user, identifier); identifiers of one
  commit user only grow. If the target already holds that identity (a replay
  after a crash), nothing is committed and the replay's files are discarded.
* With a `PendingStore`, committables are made durable before the commit
  starts; `restore()` after a restart commits what is still pending (never
  twice) before anything new.
* A failed commit is told apart from an unknown one: after an exception we
  ask the target whether the identity landed. Landed: success. Not landed:
  discard the files and raise `CommitFailedError`. Cannot tell: keep every
  file and the pending state, raise `CommitStateUnknownError`.
* Once a checkpoint was acknowledged to the engine before its commit
  (pipelined), the engine will not replay it: a failed commit then keeps the
  files and the pending state, and `restore()` retries it; nothing is lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Generic

from ..errors import CommitFailedError, CommitStateUnknownError, RestoreError
from .state import PendingCheckpoint, PendingStore
from .target import C, CommitReport, CommitTarget, Overwrite

log = logging.getLogger(__name__)


class Committer(Generic[C]):
    def __init__(self, target: CommitTarget[C], commit_user: str,
                 pending: PendingStore | None = None):
        self.target = target
        self.commit_user = commit_user
        self.pending = pending

    def is_committed(self, identifier: int) -> bool:
        last = self.target.last_committed(self.commit_user)
        return last is not None and last >= identifier

    def skips_as_replay(self, identifier: int, where: str) -> bool:
        """Whether a job of `identifier` is a replay to skip; says so in the log (WARNING), since
        the whole job then writes nothing. An identifier at or below the last one committed is."""
        last = self.target.last_committed(self.commit_user)
        if last is None or last < identifier:
            return False
        log.warning("write to %s skipped as a replay: commit user %r has already committed identifier %d "
                    "(this write's is %d; an identifier at or below the last committed one is skipped). "
                    "Nothing was written.", where, self.commit_user, last, identifier)
        self.target.found_landed(self.commit_user, identifier)
        return True

    def accept(self, identifier: int, committables: Sequence[C],
               overwrite: Overwrite | None = None,
               properties: dict[str, str] | None = None,
               acknowledged: bool = False) -> PendingCheckpoint | None:
        """Durably record committables before committing them (no-op without a store).

        `acknowledged=True`: the caller tells the engine the checkpoint is done as
        soon as this returns (pipelined), so its commit must never give it up.
        """
        if self.pending is None:
            return None
        record = PendingCheckpoint(self.commit_user, identifier,
                                   [self.target.encode(c) for c in committables],
                                   overwrite, dict(properties or {}), acknowledged,
                                   self.target.check_from(identifier))
        self.pending.put(record)
        return record

    def commit(self, identifier: int, committables: Sequence[C],
               overwrite: Overwrite | None = None,
               properties: dict[str, str] | None = None,
               already_accepted: bool = False) -> CommitReport:
        started = time.perf_counter()
        if self.is_committed(identifier):
            discarded = self.target.discard(committables, include_placed=False)
            self._forget(identifier)
            self.target.found_landed(self.commit_user, identifier)
            log.info("checkpoint %s of %s already committed: replay skipped, %d files discarded",
                     identifier, self.commit_user, discarded)
            return CommitReport(self.commit_user, identifier, skipped_replay=True,
                                files_discarded=discarded,
                                duration_ms=(time.perf_counter() - started) * 1000)
        if not already_accepted:
            self.accept(identifier, committables, overwrite, properties)
        report = self._commit_once(identifier, committables, overwrite, properties,
                                   keep_on_failure=already_accepted)
        self._forget(identifier)
        report.duration_ms = (time.perf_counter() - started) * 1000
        return report

    def _commit_once(self, identifier, committables, overwrite, properties,
                     keep_on_failure: bool = False) -> CommitReport:
        """One commit attempt; `keep_on_failure`: an acknowledged checkpoint keeps its files."""
        try:
            return self.target.commit(self.commit_user, identifier, committables, overwrite, properties)
        except CommitFailedError as exc:
            if keep_on_failure:
                raise CommitFailedError(
                    f"{exc} Checkpoint {identifier} was already acknowledged to the engine: its files "
                    "and pending state are kept, and the commit is retried when the query restarts."
                ) from exc
            self.target.discard(committables)
            self._forget(identifier)
            raise
        except Exception as exc:
            try:
                landed = self.is_committed(identifier)
            except Exception as check_exc:
                raise CommitStateUnknownError(
                    f"Commit {identifier} of {self.commit_user} failed ({exc}) and whether it landed "
                    f"cannot be checked ({check_exc}). No file was deleted; running the same "
                    "checkpoint again resolves it."
                ) from exc
            if landed:
                log.warning("commit %s raised %r but landed; treating as success", identifier, exc)
                self.target.found_landed(self.commit_user, identifier)
                return CommitReport(self.commit_user, identifier, extra={"recovered_from": repr(exc)})
            if keep_on_failure:
                raise CommitFailedError(
                    f"Commit {identifier} of {self.commit_user} failed and did not land: {exc}. It was "
                    "already acknowledged to the engine: its files and pending state are kept, and the "
                    "commit is retried when the query restarts."
                ) from exc
            self.target.discard(committables)
            self._forget(identifier)
            raise CommitFailedError(
                f"Commit {identifier} of {self.commit_user} failed and did not land: {exc}. "
                "Its files were removed; the table is unchanged."
            ) from exc

    def abort(self, committables: Sequence[C], identifier: int | None = None) -> int:
        """Discard files of a checkpoint that will not be committed."""
        if identifier is not None and self.is_committed(identifier):
            # The snapshot landed (e.g. Spark aborts after a commit that raised late):
            # its files are referenced now and must stay; only staged leftovers go.
            discarded = self.target.discard(committables, include_placed=False)
            self.target.found_landed(self.commit_user, identifier)
            return discarded
        removed = self.target.discard(committables)
        if identifier is not None:
            self._forget(identifier)
        return removed

    def restore(self) -> list[CommitReport]:
        """Commit what a previous driver accepted but did not commit; in identifier order."""
        if self.pending is None:
            return []
        reports = []
        for record in self.pending.all():
            if record.commit_user != self.commit_user:
                raise RestoreError(
                    f"Pending commit {record.identifier} belongs to commit user {record.commit_user!r}, "
                    f"not {self.commit_user!r}: this state directory is shared by two sinks."
                )
            committables = [self.target.decode(c) for c in record.committables]
            if self.is_committed(record.identifier):
                # Landed before the crash, or a replay accepted after the original landed:
                # only files that never made it into the table go.
                self.target.discard(committables, include_placed=False)
                self.pending.remove(record.identifier)
                self.target.found_landed(self.commit_user, record.identifier)
                continue
            missing = self.target.missing_files(committables)
            if missing and not record.acknowledged:
                # Never acknowledged: the engine runs this checkpoint again. Files are missing
                # only when its failed commit was discarding them as the process died; the
                # rest of them go too, and the replay writes the checkpoint anew.
                log.warning("pending commit %s of %s: %d of its files were already discarded (a failed "
                            "commit interrupted); the rest discarded, the engine replays it",
                            record.identifier, self.commit_user, len(missing))
                self.target.discard(committables)
                self.pending.remove(record.identifier)
                continue
            if missing:
                shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                raise RestoreError(
                    f"Cannot restore pending commit {record.identifier} of {self.commit_user}: "
                    f"{len(missing)} of its data files no longer exist ({shown}). The checkpoint is "
                    "older than the files it refers to; start from a new checkpoint location."
                )
            self.target.restore_check_from(record.identifier, record.check_from)
            report = self._commit_restored(record, committables)
            report.restored = True
            self.pending.remove(record.identifier)
            reports.append(report)
        return reports

    def _commit_restored(self, record: PendingCheckpoint, committables: Sequence[C]) -> CommitReport:
        """Commit one pending checkpoint during `restore` (a hook for subclasses)."""
        return self._commit_once(record.identifier, committables, record.overwrite, record.properties,
                                 keep_on_failure=record.acknowledged)

    def _forget(self, identifier: int) -> None:
        if self.pending is not None:
            self.pending.remove(identifier)
