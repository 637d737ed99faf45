"""Orphan files: what no snapshot or tag needs, and stale staging directories."""

from __future__ import annotations

import datetime as dt
import os
import time

from ..table import tables
from ..table.branches import snapshots_of_branches
from .expiry import finish_pending_expiry
from .metadata import Metadata, ProgressFn, list_tags, open_table


# `metadata`: Iceberg metadata (metadata.iceberg.storage), which its own refresh keeps and prunes.
# `index`: kept unless every snapshot's index manifest could be read (`_index_orphans`).
_ROOT_DIRS = {"schema", "snapshot", "tag", "consumer", "branch", "index", "statistics", "metadata"}


def remove_orphans(path: str, older_than: dt.timedelta = dt.timedelta(days=1), dry_run: bool = False,
                   fs_options: dict | None = None, progress: ProgressFn | None = None) -> list[str]:
    """Delete files under the table that no snapshot or tag needs and older than `older_than`.

    Covers manifest/ and the data directories, plus stale `_lakesink/staging/*`
    job directories. A commit in flight has written its files within the last
    moments; the age guard (default one day, never below one hour unless asked)
    keeps them. Pending commits kept in a checkpoint directory are outside the
    table: keep `older_than` longer than any checkpoint stays pending. Returns
    the paths deleted (or, with `dry_run`, that would be).
    """
    table = open_table(path, fs_options)
    if not dry_run:
        finish_pending_expiry(table)
    file_io = table.file_io
    root = table.table_path.rstrip("/")
    cutoff = time.time() - older_than.total_seconds()
    manager = table.snapshot_manager()
    needed = list(manager.list_snapshots()) + list(list_tags(table).values()) + snapshots_of_branches(table)
    referenced = Metadata(table).referenced(needed, progress)
    referenced = {os.path.normpath(p) for p in referenced}
    orphans: list[str] = _index_orphans(table, needed, cutoff)
    for status in file_io.list_status(root):
        name = status.base_name
        if name in _ROOT_DIRS:
            continue
        if name == tables.LAKESINK_DIR:
            orphans.extend(_stale_staging(file_io, f"{root}/{name}/staging", cutoff))
            continue
        for file_path, mtime in _walk(file_io, f"{root}/{name}", status):
            if os.path.normpath(file_path) not in referenced and mtime < cutoff:
                orphans.append(file_path)
    if not dry_run:
        for i, orphan in enumerate(orphans):
            if file_io.exists(orphan):
                if _is_dir(file_io, orphan):
                    file_io.delete_directory_quietly(orphan)
                else:
                    file_io.delete_quietly(orphan)
            if progress:
                progress("deleting", i + 1, len(orphans))
    return orphans


def _index_orphans(table, snapshots, cutoff: float) -> list[str]:
    """Files in `index/` (hash index, deletion vectors) that no snapshot's index manifest lists,
    of any index kind: those a commit killed before its snapshot wrote. None at all when an index
    manifest cannot be read: then no index file is known to be unneeded."""
    from pypaimon.manifest.index_manifest_file import IndexManifestFile

    file_io, directory = table.file_io, f"{table.table_path.rstrip('/')}/index"
    if not file_io.exists(directory):
        return []
    listed: set[str] = set()
    reader = IndexManifestFile(table)
    for name in {s.index_manifest for s in snapshots if s.index_manifest}:
        try:
            listed.update(e.index_file.file_name for e in reader.read(name) if e.kind == 0)
        except FileNotFoundError:
            return []
    return [path for path, mtime in _walk(file_io, directory)
            if os.path.basename(path) not in listed and mtime < cutoff]


def _is_dir(file_io, path: str) -> bool:
    import pyarrow.fs as pafs
    return file_io.get_file_status(path).type == pafs.FileType.Directory


def _walk(file_io, path: str, status=None):
    import pyarrow.fs as pafs
    status = status or file_io.get_file_status(path)
    if status.type == pafs.FileType.Directory:
        for child in file_io.list_status(path):
            yield from _walk(file_io, f"{path}/{child.base_name}", child)
    else:
        yield path, status.mtime or 0


def _stale_staging(file_io, staging: str, cutoff: float) -> list[str]:
    out = []
    if not file_io.exists(staging):
        return out
    for status in file_io.list_status(staging):
        directory = f"{staging}/{status.base_name}"
        newest = max((m for _, m in _walk(file_io, directory, status)), default=status.mtime or 0)
        if max(newest, status.mtime or 0) < cutoff:
            out.append(directory)
    return out
