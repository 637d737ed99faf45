"""A stream's checkpoint bound to one table and one commit user, once: the sinks of every connector.

The state of a stream's sink lives in `<checkpoint>/lakesink/` (`sink_state`), reached with the
same file-system options as the table (a checkpoint on S3 whose credentials are only options).
One document there binds the checkpoint:

    {"format": "<the connector's format>", "version": 1, "commit_user": "...",
     "table": "<the table, as the connector describes it>", "query_id": "..." | null}

The commit user is the one given, else derived from the engine's query id (stable across
restarts; a random one, kept in the document, without either). The same checkpoint pointed at
another table, or with another explicit commit user, fails before anything is written.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from .. import storage
from ..errors import CheckpointMismatchError
from .state import StateStore

log = logging.getLogger(__name__)

BINDING_VERSION = 1


def sink_state(checkpoint: str, fs_options: Mapping[str, str] | None = None) -> StateStore:
    """The state store of a stream's sink in `checkpoint`, reached with `fs_options`."""
    return StateStore(f"{checkpoint.rstrip('/')}/lakesink", dict(fs_options or {}) or None)


class CheckpointBinding:
    """The binding document `name` (of format `format`) in `store`, of the checkpoint `checkpoint`
    written into `table`."""

    def __init__(self, store: StateStore, checkpoint: str, name: str, format: str, table: str):
        self.store, self.checkpoint, self.name, self.format, self.table = store, checkpoint, name, format, table
        self.kind = storage.DocumentKind(format, BINDING_VERSION, "lakesink stream sink binding",
                                         "Use a new checkpoint location.")

    def commit_user(self, explicit_user: str | None) -> str | None:
        """The commit user the checkpoint is bound to, None when unbound; fails for another table
        or another explicit commit user."""
        binding = self.store.read_document(self.name, self.kind)
        if binding is None:
            return None
        if binding["table"] != self.table:
            raise CheckpointMismatchError(
                f"Checkpoint {self.checkpoint} belongs to table {binding['table']}, not {self.table}. "
                "Use a new checkpoint location for another table.")
        if explicit_user and explicit_user != binding["commit_user"]:
            raise CheckpointMismatchError(
                f"Checkpoint {self.checkpoint} was written by commit user {binding['commit_user']!r}; "
                f"commit.user={explicit_user!r} would make replays unrecognisable.")
        return binding["commit_user"]

    def bind(self, explicit_user: str | None, query_id: Callable[[], str | None]) -> str:
        """Bind the checkpoint to the table and a commit user; returns the commit user."""
        query = query_id()
        if not (explicit_user or query):
            log.warning("no query id in %s/metadata: the commit user is random (kept in %s)",
                        self.checkpoint, self.name)
        user = explicit_user or f"lakesink-stream-{query or uuid.uuid4()}"
        self.store.write_document(self.name, self.kind, commit_user=user, table=self.table, query_id=query)
        return user
