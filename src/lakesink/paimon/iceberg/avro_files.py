"""Iceberg's Avro files, v2: a manifest (the data files of a snapshot) and a manifest list (its
manifests). Written with fastavro; every field carries the field id Iceberg's spec gives it, since
Iceberg readers match Avro fields by id, not by name."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass

import fastavro

from .schema import PARTITION_AVRO

# Deflate is one of the two codecs every Avro reader must have (null is the other).
CODEC = "deflate"
FORMAT_VERSION = 2
ADDED = 1  # manifest entry status
DATA = 0   # content of data files and of data manifests


def _optional(name: str, field_id: int, avro_type) -> dict:
    return {"name": name, "type": ["null", avro_type], "default": None, "field-id": field_id}


def _required(name: str, field_id: int, avro_type) -> dict:
    return {"name": name, "type": avro_type, "field-id": field_id}


def _metric_map(name: str, field_id: int, key_id: int, value_id: int, value_type: str) -> dict:
    """An Iceberg map of int keys, as Avro holds it: an array of key/value records."""
    entry = {"type": "record", "name": f"k{key_id}_v{value_id}",
             "fields": [_required("key", key_id, "int"), _required("value", value_id, value_type)]}
    return _optional(name, field_id, {"type": "array", "logicalType": "map", "items": entry})


def manifest_schema(partition: list[dict]) -> dict:
    """The manifest entry record for a partition spec (`schema.partition_fields`)."""
    partition_record = {"type": "record", "name": "r102",
                        "fields": [_optional(p["name"], p["field-id"], PARTITION_AVRO[p["type"]])
                                   for p in partition]}
    data_file = {"type": "record", "name": "r2", "fields": [
        _required("content", 134, "int"),
        _required("file_path", 100, "string"),
        _required("file_format", 101, "string"),
        _required("partition", 102, partition_record),
        _required("record_count", 103, "long"),
        _required("file_size_in_bytes", 104, "long"),
        _metric_map("value_counts", 109, 119, 120, "long"),
        _metric_map("null_value_counts", 110, 121, 122, "long"),
        _metric_map("lower_bounds", 125, 126, 127, "bytes"),
        _metric_map("upper_bounds", 128, 129, 130, "bytes"),
    ]}
    return {"type": "record", "name": "manifest_entry", "fields": [
        _required("status", 0, "int"),
        _optional("snapshot_id", 1, "long"),
        _optional("sequence_number", 3, "long"),
        _optional("file_sequence_number", 4, "long"),
        _required("data_file", 2, data_file),
    ]}


MANIFEST_LIST_SCHEMA = {"type": "record", "name": "manifest_file", "fields": [
    _required("manifest_path", 500, "string"),
    _required("manifest_length", 501, "long"),
    _required("partition_spec_id", 502, "int"),
    _required("content", 517, "int"),
    _required("sequence_number", 515, "long"),
    _required("min_sequence_number", 516, "long"),
    _required("added_snapshot_id", 503, "long"),
    _required("added_files_count", 504, "int"),
    _required("existing_files_count", 505, "int"),
    _required("deleted_files_count", 506, "int"),
    _required("added_rows_count", 512, "long"),
    _required("existing_rows_count", 513, "long"),
    _required("deleted_rows_count", 514, "long"),
]}


@dataclass(frozen=True)
class DataFile:
    """One live Parquet file of the snapshot, as a manifest lists it."""
    path: str
    partition: dict          # partition field name -> value
    record_count: int
    size: int
    metrics: dict | None = None  # `metrics.of_file`: value_counts, null_value_counts, lower/upper_bounds


def manifest_bytes(files: list[DataFile], snapshot_id: int, partition: list[dict], table_schema: dict,
                   spec_id: int = 0) -> bytes:
    """A manifest adding `files` in snapshot `snapshot_id` (its sequence number is the id too)."""
    spec = [{k: p[k] for k in ("name", "transform", "source-id", "field-id")} for p in partition]
    metadata = {"schema": json.dumps(table_schema), "schema-id": str(table_schema["schema-id"]),
                "partition-spec": json.dumps(spec), "partition-spec-id": str(spec_id),
                "format-version": str(FORMAT_VERSION), "content": "data"}
    records = ({"status": ADDED, "snapshot_id": snapshot_id, "sequence_number": snapshot_id,
                "file_sequence_number": snapshot_id,
                "data_file": {"content": DATA, "file_path": f.path, "file_format": "PARQUET",
                              "partition": f.partition, "record_count": f.record_count,
                              "file_size_in_bytes": f.size, **_metrics(f)}} for f in files)
    return _avro(manifest_schema(partition), records, metadata)


def _metrics(f: DataFile) -> dict:
    return {k: (v or None) for k, v in (f.metrics or {}).items()}


@dataclass(frozen=True)
class Manifest:
    path: str
    length: int
    files: int
    rows: int


def manifest_list_bytes(manifests: list[Manifest], snapshot_id: int, parent_id: int | None,
                        spec_id: int = 0) -> bytes:
    metadata = {"snapshot-id": str(snapshot_id), "parent-snapshot-id": str(parent_id) if parent_id else "null",
                "sequence-number": str(snapshot_id), "format-version": str(FORMAT_VERSION)}
    records = ({"manifest_path": m.path, "manifest_length": m.length, "partition_spec_id": spec_id,
                "content": DATA, "sequence_number": snapshot_id, "min_sequence_number": snapshot_id,
                "added_snapshot_id": snapshot_id, "added_files_count": m.files, "existing_files_count": 0,
                "deleted_files_count": 0, "added_rows_count": m.rows, "existing_rows_count": 0,
                "deleted_rows_count": 0} for m in manifests)
    return _avro(MANIFEST_LIST_SCHEMA, records, metadata)


def _avro(schema: dict, records, metadata: dict) -> bytes:
    out = io.BytesIO()
    records = list(records)
    # A sync marker of the content (fastavro's is random): the same snapshot gives the same bytes.
    marker = hashlib.sha256(json.dumps([metadata, records], sort_keys=True, default=str).encode()).digest()[:16]
    # The schema is written as given (field ids kept): fastavro's parsed form would drop them.
    fastavro.writer(out, fastavro.parse_schema(schema, _write_hint=False), records, codec=CODEC,
                    metadata=metadata, sync_marker=marker)
    return out.getvalue()


def read_manifest_list_paths(data: bytes) -> list[str]:
    """The manifests a manifest list names (to remove them with it)."""
    return [r["manifest_path"] for r in fastavro.reader(io.BytesIO(data))]
