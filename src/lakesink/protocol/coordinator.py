"""The aggregator's coordinator: a driver-side decision maker consistent with checkpoints.

Writers send it events (`FilesWritten`: the files a checkpoint wrote, i.e. the
statistics binning needs; `RewriteFinished`: the result of a rewrite). As in
FLINK-28639, events that arrive while a commit is in progress are *held* and
delivered after that commit, so the coordinator never acts on files of a
checkpoint whose snapshot has not landed.

After checkpoint N's append snapshot lands, `commit_finished(N)`:

1. delivers the held events (N's files join the bins of small files carried
   over from earlier checkpoints);
2. runs the aggregator over the bins; if it rewrote anything, records the
   planned compaction (`pending`) durably, then commits it as one compaction
   (files replaced → deleted, new files → added, conflict checked);
3. saves its state as `aggregator-<N>.json` (format below), so the stored
   state always matches a committed snapshot.

In the background (`background=True`, an engine whose driver outlives its checkpoints):
steps 2-3 run on a thread of their own after the checkpoint's commit, once `round_gate`
(the engine's wait for the checkpoint's end, given an Event that ends it) returns, as
Paimon's writers compact between checkpoints. One round at a time: the next
`commit_finished` waits for it; events arriving meanwhile are held. `wait()` waits for it.

A restarted driver `restore()`s the newest state, finishes a pending
compaction (it landed: adopt it; it did not: commit it now, or discard its
files if it conflicts), removes rewrite outputs nobody refers to, and catches
up with checkpoints that landed after the state was saved by reading them
from the table. Correctness never rests on this state alone: a compaction
whose inputs are no longer live conflicts and is discarded, so no row is lost
or doubled; the state only decides what gets compacted when.

    {"format": "lakesink.aggregator-state", "version": 1, "commit_user": "...",
     "checkpoint": 7, "bins": [<encoded committable>, ...], "held": [<event>, ...],
     "pending": null | {"identifier": 3, "replaced": [...], "new": [...]},
     "aggregator": {...}}
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from .. import storage
from ..errors import CommitConflictError, CommitFailedError, CorruptStateError
from . import crashpoints
from .aggregator import Aggregator, C, run_aggregator
from .state import StateStore
from .target import CommitReport

log = logging.getLogger(__name__)

STATE = storage.DocumentKind("lakesink.aggregator-state", 1, "lakesink aggregator state",
                             "Delete it to start aggregating afresh (no row depends on it).")
STATE_PREFIX = "aggregator-"
COMPACT_USER_SUFFIX = ".compact"


def saved_progress(store: StateStore) -> tuple[int | None, bool]:
    """(the newest checkpoint the newest saved state took in, whether it holds a compaction of
    unknown outcome); (None, False) when nothing was saved. For watching another process's rounds."""
    _name, data = _newest_state(store)
    if not isinstance(data, dict):
        return None, False
    return data.get("checkpoint"), data.get("pending") is not None


def _newest_state(store: StateStore) -> tuple[str | None, object]:
    names = [n for n in store.names(STATE_PREFIX) if n.endswith(".json")]
    return (names[-1], store.read_json(names[-1])) if names else (None, None)


# -- events ---------------------------------------------------------------------

@dataclass
class FilesWritten(Generic[C]):
    """A checkpoint's files, sent when the committer accepts them."""

    checkpoint: int
    committables: list


@dataclass
class RewriteFinished(Generic[C]):
    """A finished rewrite: `new` holds exactly the rows of `replaced`."""

    identifier: int
    replaced: list
    new: list


# -- what the coordinator needs from a table format --------------------------------

class CompactionTarget(ABC, Generic[C]):
    """A table that can swap files in one conflict-checked compaction commit."""

    @abstractmethod
    def identity(self, committable: C) -> str:
        """A name unique to the file (the same file always has the same name)."""

    @abstractmethod
    def encode(self, committable: C) -> dict: ...

    @abstractmethod
    def decode(self, data: dict) -> C: ...

    def as_committed(self, committable: C) -> C:
        """The committable as it is once its commit landed (e.g. no staging path)."""
        return committable

    @abstractmethod
    def last_committed(self, commit_user: str) -> int | None:
        """The highest identifier `commit_user` landed."""

    @abstractmethod
    def commit_compaction(self, commit_user: str, identifier: int, replaced: Sequence[C],
                          new: Sequence[C], properties: dict[str, str] | None = None) -> CommitReport:
        """Delete `replaced` and add `new` in one snapshot. Raise `CommitConflictError` when a
        file of `replaced` is no longer live (nothing landed then)."""

    @abstractmethod
    def discard(self, committables: Sequence[C]) -> int:
        """Delete files of committables no snapshot references."""

    def before_round(self, compact_user: str) -> None:
        """Called before each plan, before anything is rewritten (e.g. to remove what dead
        compactions wrote where the next one writes). Raise to skip the round."""

    def missing_files(self, committables: Sequence[C]) -> list[str]:
        """Files of a restored pending compaction's outputs that no longer exist (none checked
        by default: the commit itself fails on them)."""
        return []

    @abstractmethod
    def live(self, committables: Sequence[C]) -> list[C]:
        """Those of `committables` the latest snapshot still holds."""

    @abstractmethod
    def committed_since(self, commit_user: str, identifier: int | None) -> list[tuple[int, list[C]]]:
        """(identifier, files added) of each checkpoint of `commit_user` after `identifier`, oldest first."""

    @abstractmethod
    def clean_staging(self, compact_user: str, keep: Sequence[C]) -> int:
        """Remove rewrite outputs of `compact_user` that are not in `keep`."""


@dataclass
class RoundReport:
    """What one aggregation round did (kept in the append's `CommitReport.extra`)."""

    checkpoint: int | None
    snapshot_id: int | None = None
    files_removed: int = 0
    files_added: int = 0
    carried: int = 0
    conflict: str | None = None
    error: str | None = None
    duration_ms: float = 0.0   # the whole round: planning, rewrites, the compaction commit
    extra: dict[str, Any] = field(default_factory=dict)


class Coordinator(Generic[C]):
    def __init__(self, aggregator: Aggregator[C], target: CompactionTarget[C], commit_user: str,
                 store: StateStore | None = None, background: bool = False):
        self.aggregator = aggregator
        self.target = target
        self.commit_user = commit_user
        self.compact_user = commit_user + COMPACT_USER_SUFFIX
        self.store = store
        self.bins: dict[str, C] = {}          # carried small files, by identity, oldest first
        self.held: list = []                  # events not delivered yet
        self.applied: int | None = None       # newest checkpoint whose files are in the bins
        self.pending: dict | None = None      # a planned compaction not known to have landed
        self._pending_restored = False        # `pending` came from the saved state
        self._committing: int | None = None
        self._finished: int | None = None     # newest checkpoint whose commit finished
        self._round_after: int | None = None  # the checkpoint the last round ran after (saved_at)
        self._events_lock = threading.Lock()
        self._round_lock = threading.RLock()
        self.background = background
        self._round_thread: threading.Thread | None = None  # the background round running
        self.round_gate: Callable[[int, threading.Event], None] | None = None  # see above
        self._gate_open = threading.Event()  # the gate's Event: set once someone `wait`s for the round

    # -- events -------------------------------------------------------------------
    def send(self, event) -> None:
        """An event from a writer. Held while a commit is in progress, else delivered now."""
        with self._events_lock:
            self.held.append(event)
            holding = self._committing is not None or self._round_running()
        if holding:
            crashpoints.reached("events-held")
        else:
            with self._round_lock:
                self._deliver_held()

    def commit_started(self, checkpoint: int) -> None:
        with self._events_lock:
            self._committing = checkpoint

    def commit_finished(self, checkpoint: int, landed: bool,
                        on_round: Callable[[RoundReport], None] | None = None) -> RoundReport | None:
        """The append of `checkpoint` finished: deliver held events, aggregate, save. Never raises:
        the append already landed, compaction problems must not fail the writer. In the
        background, returns None at once and hands the round's report to `on_round`."""
        if self.background and landed:
            self.wait()  # one round at a time
            self._gate_open.clear()
            thread = threading.Thread(target=self._background_round, args=(checkpoint, on_round),
                                      name=f"lakesink-compaction-{checkpoint}")
            with self._events_lock:
                self._round_thread = thread
                self._committing = None  # events now wait for the round instead (`send`)
            thread.start()
            return None
        return self._finish(checkpoint, landed)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a background round to end; False if it still runs after `timeout`."""
        thread = self._round_thread
        if thread is not None and thread is not threading.current_thread():
            self._gate_open.set()  # someone waits for the round (the next commit, a stop): go
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _round_running(self) -> bool:
        thread = self._round_thread
        return thread is not None and thread.is_alive() and thread is not threading.current_thread()

    def _background_round(self, checkpoint: int, on_round) -> None:
        if self.round_gate is not None:
            try:
                self.round_gate(checkpoint, self._gate_open)
            except Exception as exc:  # noqa: BLE001 - a wait, never a reason to skip the round
                log.warning("waiting before the round after checkpoint %s failed: %s", checkpoint, exc)
        report = self._finish(checkpoint, True)
        if report is not None and on_round is not None:
            on_round(report)

    def _finish(self, checkpoint: int, landed: bool) -> RoundReport | None:
        started = time.perf_counter()
        with self._round_lock:
            try:
                if landed:
                    self._finished = max(checkpoint, self._finished or checkpoint)
                    self._round_after = checkpoint
                else:
                    self._drop_events_of(checkpoint)
                self._deliver_held()
                report = self._round(checkpoint) if landed else None
            except Exception as exc:  # noqa: BLE001 - logged and reported, never fails the append
                log.warning("aggregation after checkpoint %s of %s failed: %s", checkpoint,
                            self.commit_user, exc, exc_info=True)
                report = RoundReport(checkpoint, error=f"{type(exc).__name__}: {exc}")
            finally:
                with self._events_lock:
                    if self._committing == checkpoint or not landed:
                        self._committing = None
            if landed:
                self._save_quietly(checkpoint)
            if report is not None:
                report.duration_ms = (time.perf_counter() - started) * 1000
            return report

    def flush(self, checkpoint: int) -> RoundReport | None:
        """A last round that also combines partial bins (end of a batch job)."""
        with self._round_lock:
            self.aggregator.flush()
            try:
                return self._round(checkpoint)
            except Exception as exc:  # noqa: BLE001
                log.warning("final aggregation of %s failed: %s", self.commit_user, exc, exc_info=True)
                return RoundReport(checkpoint, error=f"{type(exc).__name__}: {exc}")

    # -- restore --------------------------------------------------------------------
    def restore(self) -> None:
        """Load the newest saved state, finish its pending compaction, catch up with the table."""
        with self._round_lock:
            self._load()
            try:
                if self.pending is not None:
                    self._resolve_pending(self.applied)
            except Exception as exc:  # noqa: BLE001 - outcome unknown: keep it for the next round
                log.warning("pending compaction of %s unresolved: %s", self.commit_user, exc)
            keep = [self.target.decode(d) for d in (self.pending or {}).get("new", [])]
            self.target.clean_staging(self.compact_user, keep)
            self.catch_up()

    def catch_up(self) -> None:
        """Add the files of checkpoints that landed after `applied` (e.g. restored pending ones)."""
        with self._round_lock:
            for identifier, files in self.target.committed_since(self.commit_user, self.applied):
                self._add(identifier, files)
                self._finished = max(identifier, self._finished or identifier)
            self._deliver_held()

    def catch_up_round(self) -> RoundReport | None:
        """The round of a process that commits nothing itself (a compaction service): take in
        the checkpoints that landed since the last round, then aggregate after the newest.
        None when nothing landed since."""
        with self._round_lock:
            self.catch_up()
            if self.applied is None or (self._round_after is not None and self.applied <= self._round_after):
                return None
            return self._finish(self.applied, True) or RoundReport(self.applied)

    # -- internals ------------------------------------------------------------------
    def _deliver_held(self) -> None:
        with self._events_lock:
            events, self.held = self.held, []
        kept = [e for e in events if not self._deliver(e)]
        with self._events_lock:
            self.held = kept + self.held

    def _deliver(self, event) -> bool:
        """Act on one event; False when it must wait (its checkpoint has not landed yet)."""
        if isinstance(event, FilesWritten):
            if self.applied is not None and event.checkpoint <= self.applied:
                return True  # already in the bins (delivered again after a restore)
            if self._finished is None or event.checkpoint > self._finished:
                return False
            self._add(event.checkpoint, event.committables)
            return True
        if isinstance(event, RewriteFinished):
            if self.pending is None and event.new:  # a rewrite that ran elsewhere (e.g. asynchronously)
                self.pending = {"identifier": event.identifier,
                                "replaced": [self.target.encode(c) for c in event.replaced],
                                "new": [self.target.encode(c) for c in event.new]}
            self._resolve_pending(self.applied)
            return True
        raise TypeError(f"unknown coordinator event {event!r}")

    def _drop_events_of(self, checkpoint: int) -> None:
        with self._events_lock:
            self.held = [e for e in self.held
                         if not (isinstance(e, FilesWritten) and e.checkpoint == checkpoint)]

    def _add(self, checkpoint: int, committables: Sequence[C]) -> None:
        for c in committables:
            c = self.target.as_committed(c)
            if self.aggregator.carries(c):  # files already big enough are never rewritten
                self.bins.setdefault(self.target.identity(c), c)
        self.applied = max(checkpoint, self.applied if self.applied is not None else checkpoint)

    ROUND_ATTEMPTS = 3  # plans of one round: the first, and again after each lost conflict

    def _round(self, checkpoint: int) -> RoundReport | None:
        """Plan, rewrite and commit one compaction. One that loses a conflict (another commit
        removed some of its inputs meanwhile) has its outputs deleted and the bins pruned to live
        files; it is planned again on the new state, up to `ROUND_ATTEMPTS` plans, then the round
        gives up (the next one looks again). The report's `conflict` says a round ended without
        its compaction; `extra["conflicts"]` counts the plans that lost."""
        if self.pending is not None:  # an earlier compaction whose outcome was unknown
            self._resolve_pending(checkpoint)
        lost: list[str] = []
        report: RoundReport | None = None
        for _attempt in range(self.ROUND_ATTEMPTS):
            report = self._plan_and_commit(checkpoint)
            if report is None or report.conflict is None:
                break
            lost.append(report.conflict)
            log.info("compaction of %s lost a conflict (%d of %d plans): planning again on the new state",
                     self.commit_user, len(lost), self.ROUND_ATTEMPTS)
        if lost:
            report = report or RoundReport(checkpoint, carried=len(self.bins))
            report.extra["conflicts"] = len(lost)
            if report.snapshot_id is None:
                report.conflict = lost[-1]
        return report

    def _plan_and_commit(self, checkpoint: int) -> RoundReport | None:
        if not self.bins:
            return None
        self.target.before_round(self.compact_user)
        committables = self.aggregator.inputs(list(self.bins.values()))
        self.bins = {self.target.identity(c): c for c in committables if self.aggregator.carries(c)}
        plan = run_aggregator(self.aggregator, committables, self.target.identity)
        if not plan.changed:
            return RoundReport(checkpoint, carried=len(self.bins))
        identifier = (self.target.last_committed(self.compact_user) or 0) + 1
        self.pending = {"identifier": identifier,
                        "replaced": [self.target.encode(c) for c in plan.replaced],
                        "new": [self.target.encode(c) for c in plan.new],
                        "properties": self.aggregator.commit_properties()}
        self._save(checkpoint)  # the rewrite outputs are known before anything is published
        crashpoints.reached("after-aggregate")
        self._planned = (self.pending, list(plan.replaced), list(plan.new))
        self._deliver(RewriteFinished(identifier, plan.replaced, plan.new))
        return self._last_round

    _last_round: RoundReport | None = None
    _planned: tuple | None = None  # (pending, replaced, new) of the compaction this process planned

    def _resolve_pending(self, checkpoint: int | None) -> None:
        pending, self._last_round = self.pending, None
        if pending is None:
            return
        identifier = int(pending["identifier"])
        planned, self._planned = self._planned, None
        if planned is not None and planned[0] is pending:  # planned here: no need to decode it again
            replaced, new = planned[1], planned[2]
        else:
            replaced = [self.target.decode(d) for d in pending["replaced"]]
            new = [self.target.decode(d) for d in pending["new"]]
        report = RoundReport(checkpoint, files_removed=len(replaced), files_added=len(new))
        last = self.target.last_committed(self.compact_user)
        if last is None or last < identifier:
            try:
                missing = self.target.missing_files(new) if self._pending_restored else []
                if missing:  # e.g. removed as abandoned: its rows are still in the files it replaces
                    raise FileNotFoundError(f"outputs of compaction {identifier} are gone: {missing[:3]}")
                commit = self.target.commit_compaction(
                    self.compact_user, identifier, replaced, new,
                    {**pending.get("properties", {}), "lakesink.compaction-of": self.commit_user,
                     "lakesink.checkpoint": str(checkpoint if checkpoint is not None else -1)})
                report.snapshot_id = commit.snapshot_id
            except (CommitConflictError, CommitFailedError, FileNotFoundError) as exc:
                # Someone else compacted or removed an input (or an output is gone): nothing
                # landed, so this rewrite's files go and the bins lose what is no longer live.
                log.info("compaction %s of %s not committed: %s", identifier, self.commit_user, exc)
                self.target.discard(new)
                self.pending, self._pending_restored = None, False
                self.bins = {self.target.identity(c): c for c in self.target.live(list(self.bins.values()))}
                report.conflict, report.files_removed, report.files_added = str(exc), 0, 0
                report.carried = len(self.bins)
                self._last_round = report
                return
        for c in replaced:
            self.bins.pop(self.target.identity(c), None)
        for c in new:
            c = self.target.as_committed(c)
            if self.aggregator.carries(c):
                self.bins[self.target.identity(c)] = c
        self.pending, self._pending_restored = None, False
        report.carried = len(self.bins)
        self._last_round = report

    # -- durable state ----------------------------------------------------------------
    def _save_quietly(self, checkpoint: int) -> None:
        try:
            self._save(checkpoint)
        except Exception as exc:  # noqa: BLE001 - the next save or a restore's catch-up repairs it
            log.warning("could not save aggregator state at checkpoint %s: %s", checkpoint, exc)

    def _save(self, checkpoint: int) -> None:
        if self.store is None:
            return
        with self._events_lock:
            held = [self._encode_event(e) for e in self.held]
        name = f"{STATE_PREFIX}{checkpoint:020d}.json"
        self.store.write_document(name, STATE, commit_user=self.commit_user, checkpoint=self.applied,
                                  saved_at=checkpoint, bins=[self.target.encode(c) for c in self.bins.values()],
                                  held=held, pending=self.pending, aggregator=self.aggregator.state())
        for old in self.store.names(STATE_PREFIX)[:-2]:  # keep the newest two
            if old != name:
                self.store.delete(old)

    def _load(self) -> None:
        if self.store is None:
            return
        name, data = _newest_state(self.store)
        if name is None:
            return
        where = f"{self.store.directory}/{name}"
        STATE.check(data, where)
        if data.get("commit_user") != self.commit_user:
            raise CorruptStateError(f"{where} belongs to commit user {data.get('commit_user')!r}, "
                                    f"not {self.commit_user!r}.")
        self.applied = data.get("checkpoint")
        self._finished = self.applied
        self._round_after = data.get("saved_at")
        self.bins = {}
        for encoded in data.get("bins") or []:
            c = self.target.decode(encoded)
            self.bins[self.target.identity(c)] = c
        self.held = [self._decode_event(e) for e in data.get("held") or []]
        self.pending = data.get("pending")
        self._pending_restored = self.pending is not None
        self.aggregator.restore_state(data.get("aggregator") or {})

    def _encode_event(self, event) -> dict:
        if isinstance(event, FilesWritten):
            return {"event": "files-written", "checkpoint": event.checkpoint,
                    "committables": [self.target.encode(c) for c in event.committables]}
        # a RewriteFinished is in `pending` already
        return {"event": "rewrite-finished", "identifier": event.identifier}

    def _decode_event(self, data: dict):
        if data.get("event") == "files-written":
            return FilesWritten(int(data["checkpoint"]), [self.target.decode(c) for c in data["committables"]])
        return RewriteFinished(int(data["identifier"]), [], [])
