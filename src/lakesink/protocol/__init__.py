"""The engine-neutral commit protocol: committables, committer, durable state.

Nothing here imports Spark or Paimon. Connectors implement `CommitTarget`;
engine bindings drive a `Committer` (or `PipelinedCommitter`).
"""

from .committer import Committer
from .pipelined import PipelinedCommitter
from .state import PendingCheckpoint, PendingStore, StateStore
from .target import CommitReport, CommitTarget, Overwrite

__all__ = ["Committer", "PipelinedCommitter", "PendingCheckpoint", "PendingStore", "StateStore",
           "CommitReport", "CommitTarget", "Overwrite"]
