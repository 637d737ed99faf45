"""What the commit protocol needs from a table format (the connector's side).

The protocol never looks inside a committable: it asks the target to commit,
discard or (de)serialise them. A Paimon connector implements this; tests use an
in-memory one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

C = TypeVar("C")  # a committable: metadata of written-but-invisible files


@dataclass(frozen=True)
class Overwrite:
    """Replace data instead of appending.

    `partitions=None` replaces the whole table; `dynamic=True` replaces only the
    partitions the committables touch; a list of dicts replaces those partitions.
    """

    dynamic: bool = False
    partitions: tuple[dict[str, Any], ...] | None = None

    def to_json(self) -> dict:
        return {"dynamic": self.dynamic,
                "partitions": list(self.partitions) if self.partitions is not None else None}

    @classmethod
    def from_json(cls, data: dict | None) -> Overwrite | None:
        if data is None:
            return None
        parts = data.get("partitions")
        return cls(dynamic=bool(data.get("dynamic")), partitions=tuple(parts) if parts is not None else None)


@dataclass
class CommitReport:
    """What one checkpoint's commit did. Returned to callers and kept in snapshot properties."""

    commit_user: str
    identifier: int
    snapshot_id: int | None = None
    commit_kind: str | None = None
    skipped_replay: bool = False
    restored: bool = False
    attempts: int = 1
    duration_ms: float = 0.0
    files_added: int = 0
    rows_added: int = 0
    bytes_added: int = 0
    files_removed: int = 0
    rows_removed: int = 0
    bytes_removed: int = 0
    files_discarded: int = 0
    # Row-level changes (delete / update / merge): rows the statement inserted, updated, deleted.
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def committed(self) -> bool:
        return self.snapshot_id is not None and not self.skipped_replay


class CommitTarget(ABC, Generic[C]):
    """A table that accepts committables in one atomic, identifiable commit."""

    @abstractmethod
    def last_committed(self, commit_user: str) -> int | None:
        """The highest identifier `commit_user` has landed in the table, or None.

        Must stay right however many snapshots others added or expired since.
        """

    @abstractmethod
    def commit(self, commit_user: str, identifier: int, committables: Sequence[C],
               overwrite: Overwrite | None = None,
               properties: dict[str, str] | None = None) -> CommitReport:
        """Make all committables visible in one snapshot tagged (commit_user, identifier).

        Raise `CommitFailedError` when it definitely did not land; any other
        exception means the outcome is unknown.
        """

    @abstractmethod
    def discard(self, committables: Sequence[C], include_placed: bool = True) -> int:
        """Delete the files of committables no snapshot references; return how many.

        With `include_placed=False` only files still in staging go: used for a
        replay, whose identity already landed, so nothing at a table path may be
        touched.
        """

    @abstractmethod
    def missing_files(self, committables: Sequence[C]) -> list[str]:
        """Files a restore would need that no longer exist."""

    @abstractmethod
    def encode(self, committable: C) -> dict:
        """A JSON-able form, for durable committer state."""

    @abstractmethod
    def decode(self, data: dict) -> C:
        """Inverse of `encode`."""

    def describe(self) -> str:
        """A stable name of the table, to bind checkpoints to it."""
        return repr(self)

    def found_landed(self, commit_user: str, identifier: int) -> None:
        """A checkpoint found already committed (a replay, a restore, a commit that raised but
        landed): a target whose derived state follows each commit (Iceberg metadata) brings it up
        to date here, since its commit may have died before doing so. Never raises."""

    # Targets whose commits check for conflicts from the table version a checkpoint was
    # planned on keep that version with the checkpoint's pending state, so a checkpoint
    # restored after a crash is checked as it would have been (`PendingCheckpoint.check_from`).
    def check_from(self, identifier: int) -> int | None:
        """The table version checkpoint `identifier` was planned on (None: no such check)."""
        return None

    def restore_check_from(self, identifier: int, version: int | None) -> None:
        """Before a restored checkpoint's commit: the version its pending state kept (None
        when the state predates the field)."""
