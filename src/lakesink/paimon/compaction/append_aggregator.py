"""No small files in append tables: the aggregator that rewrites them into target-size files.

Small files are committed normally (an APPEND snapshot: rows visible at once,
exactly-once unchanged). The aggregator then bins the small files of each
(partition, bucket) up to the table's `target-file-size`, across checkpoints
when one is not enough, and rewrites each full bin as one Parquet file; the
coordinator commits the swap as a COMPACT snapshot right after the append
(`compaction_target`). In a row-tracking table a bin is a run of files whose row ids follow
each other, so the rewritten file keeps every row's `_ROW_ID` (`paimon.files.lineage`). In a
table with deletion vectors a rewrite leaves out the rows they mark, and the commit drops the
vectors of the files it removes (`target`).
Details: docs/compaction.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ... import options as registry
from ... import storage
from ...protocol.aggregator import Aggregator, pack_bins
from . import outputs as compact_outputs
from .outputs import InPlace
from .target import live_files
from ..files import deletion_vectors, lineage
from ..files.datafiles import StagedFile, TableLayout, table_path_of
from .rewrite import EXECUTOR_REWRITE_BYTES, RewriteTask, Rewriter, rewrite_on_driver

# A file under 70% of the target is a compaction candidate: Paimon's `compactionFileSize` (a
# rewrite aiming at the target may come out a little short; it must not be picked again).
CARRY_BELOW = 0.7
IDLE_ROUNDS = 3               # a key that got no new file for this many rounds has its rest merged


def target_file_size(table) -> int:
    return table.options.target_file_size(False)


def pick_small_files(files: Sequence[StagedFile], target_size: int, min_file_num: int = 5,
                     max_file_num: int | None = 50, size_of=None, final: bool = False) -> list[list[StagedFile]]:
    """Which small files of one partition (and bucket) to rewrite together, one file per bin:
    Paimon's rule for unaware-bucket append tables (its `AppendCompactCoordinator`).

    Candidates are the files under 70% of `target_size`, smallest first. A bin closes when its
    rewritten size (`size_of`, default the file size) reaches the target, or when it holds
    `max_file_num` files. The rest (less than a target's worth) waits for more files, unless it
    holds `min_file_num` files under half the target: those are merged into one still-small
    file. Files of half a target or more stay out of that merge: two of them fill a bin of their
    own, whereas a merged file that grew through merge after merge would stop at 70% of the
    target, far from it, after being rewritten again and again. `final` (a compaction job,
    a partition nobody writes to any more) merges any rest of two files or more.

    So a partition keeps fewer than `min_file_num` files under half the target and at most one
    between half and 70% of it; every other file is about the target size or larger.
    """
    size_of = size_of or (lambda f: f.file_size)
    small = sorted((f for f in files if f.file_size < target_size * CARRY_BELOW), key=lambda f: f.file_size)
    bins, rest = pack_bins(small, size_of, target_size, None, max_file_num)
    if not final:
        rest = [f for f in rest if size_of(f) < target_size / 2]
    if len(rest) >= (2 if final else max(2, min_file_num)):
        bins.append(rest)
    return bins


def pick_adjacent(files: Sequence[StagedFile], target_size: int, min_file_num: int = 5,
                  max_file_num: int | None = 50, size_of=None, final: bool = False) -> list[list[StagedFile]]:
    """`pick_small_files` for row-tracking tables: a bin is a run of files whose row ids follow
    each other, in id order, so that the rewritten file is one run of ids too (the only layout
    every reader maps back to the same `_ROW_ID`s). Runs are the small files taken in id order,
    broken where ids skip (a file left out, ids of other partitions in between); each run is
    binned as `pick_small_files` bins files, its rest merged under the same conditions (only
    consecutive files under half the target)."""
    size_of = size_of or (lambda f: f.file_size)
    small = sorted((f for f in files if f.file_size < target_size * CARRY_BELOW and f.meta.first_row_id is not None),
                   key=lambda f: f.meta.first_row_id)
    runs: list[list[StagedFile]] = []
    for f in small:
        if runs and lineage.adjacent([runs[-1][-1], f]):
            runs[-1].append(f)
        else:
            runs.append([f])
    bins = []
    for run in runs:
        full, rest = pack_bins(run, size_of, target_size, None, max_file_num)
        bins += full
        if final:
            pieces = [rest]
        else:  # a still-small merge takes only files under half the target, consecutive ones
            pieces, current = [], []
            for f in rest:
                if size_of(f) < target_size / 2:
                    current.append(f)
                else:
                    pieces.append(current)
                    current = []
            pieces.append(current)
        bins += [p for p in pieces if len(p) >= (2 if final else max(2, min_file_num))]
    return bins


class SmallFileAggregator(Aggregator[StagedFile]):
    """Picks small files per (partition, bucket) from the table and rewrites them in target-size files.

    A round works on the live small files of every partition its carried files belong to,
    read from the table's latest snapshot (`inputs`): the files of earlier jobs, of other
    writers and of earlier rounds, not only what this writer just wrote. Which of them are
    rewritten together is `pick_small_files` (Paimon's rule: smallest first, a bin per
    target's worth or per `compaction.max.file-num` files, a rest of `compaction.min.file-num`
    files merged into one). A bin's size is estimated as rows × the bytes per row of rewritten
    files (many small Parquet files carry more overhead and compress worse than one: summing
    their sizes would make files too small), learned from the table's large files and from
    each rewrite. Below the target, files carry over to the next checkpoint; a key that
    received nothing for `IDLE_ROUNDS` rounds (yesterday's partition) has its rest merged.
    `in_place` (None: `auto`, by the store): rewrites write at their table paths. A row-tracking
    table's bins are runs of consecutive row ids (`pick_adjacent`).
    """

    def __init__(self, table, staging_dir: str, target_size: int | None = None,
                 max_small_files: int | None = None, fs_options: dict | None = None,
                 executor_bytes: int = EXECUTOR_REWRITE_BYTES, distributed: Rewriter | None = None,
                 from_table: bool = True, in_place: bool | None = None):
        self.table_path = storage.normalize(str(table.table_path))
        self.in_place = compact_outputs.wanted(self.table_path, in_place)
        self.layout = TableLayout.of(table)
        self.table = table
        self.staging_dir = staging_dir
        self.target_size = int(target_size or target_file_size(table))
        table_options = registry.table_options_of(table)
        self.max_small_files = int(max_small_files or registry.table_value(table_options, "compaction.min.file-num"))
        self.max_file_num = max(2, int(registry.table_value(table_options, "compaction.max.file-num")))
        self.from_table = from_table  # rounds pick from the table's live files (else: the carried ones only)
        self.fs_options = fs_options
        self.executor_bytes = executor_bytes
        self.distributed = distributed  # for volumes from `executor_bytes` on
        self.compression = registry.table_value(registry.table_options_of(table), "file.compression")
        self.tracks_rows = lineage.tracks_rows(table_options)
        self.deletion_vectors = deletion_vectors.enabled(table)
        self._deletions: dict | None = None  # {file name: where its vector lies}, read once a round
        self.bytes_per_row = 0.0   # of rewritten files, learned; 0 = not known yet
        self._flushing = False
        self._seen: dict[str, list] = {}  # repr(key) -> [candidate count last round, idle rounds]

    def pre_aggregate_key(self, f: StagedFile):
        return (tuple(f.partition), f.bucket)

    def carries(self, f: StagedFile) -> bool:
        return f.file_size < self.target_size * CARRY_BELOW and f.meta.schema_id == self.layout.schema_id

    def flush(self) -> None:
        self._flushing = True

    def state(self) -> dict:
        return {"bytes_per_row": self.bytes_per_row, "seen": self._seen}

    def restore_state(self, state: dict) -> None:
        self.bytes_per_row = float(state.get("bytes_per_row", 0.0))
        self._seen = {k: list(v) for k, v in (state.get("seen") or {}).items()}

    def inputs(self, committables: list[StagedFile]) -> list[StagedFile]:
        """The live small files of the carried files' partitions, read from the table: what earlier
        jobs and other writers left there is compacted too, and files someone else compacted or
        overwrote meanwhile are no longer offered (no conflict to lose)."""
        if not self.from_table or not committables:
            return committables
        keys = {self.pre_aggregate_key(c) for c in committables}
        live = [f for f in live_files(self.table) if self.pre_aggregate_key(f) in keys]
        if self.bytes_per_row <= 0:
            self._learn_from(f for f in live if not self.carries(f) and f.meta.schema_id == self.layout.schema_id)
        return [f for f in live if self.carries(f)]

    def plan(self, files: Sequence[StagedFile], key=None) -> tuple[list[list[StagedFile]], list[StagedFile]]:
        """(bins to rewrite, files to keep) for the files of one key."""
        candidates = [f for f in files if self.carries(f)]
        count, idle = self._seen.get(repr(key), [-1, 0])
        idle = idle + 1 if count == len(candidates) else 0
        final = self._flushing or idle >= IDLE_ROUNDS
        # A compaction job (flushing) rewrites everything in target-size files: no cap per bin.
        pick = pick_adjacent if self.tracks_rows else pick_small_files
        bins = pick(candidates, self.target_size, self.max_small_files,
                    None if self._flushing else self.max_file_num, self.estimated_size, final)
        binned = {id(f) for b in bins for f in b}
        self._seen[repr(key)] = [len(candidates) - len(binned) + len(bins), 0 if bins else idle]
        return bins, [f for f in files if id(f) not in binned]

    def aggregate(self, committables: list[StagedFile]) -> list[StagedFile]:
        return self.aggregate_all({None: committables})[None]

    def aggregate_all(self, groups: dict) -> dict:
        self._deletions = None  # the vectors as of this round
        plans = {key: self.plan(files, key) for key, files in groups.items()}
        self._seen = {k: v for k, v in self._seen.items() if k in {repr(key) for key in groups}}
        tasks, owners = [], []
        for key, (bins, _kept) in plans.items():
            for b in bins:
                tasks.append(self.task_for(b))
                owners.append((key, b))
        outputs = self.rewrite(tasks)
        self._learn(owners, outputs)
        result = {key: list(kept) for key, (_bins, kept) in plans.items()}
        for (key, _b), out in zip(owners, outputs):
            result[key].append(out)
        return result

    def task_for(self, files: Sequence[StagedFile]) -> RewriteTask:
        tracked = None
        if self.tracks_rows:
            files = sorted(files, key=lambda f: f.meta.first_row_id)
            if not lineage.adjacent(files):  # never planned so: a rewrite would renumber rows
                raise ValueError("row-tracking compaction of files whose row ids do not follow each other")
            tracked = tuple((f.meta.first_row_id, f.meta.max_sequence_number) for f in files)
        first = files[0]
        paths = tuple(f.staged_path or table_path_of(self.table, f) for f in files)
        deletions = None
        if self.deletion_vectors:
            if self._deletions is None:
                self._deletions = deletion_vectors.Vectors(
                    self.table, self.table.snapshot_manager().get_latest_snapshot()).deletions()
            deletions = tuple(self._deletions.get(f.meta.file_name) for f in files)
        if self.in_place:
            return RewriteTask(paths, tuple(first.partition), first.bucket, None, self.layout, self.compression,
                               self.fs_options, InPlace.of(self.table, self.staging_dir), tracked, deletions)
        return RewriteTask(paths, tuple(first.partition), first.bucket,
                           f"{self.staging_dir}/compact-{uuid.uuid4().hex}.parquet", self.layout,
                           self.compression, self.fs_options, lineage=tracked, deletions=deletions)

    def rewrite(self, tasks: Sequence[RewriteTask]) -> list[StagedFile]:
        if not tasks:
            return []
        if not self.in_place:
            storage.file_io(self.staging_dir, self.fs_options).check_or_mkdirs(self.staging_dir)
        volume = sum(self._input_bytes(t) for t in tasks)
        if self.distributed is not None and volume >= self.executor_bytes and len(tasks) > 1:
            return self.distributed(tasks)
        return rewrite_on_driver(tasks)

    def _input_bytes(self, task: RewriteTask) -> int:
        file_io = storage.file_io(task.inputs[0], task.fs_options)
        return sum(file_io.get_file_size(p) for p in task.inputs)

    def estimated_size(self, f: StagedFile) -> float:
        """What `f` will weigh inside a rewritten file."""
        if self.bytes_per_row <= 0:
            return f.file_size
        return min(f.file_size, f.row_count * self.bytes_per_row)

    def _learn(self, owners, outputs) -> None:
        # Only outputs near the target teach the ratio: a merge of a few tiny files carries more
        # Parquet overhead per row and would make every later target-size bin close too early.
        self._learn_from(o for o in outputs if not self.carries(o))

    def _learn_from(self, files) -> None:
        """Bytes per row of files as large as rewrites make them (a moving average)."""
        files = list(files)
        rows = sum(f.row_count for f in files)
        size = sum(f.file_size for f in files)
        if rows > 0 and size > 0:
            observed = size / rows
            self.bytes_per_row = observed if self.bytes_per_row <= 0 else 0.7 * self.bytes_per_row + 0.3 * observed
