"""pypaimon where lakesink needs more of it: manifests of older Paimon versions, and
snapshots that expire while they are read. Only lakesink's own tables get it:
pypaimon's functions and classes stay as they are for any other code in the process.

Paimon's manifests are Avro files. Each Paimon release may append fields to a
manifest entry's `_FILE` record (1.1 added `_VALUE_STATS_COLS`, later releases
`_EXTERNAL_PATH`, `_FIRST_ROW_ID`, `_WRITE_COLS`, ...), always as nullable fields
with a default, so that a reader can resolve an old file against its own schema
the Avro way: a field the writer did not know takes the reader's default. Java
Paimon reads every older manifest like that.

pypaimon 2.1 decodes manifests with the *writer's* schema and then indexes some
of the newer fields directly (`file_dict['_VALUE_STATS_COLS']`), so a table whose
manifests were written by Paimon 1.0 fails to plan with
`KeyError: '_VALUE_STATS_COLS'`. The `FileIO` of a table lakesink opens
(`table_file_io`) hands every reader of such a manifest (pypaimon's scans and
commits included: they read through the table's FileIO) the same entries
re-encoded with those fields added, each set to the default of pypaimon's own
`DATA_FILE_META_SCHEMA`: the result Avro schema resolution gives. A null
`_VALUE_STATS_COLS` is what Paimon itself writes when the stats cover every column
of the file's schema, which is exactly what an older writer's stats cover, so the
defaults carry the right meaning. Current manifests pass unchanged.

pypaimon's `SnapshotManager.get_snapshot_by_id` returns None for a snapshot that
does not exist, but checks before it reads: a snapshot that expiry (lakesink's
background maintenance, or another writer's) deletes in between raises
`FileNotFoundError` instead, and with it `try_get_earliest_snapshot`, which a
commit's replay check reads (seen in CI: a commit failed beside its own
maintenance). The snapshot manager of a lakesink table (`Table.snapshot_manager`,
which pypaimon's own scans and commits ask too) makes such a snapshot what it is
by then: not found.

`tables.open_table`, the one place lakesink opens tables (drivers, tasks and reader
processes alike), builds a `Table` over `table_file_io(...)`.
"""

from __future__ import annotations

import copy
import functools
import io
import threading

from pypaimon.common.file_io import FileIO
from pypaimon.snapshot.snapshot_manager import SnapshotManager
from pypaimon.table.file_store_table import FileStoreTable

_lock = threading.Lock()


# -- manifests of older Paimon versions -------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _file_fields() -> dict[str, dict]:
    """The `_FILE` fields an older writer may lack: pypaimon's, those with a default."""
    from pypaimon.manifest.schema.data_file_meta import DATA_FILE_META_SCHEMA

    return {field["name"]: field for field in DATA_FILE_META_SCHEMA["fields"] if "default" in field}


@functools.lru_cache(maxsize=1)
def _needles() -> tuple[bytes, ...]:
    return tuple(f'"{name}"'.encode() for name in _file_fields())


def upgrade_file_record(record: dict, defaults: dict) -> dict:
    """`record` (a manifest entry's `_FILE`) with every field it lacks set to its default."""
    missing = [name for name in defaults if name not in record]
    if not missing:
        return record
    upgraded = dict(record)
    for name in missing:
        upgraded[name] = defaults[name]
    return upgraded


def _is_manifest(path: str) -> bool:
    """A manifest file (entries), not a manifest list or an index manifest."""
    name = str(path).rstrip("/").rsplit("/", 1)[-1]
    return name.startswith("manifest-") and not name.startswith("manifest-list-")


def upgrade_manifest(data: bytes) -> bytes:
    """The manifest file `data`, re-encoded with the `_FILE` fields its writer did not know
    (each at its default); `data` itself when it lacks none."""
    import fastavro

    if all(needle in data for needle in _needles()):
        return data  # every field is named in the header's schema (JSON): a current manifest, as is
    wanted = _file_fields()
    reader = fastavro.reader(io.BytesIO(data))
    schema = reader.writer_schema
    fields = schema.get("fields", []) if isinstance(schema, dict) else []
    file_type = next((f["type"] for f in fields if f.get("name") == "_FILE"), None)
    if not isinstance(file_type, dict) or file_type.get("type") != "record":
        return data  # not the layout pypaimon reads by name: leave it to pypaimon
    known = {f["name"] for f in file_type["fields"]}
    missing = [field for name, field in wanted.items() if name not in known]
    if not missing:
        return data
    schema = copy.deepcopy(schema)
    file_record = next(f["type"] for f in schema["fields"] if f.get("name") == "_FILE")
    file_record["fields"].extend(copy.deepcopy(missing))
    defaults = {field["name"]: field["default"] for field in missing}
    records = []
    for record in reader:
        record["_FILE"] = upgrade_file_record(record["_FILE"], defaults)
        records.append(record)
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records, codec="null")
    return out.getvalue()


def _new_input_stream(self, path: str):
    """A table's FileIO reading a manifest file: as `upgrade_manifest` gives it."""
    stream = _PLAIN[type(self)].new_input_stream(self, path)
    if not _is_manifest(path):
        return stream
    with stream:
        data = stream.read()
    return io.BytesIO(upgrade_manifest(data))


def _reduce_ex(self, protocol):
    # The class is made at run time: pickle the plain FileIO, made ours again on load.
    base = _PLAIN[type(self)]
    plain = base.__new__(base)
    state = self.__getstate__()
    if hasattr(plain, "__setstate__"):
        plain.__setstate__(state)
    elif state:
        plain.__dict__.update(state)
    return _reading_older_manifests, (plain,)


_OURS: dict[type, type] = {}   # pypaimon's FileIO class -> the same reading older manifests
_PLAIN: dict[type, type] = {}  # and back
_TABLE_IO: dict[int, tuple[FileIO, FileIO]] = {}  # id(shared FileIO) -> (it, the tables' copy)


def reads_older_manifests(file_io) -> bool:
    return type(file_io) in _PLAIN


def _reading_older_manifests(file_io: FileIO) -> FileIO:
    """`file_io` itself, its class now a subclass of its own that reads older manifests (the
    methods go straight into the subclass: a mixin base would change the instance layout)."""
    base = type(file_io)
    with _lock:
        ours = _OURS.get(base)
        if ours is None:
            ours = type(base.__name__, (base,), {"__module__": __name__, "new_input_stream": _new_input_stream,
                                                 "__reduce_ex__": _reduce_ex})
            _OURS[base], _PLAIN[ours] = ours, base
    file_io.__class__ = ours
    return file_io


def table_file_io(file_io):
    """The FileIO lakesink's tables read through: a copy of `file_io` (shared by every use of
    its store) that reads manifests of older Paimon versions. Anything that is not one of
    pypaimon's FileIOs passes unchanged."""
    if not isinstance(file_io, FileIO) or reads_older_manifests(file_io):
        return file_io
    with _lock:
        kept = _TABLE_IO.get(id(file_io))
    if kept is not None and kept[0] is file_io:
        return kept[1]
    ours = _reading_older_manifests(copy.copy(file_io))
    with _lock:
        _TABLE_IO[id(file_io)] = (file_io, ours)
    return ours


# -- snapshots expired while read -------------------------------------------------------------
class TolerantSnapshotManager(SnapshotManager):
    """A snapshot deleted between pypaimon's existence check and its read is not found (None)."""

    def get_snapshot_by_id(self, snapshot_id):
        try:
            return super().get_snapshot_by_id(snapshot_id)
        except FileNotFoundError:  # expired between pypaimon's existence check and its read
            return None

    def copy_with_branch(self, branch_name: str) -> SnapshotManager:
        manager = super().copy_with_branch(branch_name)
        manager.__class__ = type(self)
        return manager


class Table(FileStoreTable):
    """pypaimon's table, whose snapshot manager (for lakesink's code and pypaimon's scans and
    commits alike) tolerates snapshots expiring while read. Copies stay `Table`s."""

    def snapshot_manager(self):
        manager = super().snapshot_manager()
        manager.__class__ = TolerantSnapshotManager
        return manager

    def copy(self, options: dict) -> FileStoreTable:
        return _ours(super().copy(options))

    def copy_without_time_travel(self, options: dict) -> FileStoreTable:
        return _ours(super().copy_without_time_travel(options))


def _ours(table: FileStoreTable) -> FileStoreTable:
    if type(table) is FileStoreTable:  # pypaimon builds copies as its own class
        table.__class__ = Table
    return table
