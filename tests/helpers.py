"""Reading tables back with pypaimon directly (never only with lakesink's own code)."""

from __future__ import annotations

import os

import pyarrow as pa


def read_table(path: str, snapshot_id: int | None = None) -> pa.Table:
    from pypaimon.table.file_store_table import FileStoreTable

    table = FileStoreTable.from_path(str(path))
    if _has_old_manifests(table):
        # Written by an older Paimon (the Java oracle, 1.0): pypaimon 2.1 cannot read its manifests
        # (no _VALUE_STATS_COLS); lakesink's table reads them through its own FileIO, pypaimon the rest.
        from lakesink.paimon.table.tables import open_table
        table = open_table(str(path))
    if snapshot_id is not None:
        table = table.copy({"scan.snapshot-id": str(snapshot_id)})
    builder = table.new_read_builder()
    return builder.new_read().to_arrow(builder.new_scan().plan().splits())


def _has_old_manifests(table) -> bool:
    try:
        table.new_read_builder().new_scan().plan()
    except KeyError as exc:
        if "_VALUE_STATS_COLS" in str(exc):
            return True
        raise
    return False


def snapshots(path: str):
    from pypaimon.table.file_store_table import FileStoreTable

    return FileStoreTable.from_path(str(path)).snapshot_manager().list_snapshots()


def latest_snapshot_id(path: str) -> int | None:
    snaps = snapshots(path) if os.path.exists(os.path.join(str(path), "snapshot")) else []
    return snaps[-1].id if snaps else None


def referenced_data_files(path: str) -> set[str]:
    """Absolute paths of data files any retained snapshot references."""
    from pypaimon.table.file_store_table import FileStoreTable
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path

    table = FileStoreTable.from_path(str(path))
    if table.table_schema.options.get("merge-engine") == "first-row":
        # Scans of first-row tables skip level-0 files (readers never see them): list them too.
        table = table.copy({"merge-engine": "deduplicate"})
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager

    out = set()
    lists, entries = ManifestListManager(table), ManifestFileManager(table)
    for snap in table.snapshot_manager().list_snapshots():
        scan = table.copy({"scan.snapshot-id": str(snap.id)}).new_read_builder().new_scan()
        for split in scan.plan().splits():
            for f in split.files:
                out.add(os.path.normpath(canonical_data_file_path(table, tuple(split.partition.values),
                                                                  split.bucket, f.file_name)))
        if table.total_buckets == -2:  # postpone buckets: scans skip them, the manifests list them
            from pypaimon.manifest.schema.file_entry import FileEntry
            for e in FileEntry.merge_entries(entries.read_entries_parallel(lists.read_all(snap))):
                if e.kind == 0:
                    out.add(os.path.normpath(canonical_data_file_path(table, tuple(e.partition.values), e.bucket,
                                                                      e.file.file_name)))
        changelog = lists.read_changelog(snap)  # changelog producers: the snapshot's changelog files
        for e in entries.read_entries_parallel(changelog) if changelog else []:
            out.add(os.path.normpath(canonical_data_file_path(table, tuple(e.partition.values), e.bucket,
                                                              e.file.file_name)))
    return out


def data_files_on_disk(path: str) -> set[str]:
    """Every .parquet file under the table directory, staging included."""
    out = set()
    for root, _, files in os.walk(str(path)):
        for name in files:
            if name.endswith(".parquet"):
                out.add(os.path.normpath(os.path.join(root, name)))
    return out


def leftover_files(path: str) -> set[str]:
    """Data files on disk that no snapshot references: must be empty after any job."""
    if not os.path.exists(os.path.join(str(path), "snapshot")):
        return data_files_on_disk(path)
    return data_files_on_disk(path) - referenced_data_files(path)


def pypaimon_append(table, rows: pa.Table) -> None:
    """One snapshot written by pypaimon's own batch writer (another writer than lakesink)."""
    builder = table.new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    try:
        write.write_arrow(rows)
        commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()


PATHS = ["fast", "native"]


def write(df, path: str, path_kind: str, mode: str = "append", **options) -> None:
    """One job on the chosen write path ("fast" or "native"); options by their writer names."""
    import lakesink

    if path_kind == "fast":
        lakesink.write(df, path, mode=mode, options=options)
    else:
        writer = df.write.format("paimon").mode(mode)
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save(path)
