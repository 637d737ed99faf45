"""Copy-on-write commits of row-level changes (DELETE / UPDATE / MERGE) into append tables.

A statement rewrites only the files holding affected rows: its snapshot (kind
OVERWRITE, as Paimon's own Spark DELETE on an append table) deletes those files
and adds their rewritten versions and any inserted rows, in one step. Paimon's
file-deletion conflict check guards it: if another writer removed or rewrote one
of those files meanwhile (a compaction, another statement), the commit fails and
the table is unchanged. Appends that raced in add new files the statement never
touches, so they are kept.

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
from ..files.datafiles import StagedFile, place
from . import hooks, identity, intents
from .file_store import new_file_store_commit
from .target import PaimonTarget, _Publications

_ADD, _DELETE = 0, 1


class RowLevelTarget(PaimonTarget):
    """A `PaimonTarget` whose commit also removes `removed` (the files a statement rewrote).

    `removed` empty: an ordinary APPEND commit (a MERGE that only inserted rows)."""

    def __init__(self, path: str, removed: Sequence[StagedFile] = (), fs_options: dict | None = None):
        super().__init__(path, fs_options=fs_options)
        self.removed = list(removed)

    def commit(self, commit_user: str, identifier: int, committables: Sequence[StagedFile],
               overwrite: Overwrite | None = None, properties: dict[str, str] | None = None) -> CommitReport:
        if not self.removed:
            return super().commit(commit_user, identifier, committables, overwrite, properties)
        started = time.perf_counter()
        hooks.maintenance.raise_failure(self.path, self.file_io)
        table = self.table(refresh=True)
        files = list(committables)
        self._check_schema_ids(table, files)
        hooks.check_derived(table)
        latest = table.snapshot_manager().get_latest_snapshot()
        identity.before_commit(self.file_io, self.path, commit_user, latest)
        intents.declare_placement(table, files)
        place(table, files)
        crashpoints.reached("files-placed")
        entries = ([_entry(table, _DELETE, f) for f in self.removed]
                   + [_entry(table, _ADD, f) for f in files])
        rows, size = sum(f.row_count for f in files), sum(f.file_size for f in files)
        props = {"lakesink.rows-added": str(rows), "lakesink.files-added": str(len(files)),
                 "lakesink.bytes-added": str(size), "lakesink.files-removed": str(len(self.removed))}
        props.update(properties or {})
        file_store_commit = new_file_store_commit(table, commit_user)
        attempts = _Publications(file_store_commit)
        crashpoints.reached("before-snapshot")
        try:
            # Conflict detection on: a removed file no longer live is a file-deletion conflict.
            file_store_commit._try_commit(commit_kind="OVERWRITE", commit_identifier=identifier,
                                          commit_entries_plan=lambda _snapshot: entries, detect_conflicts=True,
                                          allow_rollback=False, snapshot_properties=props)
        except CommitConflictError as exc:
            exc.identifier = identifier
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
                              files_removed=len(self.removed),
                              rows_removed=sum(f.row_count for f in self.removed),
                              bytes_removed=sum(f.file_size for f in self.removed))
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
