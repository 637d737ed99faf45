"""Paimon branches: `<table>/branch/branch-<name>/` holds a branch's own `snapshot/`,
`schema/` and `tag/`; data files and manifests stay shared under the table directory.

pypaimon's `FileSystemBranchManager` creates (empty or from a tag), drops and lists
branches; this module adds what it lacks: a branch from a snapshot (main's latest by
default), opening a table on a branch by path, a fast-forward that first removes main's
snapshots, schemas and tags from the branch's earliest snapshot on (as Apache Paimon's
Java `fastForward` does; pypaimon's only copies the snapshot files over main's), and the
snapshots every branch needs, which main's expiry and orphan removal must keep.
"""

from __future__ import annotations

from pypaimon.branch.branch_manager import BRANCH_PREFIX, BranchManager
from pypaimon.common.identifier import Identifier
from pypaimon.schema.schema_manager import SchemaManager
from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.snapshot.snapshot_manager import SnapshotManager
from pypaimon.tag.tag_manager import TagManager

from ... import storage
from ...errors import (BranchAlreadyExistsError, BranchNotFoundError, ConfigurationError, SnapshotNotFoundError,
                       TableNotFoundError, TagNotFoundError)
from . import compat

MAIN = "main"


def is_main(branch: str | None) -> bool:
    return branch is None or BranchManager.is_main_branch(BranchManager.normalize_branch(branch))


def branch_path(table_path: str, branch: str | None) -> str:
    """The directory holding the branch's snapshot/, schema/ and tag/ (the table's own for main)."""
    return BranchManager.branch_path(table_path.rstrip("/"), MAIN if is_main(branch) else branch)


def check_name(name: str) -> str:
    """A name Paimon accepts for a new branch (not main, not blank, not a number, no '/')."""
    if not isinstance(name, str):
        raise ConfigurationError(f"A branch name is a string, not {type(name).__name__}.", option="branch")
    try:
        BranchManager.validate_branch(name)
    except ValueError as exc:
        raise ConfigurationError(f"Invalid branch name {name!r}: {exc}", option="branch") from None
    if "/" in name or name != name.strip():
        raise ConfigurationError(f"Invalid branch name {name!r}: no '/' and no surrounding spaces.",
                                 option="branch")
    return name


def _main(table, _fs_options=None):
    """Functions here take main's table, opened by the caller (`tables.open_table`)."""
    return table


def check_writable(path: str, table, name: str) -> None:
    """Refuse, before anything is written, a write to branch `name` that cannot go there: the
    table (`table`, main's, None when absent) and the branch must exist. A branch is never
    created by a write (`lakesink.branch.create`)."""
    check_name(name)
    if table is None:
        raise TableNotFoundError(f"Table {storage.normalize(path)} does not exist: a write to branch {name!r} "
                                 "needs the table and the branch (lakesink.branch.create). Nothing was written.",
                                 table=path)
    _require(table, name)


def describe(path: str, name: str | None) -> str:
    """How a stream's checkpoint names the table it writes: the path for main, else
    `<path>$branch_<name>` (Paimon's name of a branch as a table): a checkpoint bound to one
    branch refuses another, as it refuses another table."""
    return path if is_main(name) else f"{path}$branch_{name}"


def parse_description(text: str) -> tuple[str, str | None]:
    """(path, branch or None) of a `describe` text."""
    path, sep, name = text.rpartition("$branch_")
    return (path, name) if sep and name and "/" not in name else (text, None)


def list_branches(path, fs_options: dict | None = None) -> list[str]:
    return sorted(_main(path, fs_options).branch_manager().branches())


def latest_of(table, name: str) -> int | None:
    """The id of branch `name`'s latest snapshot (None: an empty branch)."""
    latest = SnapshotManager(table.file_io, table.table_path, name).get_latest_snapshot()
    return latest.id if latest is not None else None


def exists(table, name: str) -> bool:
    return table.file_io.exists(f"{branch_path(table.table_path, name)}/schema")


def _require(table, name: str) -> None:
    if is_main(name):
        return
    if not exists(table, name):
        existing = sorted(table.branch_manager().branches())
        raise BranchNotFoundError(f"Branch {name!r} does not exist in {table.table_path}; existing branches: "
                                  f"{', '.join(existing) or 'none'}. Create it with lakesink.branch.create.",
                                  table=str(table.table_path))


def open_branch(path, name: str | None, fs_options: dict | None = None):
    """The table at `path` seen on branch `name` (main: the table itself): its snapshots, schema
    and tags are the branch's; pypaimon's scans and commits follow `current_branch()`."""
    table = _main(path, fs_options)
    if is_main(name):
        return table
    _require(table, name)
    schema = SchemaManager(table.file_io, table.table_path, name).latest()
    if schema is None:
        raise BranchNotFoundError(f"Branch {name!r} of {table.table_path} holds no schema.",
                                  table=str(table.table_path))
    identifier = Identifier.create(table.identifier.get_database_name(), table.identifier.get_table_name(),
                                   branch=name)
    branched = compat.Table(table.file_io, identifier, table.table_path, schema)
    # pypaimon reads the branch from the identifier and the `branch` option alike
    return branched.copy({"branch": name})


def create_branch(path, name: str, from_tag: str | None = None, from_snapshot: int | None = None,
                  empty: bool = False, fs_options: dict | None = None) -> Snapshot | None:
    """Create branch `name`; returns the snapshot it starts at (None: empty).

    From a tag (Paimon's own way: the tag is copied into the branch too), from a snapshot id,
    or, by default, from main's latest snapshot; `empty=True` makes Paimon's empty branch
    (main's schema, no snapshot)."""
    check_name(name)
    if sum(x is not None and x is not False for x in (from_tag, from_snapshot, empty or None)) > 1:
        raise ConfigurationError("Create a branch from one of: a tag, a snapshot, or empty.")
    table = _main(path, fs_options)
    if exists(table, name) or name in table.branch_manager().branches():
        raise BranchAlreadyExistsError(f"Branch {name!r} already exists in {table.table_path}.",
                                       table=str(table.table_path))
    manager = table.branch_manager()
    if from_tag is not None:
        tag = table.tag_manager().get(from_tag)
        if tag is None:
            raise TagNotFoundError(f"Tag {from_tag!r} does not exist in {table.table_path}.",
                                   table=str(table.table_path))
        manager.create_branch(name, from_tag)
        snapshot = tag.trim_to_snapshot()
        _write_hints(table, name, snapshot.id)
        return snapshot
    snapshots = table.snapshot_manager()
    if from_snapshot is not None:
        snapshot = snapshots.get_snapshot_by_id(int(from_snapshot))
        if snapshot is None:
            raise SnapshotNotFoundError(f"Snapshot {from_snapshot} does not exist (or was expired) in "
                                        f"{table.table_path}.", table=str(table.table_path), snapshot=from_snapshot)
    else:
        snapshot = None if empty else snapshots.get_latest_snapshot()
    if snapshot is None:
        manager.create_branch(name)  # Paimon's empty branch: main's schemas only
        return None
    file_io = table.file_io
    target = SnapshotManager(file_io, table.table_path, name)
    # Schemas first, the snapshot last: a branch directory with a snapshot is complete.
    for schema_id in range(snapshot.schema_id + 1):
        source = table.schema_manager._to_schema_path(schema_id)
        if file_io.exists(source):
            file_io.copy_file(source, SchemaManager(file_io, table.table_path, name)._to_schema_path(schema_id),
                              overwrite=True)
    file_io.copy_file(snapshots.get_snapshot_path(snapshot.id), target.get_snapshot_path(snapshot.id),
                      overwrite=True)
    _write_hints(table, name, snapshot.id)
    return snapshot


def _write_hints(table, name: str, snapshot_id: int) -> None:
    # The branch's history starts at `snapshot_id`: without EARLIEST, readers would probe from 1.
    directory = SnapshotManager(table.file_io, table.table_path, name).snapshot_dir
    for hint in ("EARLIEST", "LATEST"):
        storage.write_atomically(table.file_io, f"{directory}/{hint}", str(snapshot_id))


def delete_branch(path, name: str, fs_options: dict | None = None) -> None:
    """Drop the branch's directory (its snapshots, schemas, tags, and lakesink's markers of its
    writers). Files only the branch used become orphans (`lakesink.remove_orphans`)."""
    check_name(name)
    table = _main(path, fs_options)
    _require(table, name)
    table.branch_manager().drop_branch(name)


def fast_forward(path, name: str, fs_options: dict | None = None) -> tuple[Snapshot, Snapshot]:
    """Make main the branch's state: main's snapshots, schemas and tags from the branch's
    earliest snapshot on are replaced by the branch's (Apache Paimon's `fastForward`).
    Returns (main's new latest snapshot, the branch's earliest): main's snapshots from the
    latter on were replaced; commit-user markers are rewound by the caller
    (`paimon.maintenance.branches`)."""
    check_name(name)
    table = _main(path, fs_options)
    _require(table, name)
    file_io = table.file_io
    branch_snapshots = SnapshotManager(file_io, table.table_path, name)
    latest = branch_snapshots.get_latest_snapshot()
    if latest is None:
        raise SnapshotNotFoundError(f"Branch {name!r} of {table.table_path} has no snapshot: nothing to "
                                    "fast-forward main to.", table=str(table.table_path))
    earliest = branch_snapshots.try_get_earliest_snapshot()
    main_snapshots = table.snapshot_manager()
    main_schemas = table.schema_manager
    main_tags = table.tag_manager()
    # Remove main's newer history, newest first so a reader never sees a gap below LATEST.
    main_latest = main_snapshots.get_latest_snapshot()
    main_earliest = main_snapshots.try_get_earliest_snapshot() if main_latest else None
    for snapshot_id in range((main_latest.id if main_latest else 0), earliest.id - 1, -1):
        file_io.delete_quietly(main_snapshots.get_snapshot_path(snapshot_id))
    for tag_name in _tag_names(main_tags):
        tag = main_tags.get(tag_name)
        if tag is not None and tag.id >= earliest.id:
            file_io.delete_quietly(main_tags.tag_path(tag_name))
    branch_schemas = SchemaManager(file_io, table.table_path, name)
    for schema_id in main_schemas._list_versioned_files():
        if schema_id > earliest.schema_id:
            file_io.delete_quietly(main_schemas._to_schema_path(schema_id))
    # Then copy the branch's schemas, tags and snapshots (the snapshots last).
    for schema_id in branch_schemas._list_versioned_files():
        file_io.copy_file(branch_schemas._to_schema_path(schema_id), main_schemas._to_schema_path(schema_id),
                          overwrite=True)
    branch_tags = TagManager(file_io, table.table_path, name)
    for tag_name in _tag_names(branch_tags):
        file_io.copy_file(branch_tags.tag_path(tag_name), main_tags.tag_path(tag_name), overwrite=True)
    for snapshot_id in range(earliest.id, latest.id + 1):
        source = branch_snapshots.get_snapshot_path(snapshot_id)
        if file_io.exists(source):
            file_io.copy_file(source, main_snapshots.get_snapshot_path(snapshot_id), overwrite=True)
    storage.write_atomically(file_io, main_snapshots.latest_file, str(latest.id))
    if main_earliest is None or main_earliest.id > earliest.id:
        storage.write_atomically(file_io, f"{main_snapshots.snapshot_dir}/EARLIEST", str(earliest.id))
    return latest, earliest


def _tag_names(tags: TagManager) -> list[str]:
    directory = tags.tag_directory()
    if not tags.file_io.exists(directory):
        return []
    prefix = "tag-"
    return sorted(s.base_name[len(prefix):] for s in tags.file_io.list_status(directory)
                  if s.base_name.startswith(prefix))


def snapshots_of_branches(table) -> list[Snapshot]:
    """Every snapshot and tag of every branch of `table` (main's view): the files they use are
    shared with main, so main's expiry and orphan removal must keep them."""
    out: list[Snapshot] = []
    directory = f"{str(table.table_path).rstrip('/')}/branch"
    if not table.file_io.exists(directory):
        return out
    for status in table.file_io.list_status(directory):
        if not status.base_name.startswith(BRANCH_PREFIX):
            continue
        name = status.base_name[len(BRANCH_PREFIX):]
        manager = SnapshotManager(table.file_io, table.table_path, name)
        if manager.get_latest_snapshot() is not None:
            out.extend(manager.list_snapshots())
        tags = TagManager(table.file_io, table.table_path, name)
        for tag_name in _tag_names(tags):
            tag = tags.get(tag_name)
            if tag is not None:
                out.append(tag.trim_to_snapshot())
    return out
