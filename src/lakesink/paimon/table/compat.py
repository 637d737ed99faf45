"""pypaimon where lakesink needs more of it: manifests of older Paimon versions, and
snapshots that expire while they are read.

Paimon's manifests are Avro files. Each Paimon release may append fields to a
manifest entry's `_FILE` record (1.1 added `_VALUE_STATS_COLS`, later releases
`_EXTERNAL_PATH`, `_FIRST_ROW_ID`, `_WRITE_COLS`, ...), always as nullable fields
with a default, so that a reader can resolve an old file against its own schema
the Avro way: a field the writer did not know takes the reader's default. Java
Paimon reads every older manifest like that.

pypaimon 2.1 decodes manifests with the *writer's* schema and then indexes some
of the newer fields directly (`file_dict['_VALUE_STATS_COLS']`), so a table whose
manifests were written by Paimon 1.0 fails to plan with
`KeyError: '_VALUE_STATS_COLS'`. `install()` wraps pypaimon's manifest record
decoder so that every `_FILE` record missing a field of pypaimon's own
`DATA_FILE_META_SCHEMA` gets that field's declared default: the same result Avro
schema resolution gives. A null `_VALUE_STATS_COLS` is what Paimon itself writes
when the stats cover every column of the file's schema, which is exactly what
an older writer's stats cover, so the defaults carry the right meaning.

The wrapper only adds missing keys; records of current manifests pass unchanged.

pypaimon's `SnapshotManager.get_snapshot_by_id` returns None for a snapshot that
does not exist, but checks before it reads: a snapshot that expiry (lakesink's
background maintenance, or another writer's) deletes in between raises
`FileNotFoundError` instead, and with it `try_get_earliest_snapshot`, which a
commit's replay check reads (seen in CI: a commit failed beside its own
maintenance). `install()` makes such a snapshot what it is by then: not found.

`install()` is idempotent and is called by `tables.open_table`, the one place
lakesink opens tables (drivers, tasks and reader processes alike).
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_installed = False


def _file_defaults() -> dict:
    from pypaimon.manifest.schema.data_file_meta import DATA_FILE_META_SCHEMA

    return {field["name"]: field["default"] for field in DATA_FILE_META_SCHEMA["fields"] if "default" in field}


def upgrade_file_record(record: dict, defaults: dict) -> dict:
    """`record` (a manifest entry's `_FILE`) with every field it lacks set to its default."""
    missing = [name for name in defaults if name not in record]
    if not missing:
        return record
    upgraded = dict(record)
    for name in missing:
        upgraded[name] = defaults[name]
    return upgraded


def install() -> None:
    """Make pypaimon's manifest reader accept manifests of older Paimon versions."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        from pypaimon.manifest import manifest_file_manager as module

        original = module._read_manifest_records
        defaults = _file_defaults()

        def read_manifest_records(*args, **kwargs):
            for record, partition, prefix_filtered in original(*args, **kwargs):
                file_record = record.get("_FILE")
                if file_record is not None:
                    upgraded = upgrade_file_record(file_record, defaults)
                    if upgraded is not file_record:
                        record = dict(record)
                        record["_FILE"] = upgraded
                yield record, partition, prefix_filtered

        read_manifest_records.__wrapped__ = original  # type: ignore[attr-defined]
        # ManifestFileManager.read_entries looks the function up in its module at call time.
        module._read_manifest_records = read_manifest_records
        _tolerate_expiring_snapshots()
        _installed = True


def _tolerate_expiring_snapshots() -> None:
    from pypaimon.snapshot.snapshot_manager import SnapshotManager

    original = SnapshotManager.get_snapshot_by_id

    def get_snapshot_by_id(self, snapshot_id):
        try:
            return original(self, snapshot_id)
        except FileNotFoundError:  # expired between pypaimon's existence check and its read
            return None

    get_snapshot_by_id.__wrapped__ = original  # type: ignore[attr-defined]
    SnapshotManager.get_snapshot_by_id = get_snapshot_by_id
