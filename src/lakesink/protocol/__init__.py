"""The engine-neutral commit protocol: committables, committer, durable state.

Nothing here imports Spark or pypaimon, even through `storage` (tests/unit/test_light_imports.py). Connectors implement `CommitTarget`;
engine bindings drive a `Committer` (or `PipelinedCommitter`).
"""

from .committer import Committer
from .pipelined import PipelinedCommitter
from .state import PendingCheckpoint, PendingStore, StateStore
from .target import CommitReport, CommitTarget, Overwrite

__all__ = ["Committer", "PipelinedCommitter", "PendingCheckpoint", "PendingStore", "StateStore",
           "CommitReport", "CommitTarget", "Overwrite"]
