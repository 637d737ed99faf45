"""Builds the pypaimon `FileStoreCommit` every lakesink commit goes through.

One place to choose how snapshots are published (atomically, see `publish`)
and how manifests are written: `MergingFileStoreCommit` merges manifests the
way Paimon does (see `manifests`), so the base manifest list each commit reads
and rewrites stays short and commit cost stays flat however many commits came
before.
"""

from __future__ import annotations

import time

from pypaimon.write.commit.conflict_detection import RowIdExistenceConflict
from pypaimon.write.file_store_commit import FileStoreCommit, RetryResult

from ...errors import CommitConflictError

from .manifest_merge import ManifestMerger
from ..table.publish import atomic_snapshot_commit


class _MergingManifestList:
    """The commit's manifest-list manager, merging the manifests of the base list.

    pypaimon builds a snapshot's base list from `read_all(latest)` once per
    attempt; only that call (armed by `arm()`) merges. Every other use (e.g.
    the overwrite planner's read of existing files) sees the plain list.
    """

    def __init__(self, inner, merger: ManifestMerger):
        self._inner = inner
        self._merger = merger
        self._armed = False

    def arm(self) -> None:
        self._armed = True

    def read_all(self, snapshot):
        manifests = self._inner.read_all(snapshot)
        if not self._armed:
            return manifests
        self._armed = False
        return self._merger.merge(manifests)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class MergingFileStoreCommit(FileStoreCommit):
    """pypaimon's commit with Paimon's manifest merging on every attempt."""

    def __init__(self, snapshot_commit, table, commit_user: str, bucket_counts_at: int | None = None):
        super().__init__(snapshot_commit, table, commit_user)
        self._merger = ManifestMerger(table)
        from .live_files import CachedManifestLists
        self.manifest_list_manager = _MergingManifestList(CachedManifestLists(table), self._merger)
        self.conflict_detection.check_conflicts = _typed_conflicts(self.conflict_detection.check_conflicts,
                                                                   table, commit_user)
        self.commit_scanner = _CachedBaseEntries(
            self.commit_scanner, table,
            None if self.conflict_detection.data_evolution_enabled else bucket_counts_at)

    def _set_fixed_bucket_commit_check(self, messages):
        super()._set_fixed_bucket_commit_check(messages)
        check = self.conflict_detection.fixed_bucket_commit_check
        if check is not None:
            keyed = str(self.table.table_path) if self.table.is_primary_key_table else None
            self.conflict_detection.fixed_bucket_commit_check = _CompactionTolerantCheck(check, keyed)

    def _try_commit(self, *args, **kwargs):
        self._attempt = 0
        self._started_ms = int(time.time() * 1000)
        return super()._try_commit(*args, **kwargs)

    guard = None  # callable(latest snapshot) -> CommitConflictError | None, checked before every attempt

    def _replaced_vectors(self, partition_filter, deletes: list) -> list:
        """`deletes` and the deletion-vector index entries of the partitions an overwrite or a
        partition drop of an append table replaces: its removed files leave with their vectors
        (pypaimon drops only the HASH index there)."""
        if self.table.is_primary_key_table or not self.table.options.deletion_vectors_enabled():
            return deletes
        from ..files.deletion_vectors import Vectors, as_delete
        by_name = {e.index_file.file_name: e for e in deletes}
        for entry in Vectors(self.table, self.snapshot_manager.get_latest_snapshot()).entries():
            if partition_filter is None or partition_filter.test(entry.partition):
                by_name[entry.index_file.file_name] = as_delete(entry)
        return list(by_name.values())

    def _overwrite_hash_index_deletes(self, partition_filter, deletes):
        return self._replaced_vectors(partition_filter, super()._overwrite_hash_index_deletes(partition_filter, deletes))

    def drop_by_partition_filter(self, partition_filter, commit_identifier: int) -> None:
        index_deletes = self._replaced_vectors(partition_filter, [])
        if not index_deletes:
            return super().drop_by_partition_filter(partition_filter, commit_identifier)
        if partition_filter is None:
            raise RuntimeError("Failed to build partition filter.")
        provider = self._overwrite_changes_provider(partition_filter, [])
        self._try_commit(commit_kind="OVERWRITE", commit_identifier=commit_identifier,
                         commit_entries_plan=provider.provide, detect_conflicts=True, allow_rollback=False,
                         index_deletes=index_deletes)

    def _try_commit_once(self, *args, **kwargs):
        if self.guard is not None:
            conflict = self.guard(kwargs.get("latest_snapshot"))
            if conflict is not None:
                raise conflict
        # Per-attempt snapshot properties: which attempt published it, and when the
        # commit started (history derives the commit duration from the snapshot time).
        self._attempt = getattr(self, "_attempt", 0) + 1
        props = dict(kwargs.get("snapshot_properties") or {})
        props.setdefault("lakesink.commit-started-ms", str(getattr(self, "_started_ms", int(time.time() * 1000))))
        props["lakesink.commit-attempt"] = str(self._attempt)
        kwargs["snapshot_properties"] = props
        self._merger.written = []
        self.manifest_list_manager.arm()
        try:
            result = super()._try_commit_once(*args, **kwargs)
        except Exception:
            # Raised before publication ("Failed to prepare snapshot", a conflict):
            # the merged manifests are referenced by nothing.
            self._merger.delete_written()
            raise
        finally:
            self.manifest_list_manager._armed = False
        if (isinstance(result, RetryResult) and not result.commit_result_may_be_uncertain
                and result.exception is None):
            self._merger.delete_written()  # lost the publication race: the next attempt merges anew
        return result


class _CachedBaseEntries:
    """pypaimon's commit scanner, reading a checked commit's base (the latest snapshot's files in
    the partitions it changes; fixed-bucket and keyed commits are all checked) through the
    manifest cache of `live_files.live_entries`: a stream's commit reads only the
    manifests written since its last one, not the whole table every micro-batch.

    `counts_at`: a snapshot up to which the commit's bucket count is known to be every file's
    in the partitions it writes (`PaimonTarget.commit`). A commit on that snapshot that only
    adds level-0 files needs no base: only pypaimon's bucket-count check would read it (no
    file to delete, no sorted run to keep apart, no row ids). On any other snapshot (a newer
    one, or a retry after a lost race) the base is read, or built from the snapshots in
    between, as pypaimon does: but never from an attempt whose base was left unread (the
    files a compaction in between removed would look like files the commit deletes)."""

    def __init__(self, inner, table, counts_at: int | None = None):
        self._inner = inner
        self._table = table
        self._counts_at = counts_at
        self._unread_at: int | None = None  # the snapshot whose base an attempt did not read

    def read_all_entries_from_changed_partitions(self, latest_snapshot, commit_entries, index_entries=None):
        if (latest_snapshot is not None and latest_snapshot.id == self._counts_at and commit_entries
                and not index_entries and all(e.kind == 0 and e.file.level == 0 for e in commit_entries)):
            self._unread_at = latest_snapshot.id
            return []
        if latest_snapshot is None or not commit_entries or index_entries:
            return self._inner.read_all_entries_from_changed_partitions(latest_snapshot, commit_entries,
                                                                         index_entries)
        from .live_files import live_entries
        changed = self._inner._build_partition_filter_from_changes(commit_entries)  # as pypaimon filters
        return [e for e in live_entries(self._table, latest_snapshot) if changed is None or changed.test(e.partition)]

    def read_incremental_changes(self, from_snapshot, to_snapshot, *args, **kwargs):
        if from_snapshot is not None and from_snapshot.id == self._unread_at:
            return None  # pypaimon then reads the new base whole
        return self._inner.read_incremental_changes(from_snapshot, to_snapshot, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _CompactionTolerantCheck:
    """pypaimon's fixed-bucket check (one writer per bucket: any file added to a bucket after
    the snapshot a write's sequence numbers were planned on is a conflict), minus COMPACT
    snapshots. A compaction keeps every row's sequence number and can only merge files that
    were there before: whatever it adds is older than the write, which still overtakes it.
    So an append planned before a compaction of its buckets commits after it (as Paimon's
    writers beside a dedicated compaction job do). Overwrites keep the full check.

    Appends into a primary-key table (`keyed`: its path) also go ahead past another writer's
    APPEND files whose key range does not meet theirs in that bucket (`key_ranges`): the
    commit's check in the window between `PaimonTarget`'s own check and publication, and on
    each retry after a lost publication race."""

    def __init__(self, inner, keyed: str | None = None):
        self._inner = inner
        self._keyed = keyed

    def check(self, latest, entries, commit_kind, snapshot_manager, scanner):
        if commit_kind == "OVERWRITE":
            return self._inner.check(latest, entries, commit_kind, snapshot_manager, scanner)
        scanner = _WithoutCompactions(scanner)
        if self._keyed is None or commit_kind != "APPEND":
            return self._inner.check(latest, entries, commit_kind, snapshot_manager, scanner)
        return self._check_key_ranges(latest, entries, snapshot_manager, scanner)

    def _check_key_ranges(self, latest, entries, snapshot_manager, scanner):
        from .key_ranges import check_added, ranges_by_bucket

        owners, baseline = self._inner.owners, self._inner.baseline
        if not owners or baseline is None or latest is None or latest.id <= baseline:
            return None
        ours = ranges_by_bucket((e.partition.values, e.bucket, e.file) for e in entries if e.kind == 0)
        for snapshot_id in range(baseline + 1, latest.id + 1):
            snapshot = snapshot_manager.get_snapshot_by_id(snapshot_id)
            if snapshot is None:
                return RuntimeError(f"Fixed-bucket conflict check cannot find snapshot {snapshot_id}")
            for change in scanner.read_incremental_raw_entries_from_changed_partitions(snapshot, entries):
                if change.kind != 0 or (tuple(change.partition.values), change.bucket) not in owners:
                    continue
                if snapshot.commit_kind != "APPEND":
                    return RuntimeError(f"snapshot {snapshot_id} ({snapshot.commit_kind} by {snapshot.commit_user!r}) "
                                        f"added files to bucket {change.bucket} of partition "
                                        f"{tuple(change.partition.values)} after snapshot {baseline}")
                conflict = check_added(change, snapshot, ours, f"Commit to {self._keyed}", baseline,
                                       table=self._keyed)
                if conflict is not None:
                    return conflict
        return None

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _WithoutCompactions:
    def __init__(self, scanner):
        self._scanner = scanner

    def read_incremental_raw_entries_from_changed_partitions(self, snapshot, *args, **kwargs):
        if snapshot.commit_kind == "COMPACT":
            return []
        return self._scanner.read_incremental_raw_entries_from_changed_partitions(snapshot, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._scanner, name)


def lsm_conflict(base_entries, delta_entries) -> str | None:
    """Paimon's LSM check for primary-key tables: in every (partition, bucket), the files of
    one level >= 1 form one sorted run (key ranges do not overlap). A description of the
    first violation the delta brings, or None."""
    from pypaimon.manifest.schema.file_entry import FileEntry

    touched = {(tuple(e.partition.values), e.bucket, e.file.level) for e in delta_entries
               if e.kind == 0 and e.file.level > 0}
    if not touched:
        return None
    runs: dict[tuple, list] = {}
    for e in FileEntry.merge_entries(list(base_entries) + list(delta_entries)):
        key = (tuple(e.partition.values), e.bucket, e.file.level)
        if e.kind == 0 and key in touched:
            runs.setdefault(key, []).append(e.file)
    for (partition, bucket, level), files in runs.items():
        files.sort(key=lambda f: tuple(f.min_key.values))
        for a, b in zip(files, files[1:]):
            if tuple(b.min_key.values) <= tuple(a.max_key.values):
                return (f"LSM conflicts detected: files {a.file_name} and {b.file_name} of partition "
                        f"{partition}, bucket {bucket} overlap at level {level}")
    return None


def _typed_conflicts(check, table, commit_user: str):
    """pypaimon reports a conflict as a plain RuntimeError it returns and raises: make it a
    `CommitConflictError`, so callers tell conflicts by type. Row-id conflicts stay as they
    are: pypaimon rewrites those itself."""

    keyed = table.is_primary_key_table

    def checked(latest_snapshot, base_entries, delta_entries, *args, **kwargs):
        found = check(latest_snapshot, base_entries, delta_entries, *args, **kwargs)
        if found is None and keyed:
            described = lsm_conflict(base_entries, delta_entries)
            found = RuntimeError(described) if described else None
        if found is None or isinstance(found, RowIdExistenceConflict):
            return found
        if isinstance(found, CommitConflictError):  # typed already (key_ranges)
            found.commit_user = commit_user
            return found
        if "Total buckets" in str(found):  # pypaimon's check_bucket_num_conflicts
            text = (f"Commit to {table.table_path} refused: {found} The table's `bucket` option was changed "
                    "without rescaling this partition's files. Rescale the partition first (Paimon's INSERT "
                    "OVERWRITE of it with the new bucket count), or write with the bucket count its files have. "
                    "Nothing was committed.")
        else:
            text = f"Commit to {table.table_path} conflicts with a concurrent change: {found}"
        error = CommitConflictError(text, table=str(table.table_path), commit_user=commit_user)
        error.__cause__ = found
        return error

    return checked


def new_file_store_commit(table, commit_user: str, bucket_counts_at: int | None = None) -> FileStoreCommit:
    return MergingFileStoreCommit(atomic_snapshot_commit(table), table, commit_user, bucket_counts_at)
