"""No small files: the Paimon aggregator, compaction commits and table compaction planning.

Small files are committed normally (an APPEND snapshot: rows visible at once,
exactly-once unchanged). The aggregator then bins the small files of each
(partition, bucket) up to the table's `target-file-size`, across checkpoints
when one is not enough, rewrites each full bin as one Parquet file and commits
a COMPACT snapshot right after the append: DELETE entries for the files
before, ADD entries for the files after, with Paimon's conflict check (a
compaction conflicts when a file it removes is no longer live). The swap is
one snapshot, so a reader sees the small files or the big one, never both
and never neither. Details: docs/compaction.md.

pypaimon refuses compaction increments in a normal commit; `commit_compact`
drives its commit loop (`_try_commit`, kind COMPACT, conflict detection on)
directly, through the same atomic publication and manifest merging as every
other lakesink commit. Outputs are staged and renamed into the table, or written
in place on object stores (`paimon.compact_outputs`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace

from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.manifest.schema.manifest_entry import ManifestEntry
from pypaimon.table.row.generic_row import GenericRow

from .. import options as registry
from .. import storage
from ..errors import CommitConflictError
from ..protocol import crashpoints
from ..protocol.aggregator import Aggregator, pack_bins
from ..protocol.committer import Committer
from ..protocol.coordinated import CoordinatedCommitter
from ..protocol.coordinator import CompactionTarget, Coordinator, FilesWritten
from ..protocol.state import StateStore
from ..protocol.target import CommitReport
from . import compact_outputs, identity, lsm
from .commit import new_file_store_commit
from .compact_outputs import InPlace
from .datafiles import StagedFile, TableLayout, place, table_path_of
from .keyed import KeyedSpec
from .rewrite import RewriteTask, Rewriter, rewrite_on_driver
from .target import PaimonTarget

log = logging.getLogger(__name__)

_ADD, _DELETE = 0, 1
# A file under 70% of the target is a compaction candidate: Paimon's `compactionFileSize` (a
# rewrite aiming at the target may come out a little short; it must not be picked again).
CARRY_BELOW = 0.7
IDLE_ROUNDS = 3               # a key that got no new file for this many rounds has its rest merged
EXECUTOR_REWRITE_BYTES = 256 * 1024 * 1024  # from this volume on, rewrite distributed (an engine's executors)


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


# -- the aggregator -------------------------------------------------------------------

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
    `in_place` (None: `auto`, by the store): rewrites write at their table paths.
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
        bins = pick_small_files(candidates, self.target_size, self.max_small_files,
                                None if self._flushing else self.max_file_num, self.estimated_size, final)
        binned = {id(f) for b in bins for f in b}
        self._seen[repr(key)] = [len(candidates) - len(binned) + len(bins), 0 if bins else idle]
        return bins, [f for f in files if id(f) not in binned]

    def aggregate(self, committables: list[StagedFile]) -> list[StagedFile]:
        return self.aggregate_all({None: committables})[None]

    def aggregate_all(self, groups: dict) -> dict:
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
        first = files[0]
        paths = tuple(f.staged_path or table_path_of(self.table, f) for f in files)
        if self.in_place:
            return RewriteTask(paths, tuple(first.partition), first.bucket, None, self.layout, self.compression,
                               self.fs_options, InPlace.of(self.table, self.staging_dir))
        return RewriteTask(paths, tuple(first.partition), first.bucket,
                           f"{self.staging_dir}/compact-{uuid.uuid4().hex}.parquet", self.layout,
                           self.compression, self.fs_options)

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


# -- primary-key tables: full compaction of buckets ----------------------------------------

class KeyedCompactionAggregator(Aggregator[StagedFile]):
    """Full compaction of primary-key buckets (see `lsm`), as the coordinator's aggregator.

    Level-0 files are what it carries: they tell which buckets got new sorted runs. A round
    works on every live file of those buckets, read from the table, and compacts in each
    bucket the runs Paimon's universal compaction picks (`lsm.LsmOptions.pick`: size
    amplification, size ratio, `num-sorted-run.compaction-trigger`); with `force` (as
    `lakesink.compact` does) every bucket not yet fully compacted is fully compacted. A
    bucket holding files of an older schema is left alone.
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
        self.refresh()

    def refresh(self) -> None:
        self.table = self.target.table(refresh=True)
        lsm.check_compactable(self.table)
        self.layout = TableLayout.of(self.table)
        self.spec = KeyedSpec.of_table(self.table)
        self.lsm = lsm.LsmOptions.of_table(self.table)
        if self.target_size:
            self.lsm = replace(self.lsm, target_size=int(self.target_size))

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

    def unit(self, files: Sequence[StagedFile]) -> lsm.CompactUnit | None:
        """The runs to merge: everything when forced (`lakesink.compact`), else Paimon's pick."""
        if self.force or self.full_round:
            return None if self.lsm.fully_compacted(files) else self.lsm.full(files)
        return self.lsm.pick(files)

    def task_for(self, files: Sequence[StagedFile], unit: lsm.CompactUnit | None = None) -> lsm.KeyedCompactTask:
        return lsm.task_for(files, lambda f: table_path_of(self.table, f), self.staging_dir, self.layout,
                            self.spec, self.lsm, self.target.fs_options, unit,
                            InPlace.of(self.table, self.staging_dir) if self.in_place else None)

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
    (Paimon's writers do, unless `write-only`)."""
    return bool(primary_keys) and not registry.table_value(table_options, "write-only")


# -- compaction commits -----------------------------------------------------------------

def _entry(table, kind: int, f: StagedFile) -> ManifestEntry:
    return ManifestEntry(kind=kind, partition=GenericRow(list(f.partition), table.partition_keys_fields),
                         bucket=f.bucket, total_buckets=table.total_buckets, file=f.meta)


def live_files(table, partitions: Sequence[dict] | None = None) -> list[StagedFile]:
    """The data files the latest snapshot holds (optionally of some partitions only)."""
    from .maintenance import live_entries
    from pypaimon.manifest.schema.file_entry import FileEntry

    wanted = None
    if partitions is not None:
        wanted = [tuple(_partition_value(table, k, p.get(k)) for k in table.partition_keys) for p in partitions]
    out = []
    for e in FileEntry.merge_entries(live_entries(table)):
        if e.kind != _ADD:
            continue
        values = tuple(e.partition.values)
        if wanted is not None and values not in wanted:
            continue
        out.append(StagedFile(values, e.bucket, e.file, None))
    return out


def _partition_value(table, key: str, value):
    """A partition value as the manifests hold it (the user may give '2024-01-01' for a DATE)."""
    if value is None or not isinstance(value, str):
        return value
    field = next(f for f in table.partition_keys_fields if f.name == key)
    type_name = str(field.type).upper()
    try:
        if type_name.startswith(("INT", "BIGINT", "SMALLINT", "TINYINT")):
            return int(value)
        if type_name.startswith("DATE"):
            import datetime as dt
            return dt.date.fromisoformat(value)
        if type_name.startswith("BOOLEAN"):
            return value.lower() == "true"
    except ValueError:
        pass
    return value


class PaimonCompactionTarget(CompactionTarget[StagedFile]):
    """Compaction commits into one Paimon table, with lakesink's commit identity markers."""

    def __init__(self, target: PaimonTarget):
        self.target = target
        # Compact users whose intents name no file a snapshot took (paimon.compact_outputs).
        self._swept: set[str] = set()

    def identity(self, f: StagedFile) -> str:
        return f.meta.file_name

    def encode(self, f: StagedFile) -> dict:
        return self.target.encode(f)

    def decode(self, data: dict) -> StagedFile:
        return self.target.decode(data)

    def as_committed(self, f: StagedFile) -> StagedFile:
        return f if f.staged_path is None else replace(f, staged_path=None)

    def last_committed(self, commit_user: str) -> int | None:
        return self.target.last_committed(commit_user)

    def staging_dir(self, compact_user: str) -> str:
        token = hashlib.sha256(compact_user.encode()).hexdigest()[:12]
        return f"{self.target.lakesink_dir()}/staging/{token}-compact"

    def commit_compaction(self, commit_user: str, identifier: int, replaced: Sequence[StagedFile],
                          new: Sequence[StagedFile], properties: dict[str, str] | None = None) -> CommitReport:
        started = time.perf_counter()
        table = self.target.table(refresh=True)
        identity.before_commit(table.file_io, self.target.path, commit_user,
                               table.snapshot_manager().get_latest_snapshot())
        place(table, list(new))
        entries = ([_entry(table, _DELETE, f) for f in replaced]
                   + [_entry(table, _ADD, f) for f in new if not f.changelog])
        changelog = [_entry(table, _ADD, f) for f in new if f.changelog]  # lookup / full-compaction producers
        props = {"lakesink.files-removed": str(len(replaced)), "lakesink.files-added": str(len(new)),
                 "lakesink.rows-rewritten": str(sum(f.row_count for f in new))}
        props.update(properties or {})
        commit = new_file_store_commit(table, commit_user)
        try:
            commit._try_commit(commit_kind="COMPACT", commit_identifier=identifier,
                               commit_entries_plan=lambda _snapshot: entries, detect_conflicts=True,
                               allow_rollback=False, snapshot_properties=props, changelog_entries=changelog)
        except CommitConflictError as exc:
            exc.identifier = identifier
            raise
        finally:
            commit.close()
        crashpoints.reached("after-compact")
        snapshot = self.target.committed_snapshot(commit_user, identifier)
        identity.after_commit(table.file_io, self.target.path, commit_user, identifier,
                              snapshot.id if snapshot else None)
        if compact_outputs.in_place_outputs(new):  # what failed attempts wrote in place goes
            swept = compact_outputs.after_commit(self.target, self.staging_dir(commit_user),
                                                 {f.meta.file_name for f in new})
            (self._swept.add if swept else self._swept.discard)(commit_user)
        return CommitReport(commit_user, identifier, snapshot_id=snapshot.id if snapshot else None,
                            commit_kind="COMPACT", files_added=len(new),
                            rows_added=sum(f.row_count for f in new), bytes_added=sum(f.file_size for f in new),
                            files_removed=len(replaced), rows_removed=sum(f.row_count for f in replaced),
                            bytes_removed=sum(f.file_size for f in replaced),
                            duration_ms=(time.perf_counter() - started) * 1000)

    def discard(self, committables: Sequence[StagedFile]) -> int:
        return self.target.discard(committables)

    def before_round(self, compact_user: str) -> None:
        """Before a plan writes anything: once, and after a failed removal, remove what the intents
        of earlier compactions name and no snapshot took (their commit may have died first)."""
        if compact_user not in self._swept:
            compact_outputs.sweep(self.target, self.staging_dir(compact_user), compact_user)
            self._swept.add(compact_user)

    def missing_files(self, committables: Sequence[StagedFile]) -> list[str]:
        placed = [f for f in committables if f.staged_path is None]  # staged ones: `place` checks
        return self.target.missing_files(placed) if placed else []

    def live(self, committables: Sequence[StagedFile]) -> list[StagedFile]:
        table = self.target.table(refresh=True)
        if table is None:
            return []
        names = {f.meta.file_name for f in live_files(table)}
        return [f for f in committables if f.meta.file_name in names]

    def committed_since(self, commit_user: str, identifier: int | None,
                        limit: int = 1000) -> list[tuple[int, list[StagedFile]]]:
        table = self.target.table(refresh=True)
        if table is None:
            return []
        manager = table.snapshot_manager()
        latest = manager.get_latest_snapshot()
        if latest is None:
            return []
        earliest = manager.try_get_earliest_snapshot()
        lists, manifests = ManifestListManager(table), ManifestFileManager(table)
        found = []
        for snapshot_id in range(latest.id, max(earliest.id if earliest else 1, latest.id - limit) - 1, -1):
            snapshot = manager.get_snapshot_by_id(snapshot_id)
            if snapshot is None or snapshot.commit_user != commit_user:
                continue
            if identifier is not None and snapshot.commit_identifier <= identifier:
                break
            files = []
            for meta in lists.read_delta(snapshot):
                for e in manifests.read(meta.file_name, drop_stats=False, file_size=meta.file_size):
                    if e.kind == _ADD:
                        files.append(StagedFile(tuple(e.partition.values), e.bucket, e.file, None))
            found.append((snapshot.commit_identifier, files))
        return list(reversed(found))

    def clean_staging(self, compact_user: str, keep: Sequence[StagedFile]) -> int:
        removed = 0
        if not compact_outputs.in_place_outputs(keep):  # else a compaction in place of unknown outcome
            try:
                removed = compact_outputs.sweep(self.target, self.staging_dir(compact_user), compact_user)
                self._swept.add(compact_user)
            except Exception as exc:  # noqa: BLE001 - the next round sweeps before it writes
                log.warning("%s: could not remove compaction outputs written in place: %s",
                            self.staging_dir(compact_user), exc)
        keep_paths = {storage.normalize(f.staged_path) for f in keep if f.staged_path}
        file_io = self.target.file_io
        for entry in storage.list_dir(self.staging_dir(compact_user), self.target.fs_options):
            if storage.normalize(entry.path) not in keep_paths:
                file_io.delete_quietly(entry.path)
                removed += 1
        return removed


# -- wiring into the sinks ---------------------------------------------------------------

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
                in_place: bool | None = None, background: bool = False,
                before_round: Callable[[int], None] | None = None) -> Committer:
    """The streaming committer with the aggregator after each commit (a `CoordinatedCommitter`):
    one coordinator per checkpoint and process, restored from the checkpoint on first use. An
    append table with `write-only` keeps the plain committer.

    `background`: the caller's process outlives its checkpoints (a driver running the stream),
    so rounds of a primary-key table may run after the commit returns, while the next batch
    is written (`compacts_in_background`); `before_round(checkpoint)` runs first on the round's
    thread (the engine's wait for its own record of the checkpoint)."""
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
            coordinator.before_background_round = before_round
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
    """Whether the aggregator may compact this append table (not with Paimon's `write-only`)."""
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
        table = target.table(refresh=True)
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

