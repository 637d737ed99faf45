"""Compaction wired into the sinks: one coordinator per checkpoint and process.

Which aggregator a table gets (`small_files` for append tables, `keyed_compaction` for
primary-key tables), the streaming committer with a round after each commit
(`coordinated`), rounds that trail the commit where Paimon lets them
(`compacts_in_background`), and the round after a batch job (`aggregate_batch`).
Details: docs/compaction.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from ... import options as registry
from ... import storage
from ...protocol.aggregator import Aggregator
from ...protocol.committer import Committer
from ...protocol.coordinated import CoordinatedCommitter
from ...protocol.coordinator import Coordinator, FilesWritten
from ...protocol.state import StateStore
from ...protocol.target import CommitReport
from .target import PaimonCompactionTarget
from ..files.datafiles import StagedFile
from ..keyed.layout import KeyedSpec
from .keyed_aggregator import KeyedCompactionAggregator
from .rewrite import Rewriter
from .append_aggregator import SmallFileAggregator
from ..commit.target import PaimonTarget

log = logging.getLogger(__name__)

_coordinators: dict[tuple, Coordinator] = {}
_coordinators_lock = threading.Lock()


def new_coordinator(target: PaimonTarget, commit_user: str, store: StateStore | None,
                    aggregator: Aggregator | None = None, distributed: Rewriter | None = None,
                    in_place: bool | None = None) -> Coordinator:
    """`in_place`: the write's `write.in-place` as decided (None: `auto`, by the store)."""
    compaction = PaimonCompactionTarget(target)
    table = target.table_or_create()
    staging = compaction.staging_dir(commit_user + ".compact")
    if aggregator is None and table.is_primary_key_table:
        aggregator = KeyedCompactionAggregator(target, staging, distributed=distributed, in_place=in_place)
    aggregator = aggregator or SmallFileAggregator(table, staging, fs_options=target.fs_options,
                                                   distributed=distributed, in_place=in_place)
    return Coordinator(aggregator, compaction, commit_user, store)


def coordinated(committer: Committer, store: StateStore, distributed: Rewriter | None = None,
                in_place: bool | None = None, background: bool = False, round_gate=None) -> Committer:
    """The streaming committer with the aggregator after each commit (a `CoordinatedCommitter`):
    one coordinator per checkpoint and process, restored from the checkpoint on first use. An
    append table with `write-only` keeps the plain committer.

    `background`: the caller's process outlives its checkpoints (a driver running the stream),
    so rounds of a primary-key table may run after the commit returns, while the next batch
    is written (`compacts_in_background`), after `round_gate(checkpoint)` returns (the engine's
    wait for the batch to be over: `Coordinator.round_gate`)."""
    table = committer.target.table()
    if table is not None and not table.is_primary_key_table and not compacts_appends(table):
        return committer  # write-only: Paimon's writers never compact such a table
    key = (store.directory, committer.commit_user, committer.target.describe())
    with _coordinators_lock:
        coordinator = _coordinators.get(key)
        if coordinator is None:
            coordinator = new_coordinator(committer.target, committer.commit_user, store, distributed=distributed,
                                          in_place=in_place)
            coordinator.background = background and compacts_in_background(committer.target.table())
            coordinator.round_gate = round_gate
            coordinator.restore()
            _coordinators[key] = coordinator
    return CoordinatedCommitter(committer, coordinator)


def compacts_in_background(table) -> bool:
    """Whether a primary-key table's compaction may trail its commits, as Paimon's writers let
    it: not when readers need the round's result as the commit lands, which Paimon waits for
    (`lookup-wait`): the changelog of the `lookup` and `full-compaction` producers, and
    `first-row` tables, whose level-0 files readers skip."""
    if table is None or not table.is_primary_key_table:
        return False
    spec = KeyedSpec.of_table(table)
    return spec.merge_engine != "first-row" and spec.changelog_producer not in ("lookup", "full-compaction")


def _local_coordinators(checkpoint: str) -> list[Coordinator]:
    prefix = storage.normalize(checkpoint).rstrip("/") + "/"
    with _coordinators_lock:
        return [c for (directory, _, _), c in _coordinators.items()
                if storage.normalize(directory).startswith(prefix)]


def wait_for_rounds(checkpoint: str, timeout: float | None = None) -> bool:
    """Wait for the background compaction rounds of this process's streams into `checkpoint`."""
    return all(c.wait(timeout) for c in _local_coordinators(checkpoint))


def rounds_run_here(checkpoint: str) -> bool:
    """Whether this process runs `checkpoint`'s compaction rounds (a stream's driver)."""
    return bool(_local_coordinators(checkpoint))


def compacts_appends(table) -> bool:
    """Whether the aggregator may compact this append table: not with Paimon's `write-only`."""
    return not registry.table_value(registry.table_options_of(table), "write-only")


def aggregate_batch(target: PaimonTarget, commit_user: str, report: CommitReport,
                    files: Sequence[StagedFile], forget_user: bool = False,
                    distributed: Rewriter | None = None, in_place: bool | None = None) -> None:
    """After a batch job's append: compact the small files of the partitions it wrote, its own
    and those earlier jobs or other writers left (the aggregator picks them from the table's
    latest snapshot), as Paimon's append compaction does: a partition's small files are merged
    once they fill a file of `target-file-size`, or once `compaction.min.file-num` of them
    gathered. So repeated small jobs keep the file count bounded without rewriting a growing
    file every time. A round that loses a conflict (another commit removed an input) is planned
    again on the new state (`Coordinator.ROUND_ATTEMPTS`). Failures are logged and reported,
    never raised: the job's rows already landed."""
    if not report.committed or not files:
        return
    try:
        table = target.table()  # as its commit just checked it
        if table is None or not compacts_appends(table):
            return
        coordinator = new_coordinator(target, commit_user, None, distributed=distributed, in_place=in_place)
        coordinator.send(FilesWritten(report.identifier, list(files)))
        report.extra["aggregation"] = coordinator.commit_finished(report.identifier, landed=True)
        if forget_user:
            target.forget_commit_user(coordinator.compact_user)
    except Exception as exc:  # noqa: BLE001
        log.warning("aggregation after batch commit %s failed: %s", report.snapshot_id, exc, exc_info=True)
        report.extra["aggregation_error"] = f"{type(exc).__name__}: {exc}"

