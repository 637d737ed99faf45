"""Opening, creating and checking Paimon tables through pypaimon."""

from __future__ import annotations

import time

import pyarrow as pa
from pypaimon.schema.data_types import PyarrowFieldParser
from pypaimon.schema.schema import Schema
from pypaimon.schema.schema_manager import SchemaManager
from pypaimon.table.bucket_mode import BucketMode
from pypaimon.table.file_store_table import FileStoreTable

from ... import options as registry, storage
from . import branches, compat, evolution, parquet_layout
from ...errors import (NotAPaimonTableError, SchemaMismatchError, TableAlreadyExistsError,
                      UnsupportedTableError)

# Where lakesink keeps its own files inside a table directory. Paimon readers
# only look at schema/, snapshot/, manifest/, tag/ ... and the data directories.
LAKESINK_DIR = "_lakesink"
CREATION_WAIT_S = 10.0  # longest a table may show schema/ without a schema file while being created


def open_table(path: str, fs_options: dict | None = None, branch: str | None = None) -> FileStoreTable | None:
    """The table at `path`, or None when nothing is there. Anything else there is an error.
    With `branch` (not main): the table seen on that branch, which must exist (`branches`)."""
    path = storage.normalize(path)
    if branch is not None and not branches.is_main(branch):
        main = open_table(path, fs_options)
        return branches.open_branch(main, branch) if main is not None else None
    file_io = storage.file_io(path, fs_options)
    if not file_io.exists(path):
        return None
    if not file_io.exists(f"{path}/schema"):
        names = [_base(s) for s in file_io.list_status(path)]
        if "schema" in names:  # created since the check above (a commit creating the table): read it
            return _open_schema(file_io, path)
        entries = [n for n in names if n not in (LAKESINK_DIR, "STAGED.json")]
        if LAKESINK_DIR in names:
            # The first write of a table whose files are written in place (paimon.commit.intents): its
            # data directories exist before the first commit writes the schema.
            entries = [n for n in entries if not (n.startswith("bucket-") or "=" in n)]
        if not entries:
            return None  # empty directory, or only our own staging: no table yet
        raise NotAPaimonTableError(
            f"{path} exists but is not a Paimon table (no schema/ directory). "
            "Point lakesink at a Paimon table directory or at a path that does not exist yet."
        )
    return _open_schema(file_io, path)


def _open_schema(file_io, path: str) -> FileStoreTable:
    schema, stamp = _latest_schema(file_io, path)
    # A writer creating the table right now writes schema-0 under a temporary name in schema/
    # and renames it (a copy on object stores): give it that moment before calling this no table.
    deadline = time.monotonic() + CREATION_WAIT_S
    while schema is None and time.monotonic() < deadline:
        time.sleep(0.1)
        schema, stamp = _latest_schema(file_io, path)
    if schema is None:
        raise NotAPaimonTableError(f"{path}/schema holds no schema file: not a Paimon table.")
    # lakesink's table: manifests of older Paimon versions, snapshots expiring while read (compat.py)
    table = compat.Table(compat.table_file_io(file_io), _identifier(path), path, schema)
    table.lakesink_schema_stamp = stamp
    return table


def current(table: FileStoreTable | None, path: str, fs_options: dict | None = None,
            branch: str | None = None) -> FileStoreTable | None:
    """The table at `path` as it is now, `table` itself when its schema is still the latest.

    A table object is its schema: snapshots, manifests and the hash index are read afresh on
    every use. So a job opens its table once and, where a concurrent schema change matters (its
    commit), asks only whether the latest schema file is still the one it opened (a listing of
    schema/ and one file status): no new table unless it changed (ALTER TABLE, a table dropped
    and created again at the path)."""
    stamp = getattr(table, "lakesink_schema_stamp", None)
    if table is None or stamp is None or (branch is not None and not branches.is_main(branch)):
        return open_table(path, fs_options, branch)
    file_io = storage.file_io(storage.normalize(path), fs_options)
    try:
        _, now = _latest_schema(file_io, storage.normalize(path))
    except NotAPaimonTableError:
        now = None
    return table if now == stamp else open_table(path, fs_options, branch)


# Parsed schema files, by (path, size, modification time): a schema file never changes once
# written, and a driver opens its table several times a micro-batch (~0.5 ms a parse). Size and
# time tell a table dropped and created again at the same path from the one cached.
_SCHEMAS: dict[tuple, object] = {}
_SCHEMAS_KEPT = 256


def _latest_schema(file_io, path: str):
    """(the latest schema or None, its file's (path, size, modification time) or None)."""
    try:
        manager = SchemaManager(file_io, path)
        versions = manager._list_versioned_files()
        if not versions:
            return None, None
        schema_path = manager._to_schema_path(max(versions))
        try:
            status = file_io.get_file_status(schema_path)
        except FileNotFoundError:
            return manager.latest(), None  # removed meanwhile (a rollback): look again
        stamp = (getattr(status, "size", None), getattr(status, "mtime", None))
        if None in stamp:
            return manager.latest(), None
        key = (schema_path, *stamp)
        schema = _SCHEMAS.get(key)
        if schema is None:
            schema = manager.get_schema(max(versions))
            if schema is None:
                return manager.latest(), None
            if len(_SCHEMAS) >= _SCHEMAS_KEPT:
                _SCHEMAS.pop(next(iter(_SCHEMAS)))
            _SCHEMAS[key] = schema
        return schema, key
    except Exception as exc:
        raise NotAPaimonTableError(
            f"{path}: the table's schema cannot be read ({exc}). The table metadata is corrupt; "
            "restore schema/ from a backup."
        ) from exc


def _base(status) -> str:
    name = getattr(status, "base_name", None) or getattr(status, "path", "")
    return str(name).rstrip("/").rsplit("/", 1)[-1]


def _identifier(path: str):
    from pypaimon.common.identifier import Identifier
    parts = path.rstrip("/").split("/")
    database = parts[-2][:-3] if len(parts) > 1 and parts[-2].endswith(".db") else "default"
    return Identifier(database, parts[-1])


def create_table(path: str, schema: pa.Schema, partition_keys: list[str], primary_keys: list[str],
                 options: dict[str, str], fs_options: dict | None = None) -> FileStoreTable:
    """Create the table's first schema. Fails if another writer created it first."""
    path = storage.normalize(path)
    missing = [k for k in partition_keys + primary_keys if k not in schema.names]
    if missing:
        raise SchemaMismatchError(
            f"Partition/primary-key column(s) {missing} are not in the data's columns {schema.names}."
        )
    paimon_schema = Schema.from_pyarrow_schema(schema, partition_keys=partition_keys or None,
                                               primary_keys=primary_keys or None, options=dict(options))
    file_io = storage.file_io(path, fs_options)
    manager = SchemaManager(file_io, path)
    try:
        manager.create_table(paimon_schema)
    except Exception as exc:
        if manager.latest() is not None:
            raise TableAlreadyExistsError(f"Table {path} was created by another writer meanwhile.") from exc
        raise
    table = open_table(path, fs_options)
    assert table is not None
    return table


def arrow_schema(table: FileStoreTable) -> pa.Schema:
    return PyarrowFieldParser.from_paimon_schema(table.table_schema.fields)


def check_writable(table: FileStoreTable, path_name: str) -> None:
    """Refuse table kinds this write path cannot write yet, naming what can."""
    if table.is_primary_key_table:
        raise UnsupportedTableError(
            f"{table.table_path} is a primary-key table; {path_name} writes append tables only for now. "
            "Write primary-key tables with lakesink.write (the fast path) or pypaimon's table writer "
            "(table.new_batch_write_builder())."
        )
    if table.bucket_mode() != BucketMode.BUCKET_UNAWARE:
        raise UnsupportedTableError(
            f"{table.table_path} is a fixed-bucket append table (bucket={table.total_buckets}); "
            f"{path_name} writes unaware-bucket append tables (bucket=-1) only for now. "
            "Write it with lakesink.write (the fast path) or pypaimon's table writer, or create the table "
            "with bucket=-1."
        )
    if (table.options.file_format() or "parquet").lower() != "parquet":
        raise UnsupportedTableError(
            f"{table.table_path} stores {table.options.file_format()} files; lakesink writes Parquet tables only."
        )
    registry.check_honoured(table.table_schema.options, str(table.table_path))
    extra_keys = [k for k in ("rowkind.field", "sequence.field") if table.table_schema.options.get(k)]
    if extra_keys:
        raise UnsupportedTableError(
            f"{table.table_path} has {extra_keys[0]}={table.table_schema.options[extra_keys[0]]!r} but no primary "
            f"key: {extra_keys[0]} applies to primary-key tables only, and readers keep every row of this table "
            "as an insert. Reset the option (ALTER TABLE ... RESET) or recreate the table with a primary key.")
    problem = parquet_layout.nanosecond_layout_problem(arrow_schema(table))
    if problem is not None:
        raise UnsupportedTableError(f"{table.table_path}: {path_name} cannot write this table: {problem}.")


def check_schema(table: FileStoreTable, incoming: pa.Schema) -> None:
    """The incoming data must have exactly the table's columns and types (any order).

    Nullability: a nullable column may not go into a NOT NULL one; the other way is fine.
    With `write.merge-schema` the writes use `evolution.plan` instead.
    """
    evolution.plan(table.table_schema, incoming, False, str(table.table_path))
