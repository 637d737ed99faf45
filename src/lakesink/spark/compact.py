"""`lakesink.compact`: rewrite a table's small files on Spark, commit one COMPACT snapshot.

Plan on the driver (the latest snapshot's small files, binned per partition
and bucket up to the target size), rewrite every bin as one file in a Spark
task, then commit "bins' files → rewritten files" as one COMPACT snapshot
with Paimon's conflict check.

Safe beside running writers: appends only add files, so they never conflict
with it. If another compaction (a streaming sink's aggregator, another
`compact`) or an overwrite removed some file it rewrote, the commit conflicts
and nothing lands; the job then rebases: bins whose files are all still live
are committed again with their outputs, the others' outputs are deleted (their
rows are already elsewhere). Rows are never lost or doubled, and the writers
never see an error.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence

from ..errors import CommitConflictError, ConfigurationError, TableNotFoundError, UnsupportedTableError
from ..paimon.commit import intents
from ..paimon.table import tables
from ..paimon.catalog.catalog import resolve
from ..paimon.compaction.target import PaimonCompactionTarget, live_files
from ..paimon.compaction.keyed_aggregator import KeyedCompactionAggregator
from ..paimon.compaction.rewrite import rewrite_on_driver
from ..paimon.compaction.append_aggregator import SmallFileAggregator
from ..paimon.keyed.rules import POSTPONE_BUCKET
from ..paimon.commit.target import PaimonTarget
from ..protocol.aggregator import group_by_key
from ..protocol.target import CommitReport
from .catalog import resolve_for
from .rewrite import rewrite_on_spark
from .session import is_connect

log = logging.getLogger(__name__)
PATH_NAME = "lakesink.compact"

ProgressFn = Callable[[int, int], None]


def compact(spark, path: str, partitions: Sequence[Mapping[str, object]] | None = None,
            target_size: int | str | None = None, *, progress: bool | ProgressFn = True,
            max_attempts: int = 5, options: Mapping[str, str] | None = None,
            full: bool = True) -> CommitReport:
    """Rewrite the small files of the Paimon table at `path` into one COMPACT snapshot.

    Primary-key tables: a full compaction of every bucket (of `partitions`) not yet fully
    compacted, each bucket merged into one sorted run at the highest level, deleted keys gone
    (`paimon.compaction.lsm`); with deletion vectors, the rows they mark left out and the
    rewritten files' vectors dropped in the same snapshot; `full=False` compacts only the
    buckets whose sorted runs pass `num-sorted-run.compaction-trigger`, as writers do after
    their commits.

    >>> report = lakesink.compact(spark, "/data/wh/db.db/orders",
    ...                           partitions=[{"dt": "2024-05-01"}], target_size="128 mb")  # doctest: +SKIP
    >>> report.files_removed, report.files_added                                           # doctest: +SKIP

    `partitions` limits the job to some partitions (values as strings or typed);
    `target_size` defaults to the table's `target-file-size`. `progress=True`
    shows a progress bar on stderr; a callable `(done, total)` gets the counts
    instead. Without a SparkSession (`spark=None`) the rewrite runs on the driver.
    Returns the commit's report (`snapshot_id` None when nothing was small).
    """
    size = _size(target_size)
    if max_attempts < 1:
        raise ConfigurationError(f"max_attempts must be at least 1, got {max_attempts}")
    resolved = resolve_for(spark, path) if spark is not None else resolve(path, None)
    # Option branch: the branch's snapshots are compacted (main's untouched).
    branch = next((str(v) for k, v in (options or {}).items() if str(k).lower() == "branch"), None)
    fs_options = resolved.with_fs_options({k: v for k, v in (options or {}).items() if str(k).lower() != "branch"})
    target = PaimonTarget(resolved.path, fs_options=fs_options or None, branch=branch)
    table = target.table()
    if table is None:
        raise TableNotFoundError(f"Table {target.path} does not exist: nothing to compact.", table=target.path)
    if partitions is not None:
        _check_partitions(table, partitions)
    # write.in-place among the options: auto (by the store), or forced either way
    in_place = intents.in_place(target.path, str((options or {}).get("write.in-place", "auto")))
    if table.is_primary_key_table and table.total_buckets == POSTPONE_BUCKET:
        return _compact_postpone(spark, target, partitions, size, progress, max_attempts, in_place)
    if table.is_primary_key_table:
        return _compact_keyed(spark, target, partitions, size, full, progress, max_attempts, in_place)
    tables.check_writable(table, PATH_NAME)
    compaction = PaimonCompactionTarget(target)
    user = f"lakesink-compact-{uuid.uuid4()}"
    aggregator = SmallFileAggregator(table, compaction.staging_dir(user), target_size=size,
                                     fs_options=target.fs_options, in_place=in_place)
    aggregator.flush()  # a job compacts partial bins too: there is no later checkpoint
    conflicts = 0
    try:
        with _progress_bar(progress) as on_progress:
            bins = _plan(aggregator, live_files(table, partitions))
            if not bins:
                return CommitReport(user, 0, extra={"bins": 0})
            tasks = [aggregator.task_for(b) for b in bins]
            outputs = (rewrite_on_spark(spark, tasks, on_progress) if spark is not None and not is_connect(spark)
                       else rewrite_on_driver(tasks))
            done = {i: (b, [o]) for i, (b, o) in enumerate(zip(bins, outputs))}
            for attempt in range(1, max_attempts + 1):
                try:
                    report = compaction.commit_compaction(user, attempt, *_replaced_and_new(done),
                                                          {"lakesink.compaction-job": "true"})
                    report.attempts = attempt
                    report.extra.update(bins=len(done), conflicts=conflicts)
                    return report
                except CommitConflictError as exc:
                    conflicts += 1
                    log.info("compaction of %s conflicts (attempt %d): %s; rebasing", target.path, attempt, exc)
                    _rebase(compaction, done)
                    if not done:
                        return CommitReport(user, attempt, attempts=attempt,
                                            extra={"bins": 0, "conflicts": conflicts})
            compaction.discard(_replaced_and_new(done)[1])
            raise CommitConflictError(
                f"Compaction of {target.path} conflicted {conflicts} times with other compactions; "
                "its rewritten files were removed and the table is unchanged. Run it again later.")
    finally:
        compaction.clean_staging(user, [])
        target.forget_commit_user(user)


def _compact_keyed(spark, target: PaimonTarget, partitions, size: int | None, full: bool, progress,
                   max_attempts: int, in_place: bool | None = None) -> CommitReport:
    """Full compaction of the buckets of a primary-key table, committed as one COMPACT snapshot.

    A conflict (another commit removed an input: another compaction, an overwrite) rebases:
    buckets whose inputs are all still live keep their outputs; the others' outputs are
    deleted and those buckets are planned again on the new state, up to `max_attempts`.
    """
    compaction = PaimonCompactionTarget(target)
    user = f"lakesink-compact-{uuid.uuid4()}"
    aggregator = KeyedCompactionAggregator(target, compaction.staging_dir(user), force=full, target_size=size,
                                           in_place=in_place)
    run_tasks = ((lambda tasks, on_progress: rewrite_on_spark(spark, tasks, on_progress))
                 if spark is not None and not is_connect(spark) else (lambda tasks, _: rewrite_on_driver(tasks)))
    done: dict = {}   # bucket -> (its files, the files replacing them)
    conflicts, skipped = 0, set()
    try:
        with _progress_bar(progress) as on_progress:
            todo = None  # None: every bucket
            for attempt in range(1, max_attempts + 1):
                aggregator.refresh()
                groups = group_by_key(aggregator, live_files(aggregator.table, partitions))
                keys, units, tasks = [], [], []
                for key, files in groups.items():
                    unit = aggregator.unit(files) if todo is None or key in todo else None
                    if unit is not None:
                        if any(f.meta.schema_id != aggregator.layout.schema_id for f in files):
                            skipped.add(key)
                            continue
                        keys.append(key)
                        units.append(unit)
                        tasks.append(aggregator.task_for(files, unit))
                for key, unit, outputs in zip(keys, units, run_tasks(tasks, on_progress)):
                    done[key] = (list(unit.files), list(outputs))
                if not done:
                    return CommitReport(user, 0, extra={"buckets": 0, "conflicts": conflicts,
                                                        "skipped": sorted(skipped)})
                try:
                    report = compaction.commit_compaction(user, attempt, *_replaced_and_new(done),
                                                          {"lakesink.compaction-job": "true",
                                                           "lakesink.full-compaction": str(full).lower()},
                                                          applied=aggregator.applied)
                except CommitConflictError as exc:
                    conflicts += 1
                    log.info("compaction of %s conflicts (attempt %d): %s; rebasing", target.path, attempt, exc)
                    todo = _rebase(compaction, done, aggregator.applied)  # planned again on the new state
                    continue
                report.attempts = attempt
                report.extra.update(buckets=len(done), conflicts=conflicts, skipped=sorted(skipped))
                return report
            compaction.discard(_replaced_and_new(done)[1])
            raise CommitConflictError(
                f"Compaction of {target.path} conflicted {conflicts} times with other commits; its "
                "rewritten files were removed and the table is unchanged. Run it again later.")
    finally:
        compaction.clean_staging(user, [])
        target.forget_commit_user(user)


def _compact_postpone(spark, target: PaimonTarget, partitions, size: int | None, progress, max_attempts: int,
                      in_place: bool | None = None) -> CommitReport:
    """Postpone-bucket tables: every partition holding postpone files gets its rows assigned to
    real buckets, merged with those buckets' files, in one COMPACT snapshot that removes the
    postpone files (`paimon.compaction.postpone`). A conflict (another commit removed an input)
    plans the whole job again on the new state, up to `max_attempts`."""
    from dataclasses import replace

    from ..paimon.compaction import outputs as compact_outputs, postpone
    from ..paimon.compaction.outputs import InPlace
    from ..paimon.files import deletion_vectors
    from ..paimon.files.datafiles import TableLayout, table_path_of
    from ..paimon.keyed.layout import KeyedSpec
    from ..paimon.keyed.lsm_policy import LsmOptions, check_compactable

    compaction = PaimonCompactionTarget(target)
    user = f"lakesink-compact-{uuid.uuid4()}"
    staging = compaction.staging_dir(user)
    run_tasks = ((lambda tasks, on_progress: rewrite_on_spark(spark, tasks, on_progress))
                 if spark is not None and not is_connect(spark) else (lambda tasks, _: rewrite_on_driver(tasks)))
    conflicts = 0
    try:
        with _progress_bar(progress) as on_progress:
            for attempt in range(1, max_attempts + 1):
                table = target.table(refresh=True)
                check_compactable(table)
                layout, spec, lsm = TableLayout.of(table), KeyedSpec.of_table(table), LsmOptions.of_table(table)
                if size:
                    lsm = replace(lsm, target_size=int(size))
                writes_in_place = compact_outputs.wanted(target.path, in_place)
                deletions = (deletion_vectors.Vectors(table, table.snapshot_manager().get_latest_snapshot())
                             .deletions() if deletion_vectors.enabled(table) else None)
                planned = postpone.plan(table, live_files(table, partitions), staging, layout, spec, lsm,
                                        lambda f, t=table: table_path_of(t, f), target.fs_options,
                                        InPlace.of(table, staging) if writes_in_place else None, deletions)
                if not planned:
                    return CommitReport(user, 0, extra={"partitions": 0, "conflicts": conflicts})
                outputs = run_tasks([task for task, _ in planned], on_progress)
                replaced = [f for _, files in planned for f in files]
                new = [f for files in outputs for f in files]
                # Deletion vectors: what each replaced file's vector marked when the tasks read it.
                applied = {f.meta.file_name: int((deletions.get(f.meta.file_name) or (0, 0, 0, 0))[3] or 0)
                           for f in replaced} if deletions is not None else None
                try:
                    report = compaction.commit_compaction(user, attempt, replaced, new,
                                                          {"lakesink.compaction-job": "true",
                                                           "lakesink.postpone-compaction": "true"},
                                                          applied=applied)
                except CommitConflictError as exc:
                    conflicts += 1
                    log.info("postpone compaction of %s conflicts (attempt %d): %s; planning again",
                             target.path, attempt, exc)
                    compaction.discard(new)
                    continue
                report.attempts = attempt
                report.extra.update(partitions=len(planned), conflicts=conflicts)
                return report
            raise CommitConflictError(
                f"Compaction of {target.path} conflicted {conflicts} times with other commits; its "
                "rewritten files were removed and the table is unchanged. Run it again later.")
    finally:
        compaction.clean_staging(user, [])
        target.forget_commit_user(user)


def _plan(aggregator: SmallFileAggregator, files) -> list[list]:
    bins = []
    for key, group in group_by_key(aggregator, files).items():
        bins.extend(aggregator.plan(group, key)[0])
    return bins


def _replaced_and_new(done: dict) -> tuple[list, list]:
    """The inputs and the outputs of every rewrite in `done` ({key: (inputs, outputs)})."""
    return ([f for files, _ in done.values() for f in files],
            [o for _, outputs in done.values() for o in outputs])


def _rebase(compaction: PaimonCompactionTarget, done: dict, applied: dict | None = None) -> set:
    """After a conflict: drop from `done` the rewrites whose inputs are not all live any more
    (their rows are already elsewhere), or had rows marked deleted since the rewrite read them
    (`applied`: what the keyed rewrites' vectors marked then), deleting their outputs; return their keys."""
    live = {compaction.identity(f) for f in compaction.live(_replaced_and_new(done)[0])}
    dropped = {key for key, (files, outputs) in done.items()
               if not all(compaction.identity(f) in live for f in files)
               or compaction.stale(files, outputs, applied)}
    for key in dropped:
        compaction.discard(done.pop(key)[1])
    return dropped


def _size(target_size) -> int | None:
    if target_size is None:
        return None
    if isinstance(target_size, int):
        if target_size <= 0:
            raise ConfigurationError(f"target_size must be positive, got {target_size}")
        return target_size
    from pypaimon.common.memory_size import MemorySize
    try:
        return MemorySize.parse(str(target_size)).get_bytes()
    except Exception:
        raise ConfigurationError(f"target_size {target_size!r} is not a size such as '128 mb' or 134217728") from None


def _check_partitions(table, partitions) -> None:
    keys = set(table.partition_keys)
    if not keys:
        raise ConfigurationError(f"{table.table_path} is not partitioned: call compact without partitions.")
    for spec in partitions:
        if set(spec) != keys:
            raise ConfigurationError(f"partition {dict(spec)} must give exactly the partition columns "
                                     f"{sorted(keys)} of {table.table_path}.")


class _progress_bar:
    """A rich progress bar on stderr (or the caller's callback, or nothing)."""

    def __init__(self, progress):
        self.progress = progress
        self._bar = None

    def __enter__(self) -> ProgressFn | None:
        if callable(self.progress):
            return self.progress
        if not self.progress:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        self._bar = Progress(TextColumn("rewriting small files"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self._bar.start()
        task = self._bar.add_task("rewrite", total=None)
        return lambda done, total: self._bar.update(task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
