"""One streaming query's sink into a Paimon table, independent of the engine.

State lives in `<checkpoint>/lakesink/`:

* `sink.json` binds the checkpoint to one table and one commit user
  (`protocol.binding`, format `lakesink.stream-sink`). The commit user is derived
  from the engine's query id (stable across restarts) or given explicitly; the
  same checkpoint pointed at another table fails at start.
* `pending-<batch>.json`: committables accepted but not yet committed
  (see `protocol.state`), committed by `restore()` before any new batch.
* `committer-error.json`: a failed background commit (pipelined), raised by
  the next batch (see `protocol.pipelined`).

Pending batches are committed by one process at a time per checkpoint and
host (`protocol.pipelined.CheckpointLock`): the synchronous restore, or the
pipelined mode's background committer.

Each micro-batch is one checkpoint: identifier = the engine's batch id.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence

import pyarrow as pa

from ... import storage
from ...errors import CommitStateUnknownError, ConfigurationError
from ...options import WriteOptions
from ...protocol import Committer, CommitReport, PendingStore, crashpoints
from ...protocol.binding import CheckpointBinding, sink_state
from ...protocol.pipelined import IDLE_SECONDS, CheckpointLock, ask_to_stop, raise_recorded_error
from ..commit import intents
from ..table import branches
from ..files.datafiles import StagedFile, TableLayout
from .keyed_plan import compacts_automatically, prepare_keyed_target, wants_keyed
from .batch import prepare_target

log = logging.getLogger(__name__)

SINK_FILE, SINK_FORMAT = "sink.json", "lakesink.stream-sink"  # the checkpoint's binding (protocol.binding)


class StreamSink:
    def __init__(self, path: str, checkpoint: str | None, schema: pa.Schema, options: WriteOptions,
                 path_name: str, query_id: Callable[[], str | None] = lambda: None):
        """`query_id` gives the engine's stable id of the query (None until it is known)."""
        if not checkpoint:
            raise ConfigurationError(
                "No checkpoint location: exactly-once streaming needs one. Set "
                ".option('checkpointLocation', '/path/to/chk') on the writeStream."
            )
        self.path = path
        self.checkpoint = checkpoint.rstrip("/")
        self.options = options
        self.query_id = query_id
        self.rewriter = None  # the engine's distributed rewrite for the aggregator (else threads)
        self.keyed = None  # the KeyedSpec of a primary-key / fixed-bucket table
        self.compacts = False  # primary-key tables: full compaction of buckets after each commit
        # The engine's committing process outlives its batches (a driver thread, not a process per
        # commit): compaction rounds may trail the commits (compaction.coordinated).
        self.background_compaction = False
        self.round_gate = None  # with it: the engine's wait for a batch to end (`Coordinator.round_gate`)
        # Another process runs the compaction rounds after this sink's commits (an engine that
        # commits in a process per batch hands them to a service: `compaction_rounds`).
        self.rounds_elsewhere = False
        if wants_keyed(path, options):
            self.target, self.layout, self.keyed, _ = prepare_keyed_target(path, schema, options,
                                                                            plan_sequences=False)
            self.compacts = compacts_automatically(self.target, options)
            if self.keyed.dynamic is not None and options.commit_mode == "pipelined":
                # A batch's bucket assignment reads the hash index of the table as committed; the
                # batches a pipelined stream still has pending hold new keys it would not see.
                raise ConfigurationError(
                    f"commit.mode=pipelined into the dynamic-bucket table {self.target.path} (bucket=-1) is not "
                    "supported: each micro-batch assigns its new keys through the index the previous one "
                    "committed. Use commit.mode=sync, or a fixed bucket count. Nothing was written.",
                    option="commit.mode")
        else:
            self.target, self.layout = prepare_target(path, schema, options, path_name)
        self.target.empty_commits = options.commit_empty_batches
        # Option write.in-place (Spark-native path): batches' files written at their table paths,
        # so ending a batch also removes what its attempts' intents name (paimon.commit.intents).
        self.in_place = intents.in_place(self.target.path, options.in_place)
        self.store = sink_state(self.checkpoint, options.fs_options)
        self.compression = options.table_options.get("file.compression") or "snappy"
        self.commit_user: str | None = self._check_binding(options.commit_user)
        if self.commit_user is None and (options.commit_user or query_id()):
            self.bind()

    def _binding(self) -> CheckpointBinding:
        # A branch's stream is bound to the branch: its commit identities are the branch's.
        return CheckpointBinding(self.store, self.checkpoint, SINK_FILE, SINK_FORMAT,
                                 branches.describe(self.target.describe(), self.target.branch))

    def _check_binding(self, explicit_user: str | None) -> str | None:
        """The commit user this checkpoint is bound to (None if unbound); fails for another table."""
        return self._binding().commit_user(explicit_user)

    def bind(self) -> str:
        """Bind the checkpoint to this table and a commit user, once; idempotent.

        The commit user is derived from the engine's query id, which Spark writes
        into the checkpoint when the query starts: a sink built before `start()`
        (the fast path) binds at its first micro-batch.
        """
        if self.commit_user is None:
            self.commit_user = self._binding().bind(self.options.commit_user, self.query_id)
        return self.commit_user

    def committer(self) -> Committer:
        """The committer of this checkpoint; with the aggregator when asked for.

        Only the process committing the checkpoint's batches (holding its lock, or
        running it synchronously) uses this one: the aggregator's rewrites live there.
        Processes that only accept or abort a batch use `_plain_committer`.
        """
        committer = self._plain_committer()
        if (self.options.aggregator or self.compacts) and not self.rounds_elsewhere:
            # Small files binned and compacted after each commit (append tables); buckets of
            # primary-key tables compacted when their sorted runs pass the trigger.
            from ..compaction.wiring import coordinated
            committer = coordinated(committer, self.store, self.rewriter, in_place=self.in_place,
                                    background=self.background_compaction, round_gate=self.round_gate)
        return committer

    def compaction_rounds(self):
        """This checkpoint's compaction coordinator, restored, for a process that runs the rounds
        after batches other processes commit (`Coordinator.catch_up_round`)."""
        from ..compaction.wiring import new_coordinator
        coordinator = new_coordinator(self.target, self.bind(), self.store, self.rewriter, in_place=self.in_place)
        coordinator.restore()
        return coordinator

    def rounds_behind(self, coordinator=None) -> bool:
        """Whether a batch landed after the newest compaction round, or that round's compaction
        is still unresolved: what waiting for a compaction service waits on. Rounds as the
        saved state records them, or as `coordinator` (the one running them) has them."""
        from ...protocol.coordinator import saved_progress
        applied, pending = ((coordinator.applied, False) if coordinator is not None
                            else saved_progress(self.store))
        last = self.target.last_committed(self.bind())
        return pending or (last is not None and (applied is None or applied < last))

    def _plain_committer(self) -> Committer:
        return Committer(self.target, self.bind(), PendingStore(self.store))

    def restore(self) -> list[CommitReport]:
        """Commit what a dead driver accepted; before any new batch runs."""
        if self.commit_user is None:
            return []  # never bound: nothing can be pending
        lock = CheckpointLock(self.checkpoint)
        if lock.is_held_elsewhere():
            ask_to_stop(self.checkpoint)  # a pipelined run's committer, idling: we take over
        with lock.held(IDLE_SECONDS + 30, "restoring pending batches"):
            return self.restore_holding_lock()

    def restore_holding_lock(self) -> list[CommitReport]:
        if self.commit_user is None:
            return []
        pending = PendingStore(self.store)
        before = set(pending.identifiers())
        reports = self.committer().restore()
        for r in reports:
            log.info("restored pending batch %s of %s: snapshot %s", r.identifier, self.commit_user, r.snapshot_id)
        # Every batch no longer pending is done: committed now, or found committed (it landed
        # before a crash). Its staging directory goes whole, with what failed attempts left there.
        for identifier in before - set(pending.identifiers()):
            self.remove_staging(identifier)
        self._sweep_staging(set(pending.identifiers()))
        return reports

    def _sweep_staging(self, pending: set[int]) -> None:
        """Remove staging directories of this sink's batches that are committed and not pending.

        A driver killed between a batch's commit (or its abort) and the removal of its staging
        leaves that directory behind, with no pending state pointing at it; nothing would ever
        look at it again. The engine replays at most its last batch, which is at or above the
        last committed identifier: directories of batches below it can only hold leftovers.
        """
        last = self._plain_committer().target.last_committed(self.bind())
        if last is None:
            return
        prefix = self.staging_dir(0)[: -len("0")]
        parent = prefix.rsplit("/", 1)[0]
        for entry in storage.list_dir(parent, self.options.fs_options, files_only=False):
            name = entry.path.rstrip("/").rsplit("/", 1)[-1]
            head = prefix.rsplit("/", 1)[-1]
            if not entry.is_dir or not name.startswith(head) or not name[len(head):].isdigit():
                continue
            batch = int(name[len(head):])
            if batch < last and batch not in pending:
                self.remove_staging(batch)

    def staging_dir(self, batch_id: int) -> str:
        # Deterministic per (query, batch): a replay reuses and finally removes the
        # directory of the attempt that died, with whatever that attempt left there.
        token = hashlib.sha256(self.bind().encode()).hexdigest()[:12]
        return f"{self.target.lakesink_dir()}/staging/{token}-b{batch_id}"

    def commit_batch(self, batch_id: int, files: Sequence[StagedFile],
                     committer: Committer | None = None) -> CommitReport:
        try:
            report = (committer or self.committer()).commit(batch_id, files, None,
                                                            {"lakesink.batch-id": str(batch_id)})
        except CommitStateUnknownError:
            raise  # the pending state still needs the staged files: keep them for the retry
        except BaseException:
            self.remove_staging(batch_id)
            raise
        known = not report.skipped_replay and report.snapshot_id is not None
        self.remove_staging(batch_id, report.snapshot_id if known else None)
        return report

    def accept_batch(self, batch_id: int, files: Sequence[StagedFile]) -> str:
        """Pipelined: make the batch durable for the background committer; it is acknowledged
        to the engine as soon as this returns. Returns what happened: accepted, skipped
        (a replay of a batch in the table) or already-accepted (a replay of a batch a dead
        driver accepted: that attempt's files are committed, this one's go)."""
        raise_recorded_error(self.store)
        committer = self._plain_committer()
        if committer.is_committed(batch_id):
            self.commit_batch(batch_id, files, committer)  # skipped as a replay, its files removed
            return "skipped"
        earlier = committer.pending.get(batch_id)
        if earlier is not None and not committer.target.missing_files(
                [committer.target.decode(c) for c in earlier.committables]):
            committer.target.discard(files, include_placed=False)
            return "already-accepted"
        # (An earlier attempt whose files are gone is replaced by this one: same batch, same rows.)
        committer.accept(batch_id, files, None, {"lakesink.batch-id": str(batch_id)}, acknowledged=True)
        crashpoints.reached("accepted")
        return "accepted"

    def pending_files(self) -> list[StagedFile]:
        """The files of batches accepted and not yet committed (pipelined; any may commit while
        this reads): what the next batch of a keyed table must plan its sequence numbers above."""
        return [self.target.decode(c) for record in PendingStore(self.store).all() for c in record.committables]

    def abort_batch(self, batch_id: int, files: Sequence[StagedFile]) -> None:
        accepted = PendingStore(self.store).get(batch_id)
        if accepted is not None:
            # Another attempt of this batch was accepted (pipelined) and is being committed
            # from the same staging directory: remove only this attempt's files.
            self.target.discard(files, include_placed=False)
            if self.in_place:  # at their table paths: those the accepted attempt does not commit
                theirs = {self.target.decode(c).meta.file_name for c in accepted.committables}
                self.target.discard([f for f in files if f.staged_path is None and f.meta.file_name not in theirs])
            return
        try:
            self._plain_committer().abort(files, batch_id)
        finally:
            self.remove_staging(batch_id)

    def remove_staging(self, batch_id: int, snapshot_id: int | None = None) -> None:
        """Remove a batch's staging, which no pending state needs any more; in place, first what
        its attempts named and the batch's snapshot (`snapshot_id` if known) did not add."""
        staging = self.staging_dir(batch_id)
        if self.in_place:
            try:
                intents.sweep(self.target, staging, self.bind(), batch_id, snapshot_id)
            except Exception as exc:  # noqa: BLE001 - the batch's outcome stands; a later restore retries
                log.warning("%s: could not remove what failed attempts wrote (%s); kept for the next "
                            "restore or clean_staging", staging, exc)
                return
        self.target.file_io.delete_directory_quietly(staging)

    def task_layout(self) -> TableLayout:
        return self.layout
