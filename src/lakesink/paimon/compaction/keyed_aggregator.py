"""Compaction of primary-key tables after their commits: which buckets, which sorted runs.

The coordinator's aggregator for keyed tables: a round takes the buckets that got new
level-0 files, picks in each the runs Paimon's universal compaction would merge
(`lsm_policy.LsmOptions.pick`), merges them (`lsm.KeyedCompactTask`) and hands the swap to the
coordinator, which commits it as a COMPACT snapshot (`compaction_target`).
Details: docs/compaction.md.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from ... import options as registry
from ...protocol.aggregator import Aggregator
from . import outputs as compact_outputs, lsm
from .outputs import InPlace
from .target import live_files
from ..files import deletion_vectors
from ..files.datafiles import StagedFile, TableLayout, table_path_of
from ..keyed.layout import KeyedSpec
from ..keyed.lsm_policy import CompactUnit, LsmOptions, check_compactable
from .rewrite import EXECUTOR_REWRITE_BYTES, Rewriter, rewrite_on_driver
from ..commit.target import PaimonTarget

log = logging.getLogger(__name__)


class KeyedCompactionAggregator(Aggregator[StagedFile]):
    """Full compaction of primary-key buckets (see `lsm`), as the coordinator's aggregator.

    Level-0 files are what it carries: they tell which buckets got new sorted runs. A round
    works on every live file of those buckets, read from the table, and compacts in each
    bucket the runs Paimon's universal compaction picks (`lsm_policy.LsmOptions.pick`: size
    amplification, size ratio, `num-sorted-run.compaction-trigger`); with `force` (as
    `lakesink.compact` does) every bucket not yet fully compacted is fully compacted. A
    bucket holding files of an older schema is left alone.

    In a deletion-vector table the rows the vectors mark are not read, and a bucket already one
    run at the highest level is rewritten when any of its files has a vector (as Paimon's full
    compaction rewrites such files); `applied` keeps, per input file, how many rows its vector
    marked when the rewrite read it, for the commit's check (`PaimonCompactionTarget`).
    """

    merges = True

    def __init__(self, target: PaimonTarget, staging_dir: str, force: bool = False,
                 target_size: int | None = None, executor_bytes: int = EXECUTOR_REWRITE_BYTES,
                 distributed: Rewriter | None = None, in_place: bool | None = None):
        self.target = target
        self.in_place = compact_outputs.wanted(target.path, in_place)  # None: auto, by the store
        self.staging_dir = staging_dir
        self.force = force
        self.target_size = target_size
        self.executor_bytes = executor_bytes
        self.distributed = distributed
        self.skipped: list[tuple] = []  # buckets left alone in the last round (older schemas)
        self.full_round = False         # the round compacts every bucket fully (delta commits)
        self.applied: dict[str, int] = {}  # deletion vectors: {input file name: rows marked when read}
        self.refresh()

    def refresh(self) -> None:
        self.table = self.target.table(refresh=True)
        check_compactable(self.table)
        self.layout = TableLayout.of(self.table)
        self.spec = KeyedSpec.of_table(self.table)
        self.lsm = LsmOptions.of_table(self.table)
        if self.target_size:
            self.lsm = replace(self.lsm, target_size=int(self.target_size))
        self.deletions = None  # deletion-vector tables: {file name: where its vector lies}, as of now
        if deletion_vectors.enabled(self.table):
            self.deletions = deletion_vectors.Vectors(
                self.table, self.table.snapshot_manager().get_latest_snapshot()).deletions()

    def pre_aggregate_key(self, f: StagedFile):
        return (tuple(f.partition), f.bucket)

    def carries(self, f: StagedFile) -> bool:
        return f.meta.level == 0 and not f.changelog

    def inputs(self, committables: list[StagedFile]) -> list[StagedFile]:
        """The live files of the buckets written since the last round; in a full-compaction
        round (`full-compaction.delta-commits`), of every bucket not fully compacted too."""
        self.refresh()
        keys = {self.pre_aggregate_key(c) for c in committables}
        every = self.lsm.full_compaction_every
        self.full_round = every is not None and not self.force and full_compaction_due(self.table, every)
        files = live_files(self.table)
        if self.full_round:
            keys |= {self.pre_aggregate_key(f) for f in files if f.meta.level != self.lsm.max_level}
        return [f for f in files if self.pre_aggregate_key(f) in keys]

    def commit_properties(self) -> dict[str, str]:
        return {FULL_COMPACTION_PROPERTY: "true"} if self.full_round or self.force else {}

    def aggregate(self, committables: list[StagedFile]) -> list[StagedFile]:
        return self.aggregate_all({None: committables})[None]

    def aggregate_all(self, groups: dict) -> dict:
        result = {key: list(files) for key, files in groups.items()}
        keys, tasks = [], []
        self.skipped = []
        units = []
        for key, files in groups.items():
            unit = self.unit(files) if files else None
            if unit is None:
                continue
            if any(f.meta.schema_id != self.layout.schema_id for f in files):
                log.info("bucket %s of %s holds files of an older schema: not compacted", key, self.target.path)
                self.skipped.append(key)
                continue
            keys.append(key)
            units.append(unit)
            tasks.append(self.task_for(files, unit))
        for key, unit, outputs in zip(keys, units, self.rewrite(tasks)):
            picked = {f.meta.file_name for f in unit.files}
            result[key] = list(outputs) + [f for f in groups[key] if f.meta.file_name not in picked]
        return result

    def unit(self, files: Sequence[StagedFile]) -> CompactUnit | None:
        """The runs to merge: everything when forced (`lakesink.compact`), else Paimon's pick."""
        if self.force or self.full_round:
            marked = self.deletions is not None and any(f.meta.file_name in self.deletions for f in files)
            return None if self.lsm.fully_compacted(files) and not marked else self.lsm.full(files)
        return self.lsm.pick(files)

    def task_for(self, files: Sequence[StagedFile], unit: CompactUnit | None = None) -> lsm.KeyedCompactTask:
        if self.deletions is not None:
            for f in (unit.files if unit is not None else files):
                found = self.deletions.get(f.meta.file_name)
                self.applied[f.meta.file_name] = int(found[3] or 0) if found is not None else 0
        return lsm.task_for(files, lambda f: table_path_of(self.table, f), self.staging_dir, self.layout,
                            self.spec, self.lsm, self.target.fs_options, unit,
                            InPlace.of(self.table, self.staging_dir) if self.in_place else None,
                            self.deletions)

    def rewrite(self, tasks: Sequence[lsm.KeyedCompactTask]) -> list[list[StagedFile]]:
        if not tasks:
            return []
        volume = sum(t.input_bytes for t in tasks)
        if self.distributed is not None and volume >= self.executor_bytes and len(tasks) > 1:
            return self.distributed(tasks)
        return rewrite_on_driver(tasks)


FULL_COMPACTION_PROPERTY = "lakesink.full-compaction"  # snapshot property of a full compaction round


def full_compaction_due(table, every: int) -> bool:
    """Whether `every` APPEND commits landed since the last full compaction (a COMPACT snapshot
    marked `lakesink.full-compaction=true`): the table's own history decides, so the count
    survives restarts and holds across batch jobs."""
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    appends, snapshot_id = 0, latest.id if latest is not None else 0
    for _ in range(4 * every + 16):  # compactions interleave with appends: a bounded walk back
        if snapshot_id < 1 or appends >= every:
            break
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:  # expired: as good as a compaction long ago
            break
        if snapshot.commit_kind == "COMPACT" and (snapshot.properties or {}).get(FULL_COMPACTION_PROPERTY) == "true":
            return False
        appends += snapshot.commit_kind in ("APPEND", "OVERWRITE")
        snapshot_id -= 1
    return appends >= every


def compacts_after_commit(table_options: dict, primary_keys) -> bool:
    """Whether writes of a primary-key table compact its buckets after each commit
    (Paimon's writers do, unless `write-only`). Postpone-bucket tables (bucket=-2) never do:
    their rows wait unbucketed for `lakesink.compact` (paimon.compaction.postpone). Deletion-vector
    tables compact inside each commit (`merge_on_write`), never after it."""
    if str(table_options.get("bucket", "")).strip() == "-2":
        return False
    dv = str(table_options.get("deletion-vectors.enabled", "false")).strip().lower() == "true"
    return bool(primary_keys) and not dv and not registry.table_value(table_options, "write-only")
