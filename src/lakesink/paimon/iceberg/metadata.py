"""Iceberg's table metadata document (`v<N>.metadata.json`, format v2) for one Paimon snapshot.

The Iceberg snapshot id and sequence number are the Paimon snapshot id, as in Paimon's own Iceberg
compatibility, and the document names the Paimon snapshot it describes (commit user, identifier,
time) in the snapshot summary, so a later refresh can tell a document that is current from one a
rollback left behind under the same id."""

from __future__ import annotations

import json

from ... import storage
from . import schema as ice_schema

# Summary keys naming the Paimon snapshot a document describes.
PAIMON_SNAPSHOT = "paimon.snapshot-id"
PAIMON_USER = "paimon.commit-user"
PAIMON_IDENTIFIER = "paimon.commit-identifier"
_OPERATIONS = {"APPEND": "append", "COMPACT": "replace", "OVERWRITE": "overwrite"}


def canonical(location) -> str | None:
    """One spelling of a table location (a local one without `file:`)."""
    if not location:
        return None
    location = storage.normalize(str(location))
    return storage.local_path(location) or location


def identity(snapshot) -> dict[str, str]:
    return {PAIMON_SNAPSHOT: str(snapshot.id), PAIMON_USER: str(snapshot.commit_user),
            PAIMON_IDENTIFIER: str(snapshot.commit_identifier)}


def describes(document: dict | None, snapshot, location: str) -> bool:
    """Whether `document` is the metadata of exactly this Paimon snapshot of the table at
    `location` (a table staged elsewhere and moved in by a rename has other paths)."""
    if not document or canonical(document.get("location")) != canonical(location):
        return False
    current = document.get("current-snapshot-id")
    for entry in document.get("snapshots", []):
        if entry.get("snapshot-id") == current == snapshot.id:
            summary = entry.get("summary", {})
            return (all(summary.get(k) == v for k, v in identity(snapshot).items())
                    and entry.get("timestamp-ms") == snapshot.time_millis)
    return False


def summary(snapshot, added: tuple[int, int, int], removed: tuple[int, int, int], total: tuple[int, int, int],
            changed_partitions: int) -> dict[str, str]:
    """Iceberg's snapshot summary: (files, records, bytes) added, removed and in total."""
    out = {"operation": _OPERATIONS.get(str(snapshot.commit_kind).upper(), "overwrite"),
           "added-data-files": added[0], "added-records": added[1], "added-files-size": added[2],
           "deleted-data-files": removed[0], "deleted-records": removed[1], "removed-files-size": removed[2],
           "changed-partition-count": changed_partitions,
           "total-data-files": total[0], "total-records": total[1], "total-files-size": total[2],
           "total-delete-files": 0, "total-position-deletes": 0, "total-equality-deletes": 0}
    out = {k: str(v) for k, v in out.items()}
    out.update(identity(snapshot))
    return out


def document(*, table_uuid: str, location: str, snapshot, manifest_list: str, schemas: dict[int, list],
             current_schema_id: int, partition: list[dict], snapshot_summary: dict[str, str],
             primary_keys: list[str] = ()) -> dict:
    """The metadata of one snapshot. `schemas`: Paimon schema id -> its fields (those Iceberg can
    describe; the current one and the snapshot's among them). `primary_keys`: a primary-key
    table's, whose files also hold key-value columns the name mapping names."""
    iceberg_schemas = [ice_schema.iceberg_schema(sid, fields) for sid, fields in sorted(schemas.items())]
    spec = [{k: p[k] for k in ("name", "transform", "source-id", "field-id")} for p in partition]
    ordered = [fields for _, fields in sorted(schemas.items())]
    mapping = ice_schema.name_mapping(ordered) + ice_schema.key_value_mapping(ordered, list(primary_keys))
    entry = {"snapshot-id": snapshot.id, "sequence-number": snapshot.id, "timestamp-ms": snapshot.time_millis,
             "manifest-list": manifest_list, "summary": snapshot_summary, "schema-id": snapshot.schema_id}
    if snapshot.id > 1:
        entry["parent-snapshot-id"] = snapshot.id - 1
    return {
        "format-version": 2,
        "table-uuid": table_uuid,
        "location": location,
        "last-sequence-number": snapshot.id,
        "last-updated-ms": snapshot.time_millis,
        "last-column-id": max(ice_schema.highest_field_id(f) for f in schemas.values()),
        "current-schema-id": current_schema_id,
        "schemas": iceberg_schemas,
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": spec}],
        "last-partition-id": max([p["field-id"] for p in partition],
                                 default=ice_schema.FIRST_PARTITION_FIELD_ID - 1),
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {"schema.name-mapping.default": json.dumps(mapping)},
        "current-snapshot-id": snapshot.id,
        "refs": {"main": {"snapshot-id": snapshot.id, "type": "branch"}},
        "snapshots": [entry],
        "snapshot-log": [{"snapshot-id": snapshot.id, "timestamp-ms": snapshot.time_millis}],
        "metadata-log": [],
    }
