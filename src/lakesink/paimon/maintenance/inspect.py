"""Inspecting a table: its history, its files, and whether its latest snapshot is whole."""

from __future__ import annotations

import json

import pyarrow as pa
from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager

from ...errors import SnapshotNotFoundError
from .metadata import ProgressFn, data_file_path, open_table
from ..commit.live_files import live_entries


_HISTORY_SCHEMA = pa.schema([
    ("snapshot_id", pa.int64()), ("commit_kind", pa.string()), ("commit_user", pa.string()),
    ("commit_identifier", pa.int64()), ("committed_at", pa.timestamp("ms", tz="UTC")),
    ("commit_duration_ms", pa.int64()), ("attempts", pa.int64()), ("rows_added", pa.int64()),
    ("files_added", pa.int64()), ("bytes_added", pa.int64()), ("files_removed", pa.int64()),
    ("total_rows", pa.int64()), ("delta_rows", pa.int64()),
])


def _int_prop(props: dict, key: str) -> int | None:
    try:
        return int(props[key])
    except (KeyError, TypeError, ValueError):
        return None


def history(path: str, fs_options: dict | None = None, progress: ProgressFn | None = None) -> pa.Table:
    """One row per retained snapshot, oldest first.

    `rows_added`/`files_added`/`bytes_added` come from lakesink's snapshot
    properties; for snapshots other writers made, files come from the delta
    manifest list and rows from the snapshot's delta record count.
    """
    table = open_table(path, fs_options)
    lists = ManifestListManager(table)
    rows = []
    snapshots = table.snapshot_manager().list_snapshots()
    for i, s in enumerate(snapshots):
        props = s.properties or {}
        try:
            delta = lists.read_delta(s)
            added = sum(m.num_added_files for m in delta)
            removed = sum(m.num_deleted_files for m in delta)
        except FileNotFoundError:
            added = removed = None
        started = _int_prop(props, "lakesink.commit-started-ms")
        rows.append({
            "snapshot_id": s.id, "commit_kind": s.commit_kind, "commit_user": s.commit_user,
            "commit_identifier": s.commit_identifier, "committed_at": s.time_millis,
            "commit_duration_ms": (s.time_millis - started) if started is not None else None,
            "attempts": _int_prop(props, "lakesink.commit-attempt"),
            "rows_added": _int_prop(props, "lakesink.rows-added") if "lakesink.rows-added" in props
            else (s.delta_record_count if s.delta_record_count and s.delta_record_count > 0 else 0),
            "files_added": _int_prop(props, "lakesink.files-added") if "lakesink.files-added" in props else added,
            "bytes_added": _int_prop(props, "lakesink.bytes-added"),
            "files_removed": removed,
            "total_rows": s.total_record_count, "delta_rows": s.delta_record_count,
        })
        if progress:
            progress("reading snapshots", i + 1, len(snapshots))
    return pa.Table.from_pylist(rows, schema=_HISTORY_SCHEMA)


def files(path: str, snapshot_id: int | None = None, fs_options: dict | None = None) -> pa.Table:
    """The data files of a snapshot (latest by default)."""
    table = open_table(path, fs_options)
    snapshot = None
    if snapshot_id is not None:
        snapshot = table.snapshot_manager().get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise SnapshotNotFoundError(f"Snapshot {snapshot_id} does not exist in {table.table_path}.",
                                        table=table.table_path, snapshot=snapshot_id)
    rows = [{"partition": json.dumps(dict(zip(table.partition_keys, entry.partition.values)), default=str),
             "bucket": entry.bucket, "file": data_file_path(table, entry),
             "rows": entry.file.row_count, "bytes": entry.file.file_size, "level": entry.file.level}
            for entry in live_entries(table, snapshot)]
    schema = pa.schema([("partition", pa.string()), ("bucket", pa.int32()), ("file", pa.string()),
                        ("rows", pa.int64()), ("bytes", pa.int64()), ("level", pa.int32())])
    return pa.Table.from_pylist(rows, schema=schema)


def verify(path: str, fs_options: dict | None = None, progress: ProgressFn | None = None) -> list[str]:
    """Problems with the latest snapshot: unreadable schema/manifests, missing or resized files."""
    table = open_table(path, fs_options)
    problems: list[str] = []
    snapshot = table.snapshot_manager().get_latest_snapshot()
    if snapshot is None:
        return problems
    try:
        if table.schema_manager.get_schema(snapshot.schema_id) is None:
            problems.append(f"schema {snapshot.schema_id} of snapshot {snapshot.id} is missing")
    except Exception as exc:
        problems.append(f"schema {snapshot.schema_id} is unreadable: {exc}")
    lists = ManifestListManager(table)
    manifests = ManifestFileManager(table)
    try:
        metas = lists.read_all(snapshot)
    except Exception as exc:
        return problems + [f"manifest list of snapshot {snapshot.id} is unreadable: {exc}"]
    entries = []
    for meta in metas:
        try:
            entries.extend(manifests.read(meta.file_name, file_size=meta.file_size))
        except Exception as exc:
            problems.append(f"manifest {meta.file_name} is unreadable: {exc}")
    from pypaimon.manifest.schema.file_entry import FileEntry
    live = [e for e in FileEntry.merge_entries(entries) if e.kind == 0]
    file_io = table.file_io
    for i, entry in enumerate(live):
        file_path = data_file_path(table, entry)
        if not file_io.exists(file_path):
            problems.append(f"data file {file_path} is missing")
        else:
            size = file_io.get_file_size(file_path)
            if size != entry.file.file_size:
                problems.append(f"data file {file_path} has {size} bytes, the manifest says {entry.file.file_size}")
        if progress:
            progress("checking files", i + 1, len(live))
    return problems
