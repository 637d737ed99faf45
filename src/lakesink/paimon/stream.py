"""One streaming query's sink into a Paimon table, independent of the engine.

State lives in `<checkpoint>/lakesink/`:

* `sink.json` binds the checkpoint to one table and one commit user:
  `{"format": "lakesink.stream-sink", "version": 1, "commit_user": ..., "table": ...}`.
  The commit user is derived from the engine's query id (stable across
  restarts) or given explicitly; the same checkpoint pointed at another table
  fails at start.
* `pending-<batch>.json`: committables accepted but not yet committed
  (see `protocol.state`), committed by `restore()` before any new batch.
* `committer-error.json`: a failed background commit (pipelined), raised by
  the next batch (see `committer_service`).

Pending batches are committed by one process at a time per checkpoint and
host (`committer_service.CheckpointLock`): the synchronous restore, or the
pipelined mode's background committer.

Each micro-batch is one checkpoint: identifier = the engine's batch id.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Sequence

import pyarrow as pa

from ..errors import (CheckpointMismatchError, CommitStateUnknownError, ConfigurationError,
                      CorruptStateError)
from ..options import WriteOptions
from ..protocol import Committer, CommitReport, PendingStore, StateStore, crashpoints
from ..protocol.state import filesystem_for
from .datafiles import StagedFile, TableLayout
from .sink import prepare_target

log = logging.getLogger(__name__)

SINK_FORMAT = "lakesink.stream-sink"
SINK_VERSION = 1


def query_id_of(checkpoint: str) -> str | None:
    """Spark keeps `{"id": <query id>}` in `<checkpoint>/metadata`, stable across restarts."""
    filesystem, root = filesystem_for(checkpoint)
    try:
        with filesystem.open_input_stream(f"{root.rstrip('/')}/metadata") as src:
            first = src.read().decode().splitlines()[0]
        return json.loads(first).get("id")
    except (FileNotFoundError, IndexError, ValueError, OSError):
        return None


class StreamSink:
    def __init__(self, path: str, checkpoint: str | None, schema: pa.Schema, options: WriteOptions,
                 path_name: str):
        if not checkpoint:
            raise ConfigurationError(
                "No checkpoint location: exactly-once streaming needs one. Set "
                ".option('checkpointLocation', '/path/to/chk') on the writeStream."
            )
        self.path = path
        self.checkpoint = checkpoint.rstrip("/")
        self.options = options
        self.target, self.layout = prepare_target(path, schema, options, path_name)
        self.target.empty_commits = options.commit_empty_batches
        self.store = StateStore(f"{self.checkpoint}/lakesink")
        self.compression = options.table_options.get("file.compression") or "snappy"
        self.commit_user: str | None = self._check_binding(options.commit_user)
        if self.commit_user is None and (options.commit_user or query_id_of(self.checkpoint)):
            self.bind()

    def _check_binding(self, explicit_user: str | None) -> str | None:
        """The commit user this checkpoint is bound to (None if unbound); fails for another table."""
        binding = self.store.read_json("sink.json")
        table = self.target.describe()
        if binding is not None:
            if binding.get("format") != SINK_FORMAT or binding.get("version") != SINK_VERSION:
                raise CorruptStateError(f"{self.checkpoint}/lakesink/sink.json has an unknown format: {binding!r}")
            if binding["table"] != table:
                raise CheckpointMismatchError(
                    f"Checkpoint {self.checkpoint} belongs to table {binding['table']}, not {table}. "
                    "Use a new checkpoint location for another table."
                )
            if explicit_user and explicit_user != binding["commit_user"]:
                raise CheckpointMismatchError(
                    f"Checkpoint {self.checkpoint} was written by commit user {binding['commit_user']!r}; "
                    f"commit.user={explicit_user!r} would make replays unrecognisable."
                )
            return binding["commit_user"]
        return None

    def bind(self) -> str:
        """Bind the checkpoint to this table and a commit user, once; idempotent.

        The commit user is derived from the engine's query id, which Spark writes
        into the checkpoint when the query starts: a sink built before `start()`
        (the fast path) binds at its first micro-batch.
        """
        if self.commit_user is not None:
            return self.commit_user
        query = query_id_of(self.checkpoint)
        if not (self.options.commit_user or query):
            log.warning("no query id in %s/metadata: the commit user is random (kept in sink.json)",
                        self.checkpoint)
        user = self.options.commit_user or f"lakesink-stream-{query or uuid.uuid4()}"
        self.store.write_json("sink.json", {"format": SINK_FORMAT, "version": SINK_VERSION,
                                            "commit_user": user, "table": self.target.describe(),
                                            "query_id": query})
        self.commit_user = user
        return user

    def committer(self) -> Committer:
        committer = Committer(self.target, self.bind(), PendingStore(self.store))
        if self.options.aggregator:  # small files binned and compacted after each commit
            from .compaction import coordinated
            committer = coordinated(committer, self.store)
        return committer

    def restore(self) -> list[CommitReport]:
        """Commit what a dead driver accepted; before any new batch runs."""
        from .committer_service import IDLE_SECONDS, CheckpointLock, ask_to_stop
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
        reports = self.committer().restore()
        for r in reports:
            log.info("restored pending batch %s of %s: snapshot %s", r.identifier, self.commit_user, r.snapshot_id)
            self.remove_staging(r.identifier)
        return reports

    def staging_dir(self, batch_id: int) -> str:
        # Deterministic per (query, batch): a replay reuses and finally removes the
        # directory of the attempt that died, with whatever that attempt left there.
        token = hashlib.sha256(self.bind().encode()).hexdigest()[:12]
        return f"{self.target.lakesink_dir()}/staging/{token}-b{batch_id}"

    def commit_batch(self, batch_id: int, files: Sequence[StagedFile]) -> CommitReport:
        try:
            report = self.committer().commit(batch_id, files, None, {"lakesink.batch-id": str(batch_id)})
        except CommitStateUnknownError:
            raise  # the pending state still needs the staged files: keep them for the retry
        except BaseException:
            self.remove_staging(batch_id)
            raise
        self.remove_staging(batch_id)
        return report

    def accept_batch(self, batch_id: int, files: Sequence[StagedFile]) -> str:
        """Pipelined: make the batch durable for the background committer; it is acknowledged
        to the engine as soon as this returns. Returns what happened: accepted, skipped
        (a replay of a batch in the table) or already-accepted (a replay of a batch a dead
        driver accepted: that attempt's files are committed, this one's go)."""
        from .committer_service import raise_recorded_error
        raise_recorded_error(self.store)
        committer = self.committer()
        if committer.is_committed(batch_id):
            self.commit_batch(batch_id, files)  # skipped as a replay, its files removed
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

    def abort_batch(self, batch_id: int, files: Sequence[StagedFile]) -> None:
        if PendingStore(self.store).get(batch_id) is not None:
            # Another attempt of this batch was accepted (pipelined) and is being committed
            # from the same staging directory: remove only this attempt's files.
            self.target.discard(files, include_placed=False)
            return
        try:
            self.committer().abort(files, batch_id)
        finally:
            self.remove_staging(batch_id)

    def remove_staging(self, batch_id: int) -> None:
        self.target.file_io.delete_directory_quietly(self.staging_dir(batch_id))

    def task_layout(self) -> TableLayout:
        return self.layout
