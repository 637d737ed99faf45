"""Copy-on-write commits of row-level changes (DELETE / UPDATE / MERGE) into append tables.

A statement rewrites only the files holding affected rows: its snapshot (kind
OVERWRITE, as Paimon's own Spark DELETE on an append table) deletes those files
and adds their rewritten versions and any inserted rows, in one step. Paimon's
file-deletion conflict check guards it: if another writer removed or rewrote one
of those files meanwhile (a compaction, another statement), the commit fails and
the table is unchanged. Appends that raced in add new files the statement never
touches, so they are kept.

In a table with `deletion-vectors.enabled` a statement rewrites no file: the rows it
deletes or updates are marked in the deletion vectors of their files (`marked`), updated
rows' new versions and inserted rows are added as new files, and a file whose every row is
then marked leaves the table with its vector. The snapshot swaps each touched bucket's
deletion-vector index (`paimon.files.deletion_vectors`); pypaimon's conflict check refuses
it if another writer changed those vectors or removed a marked file meanwhile.

The protocol's `Committer` drives it as any commit (replay check on the commit
identity); only the snapshot differs from `PaimonTarget`'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pypaimon.manifest.schema.manifest_entry import ManifestEntry
from pypaimon.table.row.generic_row import GenericRow

from ...errors import CommitConflictError
from ...protocol import crashpoints
from ...protocol.target import CommitReport, Overwrite
from ..files import deletion_vectors
from ..files.datafiles import StagedFile, place
from . import hooks, identity, intents
from .checks import check_schema_ids
from .file_store import new_file_store_commit
from .messages import Publications
from .target import PaimonTarget

_ADD, _DELETE = 0, 1


class RowLevelTarget(PaimonTarget):
    """A `PaimonTarget` whose commit also removes `removed` (the files a statement rewrote).

    `marked`: {data file name: (the file, row positions)} to mark deleted in deletion vectors,
    read as of snapshot `base` (the one the statement read). Both empty: an ordinary APPEND
    commit (a MERGE that only inserted rows)."""

    def __init__(self, path: str, removed: Sequence[StagedFile] = (), fs_options: dict | None = None,
                 marked: dict | None = None, base=None, branch: str | None = None):
        super().__init__(path, fs_options=fs_options, branch=branch)
        self.removed = list(removed)
        self.marked = dict(marked or {})
        self.base = base

    def _mark(self, table) -> tuple[list, list[StagedFile]]:
        """(each touched bucket's deletion-vector index change after marking `marked`, the marked
        files left with no live row: removed, their vectors dropped)."""
        vectors = deletion_vectors.Vectors(table, self.base)
        by_bucket: dict[tuple, dict] = {}
        for name, (f, positions) in self.marked.items():
            by_bucket.setdefault((tuple(f.partition), f.bucket), {})[name] = positions
        changes, emptied = [], []
        for (partition, bucket), marks in by_bucket.items():
            change = vectors.change_bucket(partition, bucket, marks)
            if change is None:
                continue
            empty = [name for name in marks if change.cardinalities.get(name, 0) >= self.marked[name][0].row_count]
            if empty:  # nothing of them is left to read: they go, with their vectors
                deletion_vectors.discard(table.file_io, [change])
                change = vectors.change_bucket(partition, bucket, marks, dropped=empty)
                emptied += [self.marked[name][0] for name in empty]
            if change is not None:
                changes.append(change)
        return changes, emptied

    def commit(self, commit_user: str, identifier: int, committables: Sequence[StagedFile],
               overwrite: Overwrite | None = None, properties: dict[str, str] | None = None) -> CommitReport:
        if not self.removed and not self.marked:
            return super().commit(commit_user, identifier, committables, overwrite, properties)
        started = time.perf_counter()
        hooks.maintenance.raise_failure(self.path, self.file_io)
        table = self.table(refresh=True)
        files = list(committables)
        check_schema_ids(table, files)
        hooks.check_derived(table)
        latest = table.snapshot_manager().get_latest_snapshot()
        identity.before_commit(self.file_io, self.path, commit_user, latest)
        intents.declare_placement(table, files)
        place(table, files)
        crashpoints.reached("files-placed")
        changes, emptied = self._mark(table) if self.marked else ([], [])
        removed = self.removed + emptied
        index_adds, index_deletes = deletion_vectors.index_entries(changes)
        entries = ([_entry(table, _DELETE, f) for f in removed]
                   + [_entry(table, _ADD, f) for f in files])
        rows, size = sum(f.row_count for f in files), sum(f.file_size for f in files)
        props = {"lakesink.rows-added": str(rows), "lakesink.files-added": str(len(files)),
                 "lakesink.bytes-added": str(size), "lakesink.files-removed": str(len(removed))}
        if self.marked:
            props["lakesink.rows-marked"] = str(sum(len(p) for _, p in self.marked.values()))
        props.update(properties or {})
        file_store_commit = new_file_store_commit(table, commit_user)
        attempts = Publications(file_store_commit)
        crashpoints.reached("before-snapshot")
        try:
            # Conflict detection on: a removed file no longer live is a file-deletion conflict; so
            # are a bucket's vectors changed by another writer and a marked file no longer live.
            file_store_commit._try_commit(commit_kind="OVERWRITE", commit_identifier=identifier,
                                          commit_entries_plan=lambda _snapshot: entries, detect_conflicts=True,
                                          allow_rollback=False, snapshot_properties=props,
                                          index_adds=index_adds, index_deletes=index_deletes)
        except CommitConflictError as exc:
            exc.identifier = identifier
            deletion_vectors.discard(table.file_io, changes)  # definitely not committed
            raise
        finally:
            file_store_commit.close()
        crashpoints.reached("after-snapshot")
        snapshot = attempts.snapshot or self.committed_snapshot(commit_user, identifier)
        identity.after_commit(self.file_io, self.path, commit_user, identifier,
                              snapshot.id if snapshot else (latest.id if latest else None))
        report = CommitReport(commit_user, identifier, snapshot_id=snapshot.id if snapshot else None,
                              commit_kind=snapshot.commit_kind if snapshot else None, attempts=attempts.count,
                              files_added=len(files), rows_added=rows, bytes_added=size,
                              files_removed=len(removed),
                              rows_removed=sum(f.row_count for f in removed),
                              bytes_removed=sum(f.file_size for f in removed))
        if snapshot is not None:
            hooks.refresh_derived(table)
        report.duration_ms = (time.perf_counter() - started) * 1000
        for hook in self.after_commit:
            hook(table, report)
        if self.maintenance:
            hooks.maintenance.after_commit(self.path, table, report, self.fs_options)
        return report


def _entry(table, kind: int, f: StagedFile) -> ManifestEntry:
    return ManifestEntry(kind=kind, partition=GenericRow(list(f.partition), table.partition_keys_fields),
                         bucket=f.bucket, total_buckets=table.total_buckets, file=f.meta)
