"""One streaming query's sink into a database table: commit user, pending batches, per-batch tokens.

State in `<checkpoint>/lakesink/` (no credentials, no pickle):

* `jdbc-sink.json` — binds the checkpoint to one table (`"table":
  "postgresql://host:5432/db/public.orders"`) and one commit user (derived from the query id
  Spark keeps in `<checkpoint>/metadata`, stable across restarts): `protocol.binding`, format
  `lakesink.jdbc-stream-sink`. The checkpoint is reached with the writer's storage options
  (`fs.s3.*`, ...).
* `pending-<batch>.json` — a batch accepted but not yet committed (`protocol.state`),
  committed by `restore()` before any new batch.

Each micro-batch is one checkpoint: identifier = batch id. Its staging tables
are named from a token derived from (commit user, batch id), so a replayed
batch finds and drops what a dead attempt left.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence

from ..errors import CommitStateUnknownError, ConfigurationError
from ..protocol import CommitReport, Committer, PendingStore, StateStore
from ..protocol.binding import CheckpointBinding, sink_state
from .job import JdbcJob
from .options import JdbcOptions
from .target import JdbcTarget, StagedRows

log = logging.getLogger(__name__)
SINK_FILE, SINK_FORMAT = "jdbc-sink.json", "lakesink.jdbc-stream-sink"  # the binding (protocol.binding)


class JdbcStreamSink:
    """Plain data (Spark pickles it into tasks); the state store and connections are made where used."""

    def __init__(self, options: JdbcOptions, schema, checkpoint: str | None = None,
                 query_id: Callable[[], str | None] = lambda: None):
        """`query_id` gives the engine's stable id of the query (None until it is known)."""
        checkpoint = checkpoint or options.checkpoint
        if not checkpoint:
            raise ConfigurationError("No checkpoint location: exactly-once streaming needs one. Set "
                                     ".option('checkpointLocation', '/path/to/chk') on the writeStream.")
        self.checkpoint = checkpoint.rstrip("/")
        self.explicit_user = options.commit_user
        self.fs_options = dict(options.fs_options)  # to reach the checkpoint (fs.s3.*, ...)
        self.query_id = query_id
        self.job = JdbcJob.plan(options, schema, streaming=True)
        self.commit_user: str | None = self._check_binding()
        if self.commit_user is None and (self.explicit_user or self.query_id()):
            self.bind()

    @property
    def store(self) -> StateStore:
        return sink_state(self.checkpoint, self.fs_options)

    def describe_table(self) -> str:
        return f"{self.job.db.describe()}/{self.job.table}"

    def _binding(self) -> CheckpointBinding:
        return CheckpointBinding(self.store, self.checkpoint, SINK_FILE, SINK_FORMAT, self.describe_table())

    def _check_binding(self) -> str | None:
        return self._binding().commit_user(self.explicit_user)

    def bind(self) -> str:
        """Bind the checkpoint to this table and a commit user, once (at the first batch at the latest)."""
        if self.commit_user is None:
            self.commit_user = self._binding().bind(self.explicit_user, self.query_id)
        return self.commit_user

    def token(self, batch_id: int) -> str:
        return f"{hashlib.sha256(self.bind().encode()).hexdigest()[:12]}b{batch_id}"

    def committer(self, target: JdbcTarget) -> Committer:
        return Committer(target, self.bind(), PendingStore(self.store))

    def is_committed(self, batch_id: int) -> bool:
        target = self.job.target()
        try:
            return self.committer(target).is_committed(batch_id)
        finally:
            target.close()

    def restore(self) -> list[CommitReport]:
        """Commit what a dead driver accepted, before any new batch."""
        if self.commit_user is None:
            return []  # never bound: nothing can be pending
        target = self.job.target()
        try:
            reports = self.committer(target).restore()
            for r in reports:
                log.info("restored pending batch %s of %s", r.identifier, self.commit_user)
            return reports
        finally:
            target.close()

    def commit_batch(self, batch_id: int, staged: Sequence[StagedRows]) -> CommitReport:
        target = self.job.target()
        try:
            report = self.committer(target).commit(batch_id, staged, None, {"lakesink.batch-id": str(batch_id)})
            if not report.committed:  # skipped or landed by another attempt: ours were not consumed
                _quietly(target.discard_jobs, [self.token(batch_id)])
            return report
        except CommitStateUnknownError:
            raise  # the pending batch still needs its staging tables
        except BaseException:
            _quietly(target.discard_jobs, [self.token(batch_id)])
            raise
        finally:
            target.close()

    def skip_replay(self, batch_id: int) -> CommitReport:
        """A batch already in the table: drop whatever an attempt of it staged; write nothing."""
        target = self.job.target()
        try:
            dropped = target.discard_jobs([self.token(batch_id)])
            PendingStore(self.store).remove(batch_id)
        finally:
            target.close()
        return CommitReport(self.bind(), batch_id, skipped_replay=True, files_discarded=dropped)

    def abort_batch(self, batch_id: int, staged: Sequence[StagedRows]) -> None:
        target = self.job.target()
        try:
            self.committer(target).abort(staged, batch_id)
        finally:
            _quietly(target.discard_jobs, [self.token(batch_id)])
            target.close()


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - the next commit of the batch or clean_staging removes them
        pass
