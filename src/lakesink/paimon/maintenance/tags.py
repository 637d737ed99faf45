"""Tags and rollback: naming a snapshot, dropping a name, going back to one."""

from __future__ import annotations

from dataclasses import dataclass

from pypaimon.snapshot.snapshot import Snapshot

from ...errors import ConfigurationError, SnapshotNotFoundError, TagNotFoundError
from .. import iceberg
from ..commit import identity
from ..table.branches import snapshots_of_branches
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
    still = meta.referenced(list(manager.list_snapshots()) + list(tags.values()) + snapshots_of_branches(table),
                            live_only=True)
    mine = meta.referenced([tag])
    deleted = 0
    for path in sorted(mine - still):
        table.file_io.delete_quietly(path)
        deleted += 1
    return deleted


@dataclass
class RollbackPlan:
    """What a rollback changes: the snapshot it keeps and everything newer that goes."""

    table: str
    target: Snapshot                  # the snapshot the table is rolled back to
    target_by: str                    # "snapshot", "tag" or "timestamp"
    tag: str | None                   # the tag named, for target_by == "tag"
    latest_id: int | None             # the latest snapshot before the rollback
    snapshots_removed: list[int]      # newer snapshots (their files become orphans)
    tags_removed: list[str]           # tags of newer snapshots (Paimon's rollback deletes them)
    commit_users: dict[str, list[int]]  # user -> identifiers of removed snapshots (re-committable after)
    consumers_ahead: dict[str, int]   # consumer -> next snapshot beyond the target (left as they are)
    rows_before: int | None
    rows_after: int | None

    @property
    def changes_nothing(self) -> bool:
        return not self.snapshots_removed and not self.tags_removed


def resolve_rollback_target(table, target: int | str | None = None, timestamp_millis: int | None = None
                            ) -> tuple[Snapshot, str, str | None]:
    """The snapshot a rollback keeps: by id, tag name, or the newest committed at or before a time."""
    manager = table.snapshot_manager()
    if (target is None) == (timestamp_millis is None):
        raise ConfigurationError("Roll back to one of: a snapshot id, a tag name, or a timestamp.")
    if timestamp_millis is not None:
        snapshot = manager.earlier_or_equal_time_mills(int(timestamp_millis))
        if snapshot is None:
            earliest = manager.try_get_earliest_snapshot() if manager.get_latest_snapshot() else None
            after = (f"; the earliest retained snapshot, {earliest.id}, was committed at "
                     f"{_iso(earliest.time_millis)}") if earliest else "; the table has no snapshot"
            raise SnapshotNotFoundError(f"No snapshot of {table.table_path} was committed at or before "
                                        f"{_iso(int(timestamp_millis))}{after}.", table=table.table_path)
        return snapshot, "timestamp", None
    if isinstance(target, str) and target.isdigit():
        target = int(target)
    if isinstance(target, int):
        snapshot = manager.get_snapshot_by_id(target)
        if snapshot is None:
            raise SnapshotNotFoundError(f"Snapshot {target} does not exist (or was expired) in {table.table_path}.",
                                        table=table.table_path, snapshot=target)
        return snapshot, "snapshot", None
    tag = table.tag_manager().get(target)
    if tag is None:
        raise TagNotFoundError(f"Tag {target!r} does not exist in {table.table_path}; existing tags: "
                               f"{', '.join(sorted(list_tags(table))) or 'none'}.", table=table.table_path)
    return tag.trim_to_snapshot(), "tag", target


def _iso(millis: int) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(millis / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def plan_rollback(path_or_table, target: int | str | None = None, timestamp_millis: int | None = None,
                  fs_options: dict | None = None) -> RollbackPlan:
    """What `rollback` would do, changing nothing."""
    from .consumers import list_consumers

    table = open_table(path_or_table, fs_options) if isinstance(path_or_table, str) else path_or_table
    snapshot, by, tag_name = resolve_rollback_target(table, target, timestamp_millis)
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    removed, users = [], {}
    for snapshot_id in range(snapshot.id + 1, (latest.id if latest else 0) + 1):
        newer = manager.get_snapshot_by_id(snapshot_id)
        if newer is None:
            continue
        removed.append(snapshot_id)
        users.setdefault(newer.commit_user, []).append(newer.commit_identifier)
    tags_removed = sorted(name for name, tagged in list_tags(table).items() if tagged.id > snapshot.id)
    ahead = {c.consumer_id: c.next_snapshot for c in list_consumers(table) if c.next_snapshot > snapshot.id + 1}
    return RollbackPlan(table.table_path, snapshot, by, tag_name, latest.id if latest else None, removed,
                        tags_removed, {u: sorted(set(ids)) for u, ids in users.items()}, ahead,
                        latest.total_record_count if latest else None, snapshot.total_record_count)


def rollback(path: str, target: int | str | None = None, fs_options: dict | None = None,
             timestamp_millis: int | None = None) -> Snapshot:
    """Roll the table back to a snapshot id, a tag name, or the newest snapshot committed at
    or before `timestamp_millis` (newer snapshots, and tags of them, are removed).

    Commit-user markers are moved back too, so a streaming writer re-commits
    what the rollback removed instead of skipping it as a replay. Files of the
    removed snapshots become orphans (`remove_orphans`). Consumers that had read
    beyond the target are left as they are (`plan_rollback` lists them).
    """
    return rollback_with_plan(path, target, fs_options, timestamp_millis).target


def rollback_with_plan(path: str, target: int | str | None = None, fs_options: dict | None = None,
                       timestamp_millis: int | None = None) -> RollbackPlan:
    """`rollback`, returning what it changed."""
    table = open_table(path, fs_options)
    finish_pending_expiry(table)
    plan = plan_rollback(table, target, timestamp_millis)
    table.rollback_to(plan.tag if plan.target_by == "tag" else plan.target.id)
    identity.rewind(table, plan.target.id)
    iceberg.after_commit(open_table(path, fs_options))  # Iceberg readers go back with it
    return plan
