"""Snapshot expiry, crash-safe through a journal (see the package doc)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from pypaimon.consumer.consumer_manager import ConsumerManager

from ... import storage
from ...errors import MaintenanceError
from ...protocol import crashpoints
from ..commit import identity
from ..table.branches import snapshots_of_branches
from .metadata import (MaintenanceOptions, Metadata, ProgressFn, entry_paths, lakesink_dir, list_tags,
                       lists_of, manifest_dir_of, table_of)

log = logging.getLogger(__name__)

JOURNAL = storage.DocumentKind("lakesink.expiry", 1, "lakesink expiry plan",
                                "Move it away if it is not lakesink's; expiry then starts afresh.")


def _journal_path(table) -> str:
    return f"{lakesink_dir(table)}/expiry.json"


@dataclass
class ExpiryReport:
    snapshots_expired: int = 0
    files_deleted: int = 0
    markers_updated: int = 0
    first_retained: int | None = None
    expired_range: tuple[int, int] | None = None  # [begin, end)
    dry_run: bool = False
    would_delete: list[str] = field(default_factory=list)


def expire_snapshots(table_or_path, now_ms: int | None = None, limit: int | None = -1,
                     dry_run: bool = False, progress: ProgressFn | None = None,
                     fs_options: dict | None = None) -> ExpiryReport:
    """Expire snapshots by the table's retention options.

    `limit` caps how many snapshots go in one call: -1 = `snapshot.expire.limit`
    (the after-commit default), None = no cap (on-demand expiry).
    """
    table = table_of(table_or_path, fs_options)
    report = ExpiryReport(dry_run=dry_run)
    if not dry_run:
        report.files_deleted += finish_pending_expiry(table)
    options = MaintenanceOptions.of(table)
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    if latest is None:
        return report
    earliest = manager.try_get_earliest_snapshot()
    begin = earliest.id
    low = max(latest.id - options.retain_max + 1, begin)
    end = latest.id - options.retain_min + 1
    consumer_next = ConsumerManager(table.file_io, table.table_path).min_next_snapshot()
    if consumer_next is not None:
        end = min(end, consumer_next)
    cap = options.expire_limit if limit == -1 else limit
    if cap is not None:
        end = min(end, begin + cap)
    older_than = (now_ms if now_ms is not None else int(time.time() * 1000)) - options.time_retained_ms
    for snapshot_id in range(low, end):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is not None and older_than <= snapshot.time_millis:
            end = snapshot_id
            break
    report.first_retained = max(end, begin)
    if end <= begin:
        return report

    plan = _plan_expiry(table, begin, end, progress)
    report.expired_range = (begin, end)
    if dry_run:
        report.would_delete = plan
        report.snapshots_expired = end - begin
        return report
    report.markers_updated = identity.carry_over(table, begin, end)
    journal = {"begin": begin, "end": end, "files": plan}
    JOURNAL.write(table.file_io, _journal_path(table), **journal)
    crashpoints.reached("expire-planned")
    report.snapshots_expired = end - begin
    report.files_deleted += _carry_out(table, journal, progress)
    return report


def _plan_expiry(table, begin: int, end: int, progress: ProgressFn | None) -> list[str]:
    """Files that expiring snapshots [begin, end) makes unreferenced (see module doc)."""
    manager = table.snapshot_manager()
    meta = Metadata(table)
    manifest_dir = manifest_dir_of(table)
    retained = manager.get_snapshot_by_id(end)
    if retained is None:
        raise MaintenanceError(f"Snapshot {end} of {table.table_path} is missing; expiry needs it to "
                               "know what later snapshots use. Run `lakesink verify` on the table.")
    # Branches' snapshots and tags share manifests and data files with main: kept like tags.
    tags = list(list_tags(table).values()) + snapshots_of_branches(table)
    keep_lists = set(lists_of(retained)).union(*(lists_of(t) for t in tags))
    keep_manifests = {m.file_name for s in [retained, *tags] for m in meta.manifests(s)}
    keep_index = {s.index_manifest for s in [retained, *tags] if s.index_manifest}
    tag_data: set[str] | None = None  # read only if some expired DELETE entry needs checking

    files: list[str] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        if path not in seen:
            seen.add(path)
            files.append(path)

    # Data files removed by DELETE entries in (begin, end]: live before, not after.
    for i, snapshot_id in enumerate(range(begin + 1, end + 1)):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            continue
        for m in meta.lists.read_delta(snapshot):
            if m.num_deleted_files == 0:
                continue
            for entry in meta.entries(m):
                if entry.kind != 1:
                    continue
                if tag_data is None:
                    tag_data = meta.referenced(tags)
                for path in entry_paths(table, entry):
                    if path not in tag_data:
                        add(path)
        if progress:
            progress("planning", i + 1, end - begin)
    # Bucket index files (deletion vectors, hash index) only expired snapshots list: every
    # snapshot's index manifest lists all its index files, and a file once replaced never returns.
    index_files = _IndexFiles(table)
    kept_index = set().union(*(index_files.names(name) for name in keep_index))
    for snapshot_id in range(begin, end):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is not None and snapshot.index_manifest and snapshot.index_manifest not in keep_index:
            for name, path in index_files.paths(snapshot.index_manifest).items():
                if name not in kept_index:
                    add(path)
    # Manifests, then manifest lists, of the expired snapshots.
    lists: list[str] = []
    for snapshot_id in range(begin, end):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            continue
        for name in lists_of(snapshot) - keep_lists:
            try:
                metas = meta.lists.read(name)
            except FileNotFoundError:
                metas = []
            for m in metas:
                if m.file_name not in keep_manifests:
                    add(f"{manifest_dir}/{m.file_name}")
            lists.append(f"{manifest_dir}/{name}")
        if snapshot.index_manifest and snapshot.index_manifest not in keep_index:
            lists.append(f"{manifest_dir}/{snapshot.index_manifest}")
    for path in lists:
        add(path)
    return files


class _IndexFiles:
    """The bucket index files (kinds DELETION_VECTORS and HASH) an index manifest lists, read once each."""

    KINDS = ("DELETION_VECTORS", "HASH")

    def __init__(self, table):
        self.table = table
        self._read: dict[str, dict[str, str]] = {}

    def paths(self, index_manifest: str) -> dict[str, str]:
        """{index file name: path}."""
        if index_manifest not in self._read:
            from pypaimon.manifest.index_manifest_file import IndexManifestFile
            factory = self.table.path_factory()
            try:
                entries = IndexManifestFile(self.table).read(index_manifest)
            except FileNotFoundError:
                entries = []
            self._read[index_manifest] = {
                e.index_file.file_name: factory.bucket_index_path(tuple(e.partition.values), e.bucket, e.index_file)
                for e in entries if e.kind == 0 and e.index_file.index_type in self.KINDS}
        return self._read[index_manifest]

    def names(self, index_manifest: str) -> set[str]:
        return set(self.paths(index_manifest))


def _carry_out(table, journal: dict, progress: ProgressFn | None) -> int:
    """Execute an expiry plan; idempotent, so a plan left by a crash can run again."""
    manager = table.snapshot_manager()
    file_io = table.file_io
    begin, end = int(journal["begin"]), int(journal["end"])
    storage.write_atomically(file_io, f"{manager.snapshot_dir}/EARLIEST", str(end))
    for snapshot_id in range(begin, end):  # oldest first: what is left is always a contiguous range
        file_io.delete_quietly(manager.get_snapshot_path(snapshot_id))
        crashpoints.reached("expire-snapshot-deleted")
    deleted = 0
    files = journal["files"]
    for i, path in enumerate(files):
        if file_io.exists(path):
            file_io.delete_quietly(path)
            deleted += 1
        crashpoints.reached("expire-file-deleted")
        if progress:
            progress("deleting", i + 1, len(files))
    file_io.delete_quietly(_journal_path(table))
    return deleted


def finish_pending_expiry(table) -> int:
    """Finish an expiry a crash interrupted; returns the number of files it deleted."""
    path = _journal_path(table)
    if not table.file_io.exists(path):
        return 0
    journal = JOURNAL.read(table.file_io, path)
    if journal is None:
        return 0
    log.info("finishing interrupted expiry of snapshots [%s, %s) of %s", journal["begin"], journal["end"],
             table.table_path)
    return _carry_out(table, journal, None)
