"""Tags and rollback: naming a snapshot, dropping a name, going back to one."""

from __future__ import annotations

from pypaimon.snapshot.snapshot import Snapshot

from ...errors import SnapshotNotFoundError, TagNotFoundError
from .. import identity
from .expiry import finish_pending_expiry
from .metadata import Metadata, list_tags, open_table


def create_tag(path: str, name: str, snapshot_id: int | None = None, time_retained: str | None = None,
               fs_options: dict | None = None) -> Snapshot:
    table = open_table(path, fs_options)
    manager = table.snapshot_manager()
    snapshot = manager.get_snapshot_by_id(snapshot_id) if snapshot_id is not None else manager.get_latest_snapshot()
    if snapshot is None:
        raise SnapshotNotFoundError(f"Snapshot {snapshot_id if snapshot_id is not None else '(latest)'} does not exist "
                         f"in {table.table_path}.")
    table.tag_manager().create_tag(snapshot, name, time_retained=time_retained)
    return snapshot


def delete_tag(table, name: str) -> int:
    """Delete a tag and the files only it still needed; returns files deleted."""
    tags = list_tags(table)
    if name not in tags:
        raise TagNotFoundError(f"Tag {name!r} does not exist in {table.table_path}; existing tags: "
                         f"{', '.join(sorted(tags)) or 'none'}.")
    tag = tags.pop(name)
    table.tag_manager().delete_tag(name)
    manager = table.snapshot_manager()
    earliest = manager.try_get_earliest_snapshot() if manager.get_latest_snapshot() else None
    if earliest is not None and tag.id >= earliest.id and manager.get_snapshot_by_id(tag.id):
        return 0  # its snapshot is still retained: snapshot expiry deals with its files
    meta = Metadata(table)
    still = meta.referenced(list(manager.list_snapshots()) + list(tags.values()), live_only=True)
    mine = meta.referenced([tag])
    deleted = 0
    for path in sorted(mine - still):
        table.file_io.delete_quietly(path)
        deleted += 1
    return deleted


def rollback(path: str, target: int | str, fs_options: dict | None = None) -> Snapshot:
    """Roll the table back to a snapshot id or tag name (newer snapshots are removed).

    Commit-user markers are moved back too, so a streaming writer re-commits
    what the rollback removed instead of skipping it as a replay. Files of the
    removed snapshots become orphans (`remove_orphans`).
    """
    table = open_table(path, fs_options)
    finish_pending_expiry(table)
    manager = table.snapshot_manager()
    if isinstance(target, str) and target.isdigit():
        target = int(target)
    if isinstance(target, int):
        snapshot = manager.get_snapshot_by_id(target)
        if snapshot is None:
            raise SnapshotNotFoundError(f"Snapshot {target} does not exist (or was expired) in {table.table_path}.",
                                        table=table.table_path, snapshot=target)
    else:
        snapshot = table.tag_manager().get(target)
        if snapshot is None:
            raise TagNotFoundError(f"Tag {target!r} does not exist in {table.table_path}.", table=table.table_path)
    table.rollback_to(target)
    identity.rewind(table, snapshot.id)
    return snapshot
