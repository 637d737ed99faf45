"""Iceberg metadata kept in step with a Paimon table (`metadata.iceberg.storage`).

`refresh` makes the table's Iceberg metadata directory (`metadata_dir`) describe the table's latest
snapshot: one manifest of its live data files, a manifest list, `v<N>.metadata.json` (N the Paimon
snapshot id) and `version-hint.text`. Where that directory is follows Paimon
(`IcebergCommitCallback.catalogTableMetadataPath`): `<table>/metadata` for `table-location`, and for
`hadoop-catalog` the catalog storage of the table's warehouse, `<warehouse>/iceberg/<db>/<table>/metadata`
of a table at `<warehouse>/<db>.db/<table>` (an Iceberg Hadoop catalog at `<warehouse>/iceberg` lists
it as `<db>.<table>`); `metadata.iceberg.storage-location` chooses either explicitly. It rebuilds from the snapshot alone, so it is idempotent: run again after a
crash between the Paimon snapshot and the Iceberg files (by the next commit, or by maintenance), it
writes the same files under the same names and finishes what the crash left. Metadata of snapshots
Paimon has expired goes with their manifests. Of a primary-key table only the files at the highest
LSM level are listed (`visible`), as Paimon lists them: Iceberg readers do not merge a key's versions."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid

from pypaimon.utils.file_store_path_factory import canonical_data_file_path

from ... import storage
from ...errors import UnsupportedTableError
from ..commit.live_files import live_entries
from ..files.datafiles import PathsOf
from ..keyed.lsm_policy import LsmOptions
from . import avro_files, metadata, metrics, schema as ice_schema

log = logging.getLogger(__name__)

OPTION = "metadata.iceberg.storage"
LOCATION_OPTION = "metadata.iceberg.storage-location"
KINDS = ("table-location", "hadoop-catalog")  # the storage kinds lakesink writes
DIRECTORY = "metadata"
HINT = "version-hint.text"
_VERSION = re.compile(r"^v(\d+)\.metadata\.json$")


def storage_kind(options) -> str:
    return str((options or {}).get(OPTION, "disabled")).strip().lower()


def enabled(table) -> bool:
    return storage_kind(table.table_schema.options) in KINDS


def storage_location(options) -> str:
    """`table-location` or `catalog-location`: where the metadata goes, as Paimon decides it (the
    option `metadata.iceberg.storage-location`, else inferred: `table-location` for that storage,
    the catalog's storage for the others)."""
    explicit = str((options or {}).get(LOCATION_OPTION, "")).strip().lower()
    if explicit:
        return explicit
    return "table-location" if storage_kind(options) == "table-location" else "catalog-location"


def catalog_table_dir(table_path) -> str | None:
    """`<warehouse>/iceberg/<db>/<table>` of a table at `<warehouse>/<db>.db/<table>`; None for a table
    not in that layout (its warehouse is unknown)."""
    parent, _, name = str(table_path).rstrip("/").rpartition("/")
    warehouse, _, database = parent.rpartition("/")
    if not name or not warehouse.strip("/") or not database.endswith(".db") or database == ".db":
        return None
    return f"{warehouse}/iceberg/{database[:-len('.db')]}/{name}"


def layout_problem(table_path, options) -> str | None:
    """Why the Iceberg metadata of the table at `table_path` has nowhere to go, or None."""
    if storage_kind(options) not in KINDS or storage_location(options) != "catalog-location":
        return None
    if catalog_table_dir(table_path) is None:
        return (f"{OPTION}={storage_kind(options)} puts Iceberg metadata under the table's warehouse, at "
                "<warehouse>/iceberg/<db>/<table>/metadata, and this table is not at <warehouse>/<db>.db/<table> "
                "(a catalog's layout), so it has no warehouse. Keep such a table in a catalog's warehouse, or use "
                f"{OPTION}=table-location (or {LOCATION_OPTION}=table-location) for metadata in the table's own "
                "directory")
    return None


def _staged(table) -> bool:
    """A CREATE / REPLACE TABLE AS table in its staging directory: its metadata is written once it is
    renamed into place (a catalog-storage directory named after the staging one would be left behind)."""
    from ...storage.paths import STAGING_INFIX
    return STAGING_INFIX in str(table.table_path).rstrip("/").rpartition("/")[2]


def _location(table) -> str:
    return metadata.canonical(table.table_path)


def metadata_dir(table) -> str:
    options = table.table_schema.options
    if storage_location(options) == "table-location":
        return f"{str(table.table_path).rstrip('/')}/{DIRECTORY}"
    found = catalog_table_dir(table.table_path)
    if found is None:
        raise UnsupportedTableError(f"{table.table_path}: {layout_problem(table.table_path, options)}.",
                                    table=str(table.table_path))
    return f"{found}/{DIRECTORY}"


def version_path(table, version: int) -> str:
    return f"{metadata_dir(table)}/v{version}.metadata.json"


def check(table, history: bool = True) -> None:
    """Refuse, before anything is written, a table whose columns Iceberg metadata cannot describe
    (`history`: nor the names its older schemas gave them)."""
    if not enabled(table):
        return
    reason = (layout_problem(table.table_path, table.table_schema.options)
              or keyed_problem(table.primary_keys, table.partition_keys, table.table_schema.options)
              or ice_schema.problem(table.table_schema.fields, list(table.partition_keys or [])))
    if reason is None and history:
        reason = ice_schema.reused_name(_all_schemas(table, table.table_schema.id))
    if reason is not None:
        raise UnsupportedTableError(f"{table.table_path} has {OPTION}={storage_kind(table.table_schema.options)}, "
                                    f"but {reason}. Nothing was written.", table=str(table.table_path))


def _all_schemas(table, newest: int) -> list[list]:
    """The fields of every schema up to `newest`, oldest first."""
    out = []
    for schema_id in range(0, newest + 1):
        found = table.schema_manager.get_schema(schema_id)
        if found is not None:
            out.append(found.fields)
    return out


def keyed_problem(primary_keys, partition_keys, table_options) -> str | None:
    """Why the highest LSM level of this primary-key table does not show each key once, or None.
    A cross-partition table (`bucket=-1`, a key without every partition column) moves a key to
    another partition with a retraction in the old one: both partitions' highest levels would
    hold it until both buckets are fully compacted."""
    primary_keys, partition_keys = list(primary_keys or []), list(partition_keys or [])
    bucket = str((table_options or {}).get("bucket", "-1")).strip()
    if primary_keys and bucket == "-1" and not set(partition_keys) <= set(primary_keys):
        return ("its primary key does not hold every partition column (a cross-partition table): a key moving "
                "to another partition would be shown in both by Iceberg readers until both buckets are fully "
                "compacted. Include the partition columns in the primary key, or unset the option")
    return None


def check_new(schema, partition_keys: list[str], table_options, primary_keys=(), path: str | None = None) -> None:
    """`check` for a table a write will create at `path`: its Arrow schema, options and primary key."""
    if storage_kind(table_options) not in KINDS:
        return
    from pypaimon import Schema
    reason = ((layout_problem(path, table_options) if path is not None else None)
              or keyed_problem(primary_keys, partition_keys, table_options)
              or ice_schema.problem(Schema.from_pyarrow_schema(schema).fields, list(partition_keys)))
    if reason is not None:
        raise UnsupportedTableError(f"{OPTION}={storage_kind(table_options)}: {reason}. Nothing was written.")


def refresh(table) -> int | None:
    """Make the table's Iceberg metadata describe its latest snapshot. Returns that snapshot's id
    (None: no snapshot yet). Safe to run any number of times and from any writer."""
    snapshot = table.snapshot_manager().get_latest_snapshot()
    if snapshot is None:
        return None
    catalog_storage = storage_location(table.table_schema.options) == "catalog-location"
    if catalog_storage and _staged(table):
        return None
    file_io = table.file_io
    # The directory is listed once per refresh (each version kept is three files there): the
    # versions other than this snapshot's are all a refresh needs from it.
    versions = _versions(table)
    path = version_path(table, snapshot.id)
    current = _read_json(file_io, path)
    if not metadata.describes(current, snapshot, _location(table)):
        if catalog_storage and snapshot.id == 1:
            # As Paimon: catalog storage outlives a dropped table, so a table's first snapshot
            # starts the directory afresh (versions of the table that was there before go).
            if file_io.exists(metadata_dir(table)):
                file_io.delete(metadata_dir(table), True)
            versions = []
        _write_version(table, snapshot, _table_uuid(table, file_io, versions))
    _advance_hint(table, snapshot)
    _drop_expired(table, snapshot.id, versions)
    return snapshot.id


def _write_version(table, snapshot, table_uuid: str) -> None:
    file_io = table.file_io
    manager = table.schema_manager
    # The newest schema: another writer may have evolved it since `table` was opened.
    current_id = max(table.table_schema.id, snapshot.schema_id)
    fields_of = {sid: manager.get_schema(sid).fields for sid in {snapshot.schema_id, current_id}}
    for schema_id in range(0, current_id):  # older schemas too: their names for the name mapping
        if schema_id not in fields_of:
            found = manager.get_schema(schema_id)
            if found is not None and ice_schema.problem(found.fields, []) is None:
                fields_of[schema_id] = found.fields
    current_fields = fields_of[current_id]
    reused = ice_schema.reused_name(_all_schemas(table, current_id))
    if reused is not None:
        raise UnsupportedTableError(f"{table.table_path}: no Iceberg metadata written: {reused}.")
    partition = ice_schema.partition_fields(current_fields, list(table.partition_keys or []))
    current_schema = ice_schema.iceberg_schema(current_id, current_fields)

    live = _files(table, visible(table, live_entries(table, snapshot)), partition, current_fields)
    parent = table.snapshot_manager().get_snapshot_by_id(snapshot.id - 1) if snapshot.id > 1 else None
    before = (_files(table, visible(table, live_entries(table, parent)), partition, current_fields,
                     with_metrics=False)
              if parent is not None else {})
    added = [f for key, f in live.items() if key not in before]
    removed = [f for key, f in before.items() if key not in live]
    changed = {json.dumps(f.partition, sort_keys=True, default=str) for f in added + removed}

    # Names fixed by the snapshot's identity: a rerun after a crash rewrites the same files.
    token = hashlib.sha256(json.dumps(metadata.identity(snapshot) | {"t": snapshot.time_millis},
                                      sort_keys=True).encode()).hexdigest()[:16]
    directory = metadata_dir(table)
    files = list(live.values())
    manifests = []
    if files:
        manifest_path = f"{directory}/{snapshot.id}-{token}-m0.avro"
        data = avro_files.manifest_bytes(files, snapshot.id, partition, current_schema)
        _write_bytes(file_io, manifest_path, data)
        manifests.append(avro_files.Manifest(manifest_path, len(data), len(files),
                                             sum(f.record_count for f in files)))
    list_path = f"{directory}/snap-{snapshot.id}-{token}.avro"
    _write_bytes(file_io, list_path, avro_files.manifest_list_bytes(
        manifests, snapshot.id, parent.id if parent is not None else None))

    def totals(group):
        return len(group), sum(f.record_count for f in group), sum(f.size for f in group)

    doc = metadata.document(
        table_uuid=table_uuid, location=_location(table), snapshot=snapshot,
        manifest_list=list_path, schemas=fields_of, current_schema_id=current_id,
        partition=partition, primary_keys=list(table.primary_keys or []),
        snapshot_summary=metadata.summary(snapshot, totals(added), totals(removed), totals(files), len(changed)))
    storage.write_atomically(file_io, version_path(table, snapshot.id), json.dumps(doc, indent=1))


def visible(table, entries) -> list:
    """The entries Iceberg readers may read as they are. Append tables: all. Primary-key tables:
    the files at the highest LSM level (`num-levels` - 1), as Paimon's Iceberg metadata lists them:
    one sorted run per bucket, written by a compaction that merged every run of the bucket, so no
    key is in two of them and no retraction is left (a full compaction drops them). Lower levels
    hold newer versions that only a merging reader can order; with deletion vectors, the vectors
    are not exposed either (Paimon exposes them only as Iceberg v3 deletion vectors of 64-bit
    bitmaps, which lakesink does not write), so a file shows every row it holds."""
    if not table.primary_keys:
        return list(entries)
    top = LsmOptions.of_table(table).max_level
    return [e for e in entries if e.file.level == top]


def _files(table, entries, partition: list[dict], current_fields,
           with_metrics: bool = True) -> dict[tuple, avro_files.DataFile]:
    """The entries' files by (partition, bucket, name); with their paths and metrics (`with_metrics`)
    or only their counts (to compare with the previous snapshot)."""
    names = [p["name"] for p in partition]
    current = {f.id: ice_type for f, ice_type in _typed(current_fields)}
    schemas: dict[int, list] = {}
    paths = PathsOf(table)  # one path factory for all files (pypaimon makes one per call)
    out = {}
    for e in entries:
        values = tuple(e.partition.values)
        path, found_metrics = "", None
        if with_metrics:
            path = e.file.external_path or canonical_data_file_path(paths, values, e.bucket, e.file.file_name)
            if e.file.schema_id not in schemas:
                found = table.schema_manager.get_schema(e.file.schema_id)
                schemas[e.file.schema_id] = found.fields if found is not None else []
            found_metrics = metrics.of_file(e.file, schemas[e.file.schema_id], current)
        out[(values, e.bucket, e.file.file_name)] = avro_files.DataFile(
            path, dict(zip(names, values)), e.file.row_count, e.file.file_size, found_metrics)
    return out


def _typed(fields) -> list:
    """(field, Iceberg type) of the top-level columns Iceberg can describe."""
    out = []
    for f in fields:
        try:
            out.append((f, ice_schema.iceberg_type(f.name, f.type)))
        except UnsupportedTableError:
            continue
    return out


def _table_uuid(table, file_io, versions: list[int]) -> str:
    """The uuid of the metadata readers know (the hint's version, else the newest of `versions`,
    those in the directory), so they keep refreshing one table."""
    hinted = _read_hint(file_io, table)
    for version in ([hinted] if hinted is not None else []) + sorted(versions, reverse=True):
        found = _read_json(file_io, version_path(table, version))
        if found and found.get("table-uuid"):
            return found["table-uuid"]
    return str(uuid.uuid4())


def _versions(table) -> list[int]:
    """The metadata versions in the table's metadata directory: one listing of its names."""
    try:
        names = storage.list_names(table.file_io, metadata_dir(table))
    except OSError:
        return []
    return [int(m.group(1)) for m in map(_VERSION.match, names) if m]


def _advance_hint(table, snapshot) -> None:
    """Point `version-hint.text` at this version unless it names a newer one that still describes a
    live snapshot (a slower writer refreshing an older snapshot must not move readers back)."""
    file_io = table.file_io
    hinted = _read_hint(file_io, table)
    if hinted == snapshot.id:
        return
    if hinted is not None and hinted > snapshot.id:
        newer = table.snapshot_manager().get_snapshot_by_id(hinted) if _snapshot_exists(table, hinted) else None
        if newer is not None and metadata.describes(_read_json(file_io, version_path(table, hinted)), newer,
                                                   _location(table)):
            return
    storage.write_atomically(file_io, f"{metadata_dir(table)}/{HINT}", str(snapshot.id))


def _drop_expired(table, current: int, versions: list[int]) -> None:
    """Remove the metadata of snapshots Paimon no longer has (expired or rolled back), with their
    manifest lists and manifests: no reader can read those versions' data files any more.
    `versions`: those in the metadata directory."""
    file_io = table.file_io
    gone = []
    older = sorted(v for v in versions if v < current)
    for version in older:  # Paimon's snapshots are contiguous: the first one there ends the search
        if _snapshot_exists(table, version):
            break
        gone.append(version)
    gone += [v for v in versions if v > current and not _snapshot_exists(table, v)]
    for version in gone:
        path = version_path(table, version)
        doc = _read_json(file_io, path)
        if doc is None:
            continue
        try:
            for snap in doc.get("snapshots", []):
                manifest_list = snap.get("manifest-list")
                if manifest_list and file_io.exists(manifest_list):
                    for manifest in avro_files.read_manifest_list_paths(_read_bytes(file_io, manifest_list)):
                        file_io.delete_quietly(manifest)
                    file_io.delete_quietly(manifest_list)
        except (OSError, ValueError):  # another refresh removing the same version: it finishes the job
            continue
        file_io.delete_quietly(path)


def _snapshot_exists(table, snapshot_id: int) -> bool:
    return table.file_io.exists(table.snapshot_manager().get_snapshot_path(snapshot_id))


def _read_hint(file_io, table) -> int | None:
    path = f"{metadata_dir(table)}/{HINT}"
    try:
        if not file_io.exists(path):
            return None
        return int(file_io.read_file_utf8(path).strip())
    except (OSError, ValueError):
        return None


def _read_json(file_io, path: str) -> dict | None:
    try:
        if not file_io.exists(path):
            return None
        return json.loads(file_io.read_file_utf8(path))
    except (OSError, ValueError):
        return None


def _read_bytes(file_io, path: str) -> bytes:
    with file_io.new_input_stream(path) as stream:
        return stream.read()


def _write_bytes(file_io, path: str, data: bytes) -> None:
    with storage.new_output(file_io, path) as out:
        out.write(data)
