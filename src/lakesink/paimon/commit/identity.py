"""Commit identity: which (commit user, identifier) already landed in a table.

Commit identity lives in Paimon's own snapshot fields (commitUser,
commitIdentifier). To answer "did (user, identifier) land?" without scanning
every snapshot, each commit user has a small marker in `_lakesink/commit-users/`:

    {"format": "lakesink.commit-user", "version": 1, "commit_user": "...",
     "last_identifier": 7 | null, "last_snapshot": 12 | null, "scan_from": 13 | null}

It is written *before* a commit is attempted (so no marker means nothing of
that user ever landed, and `scan_from` bounds the snapshots the attempt can
have published) and updated after it. A check reads the marker and only the
snapshots published since. Expiry carries each user's highest identifier into
its marker before deleting snapshots (`carry_over`); a rollback moves markers
back (`rewind`); so the check stays right through both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from pypaimon.snapshot.snapshot import Snapshot

from ... import storage
from ...errors import CorruptStateError
from ..table.tables import LAKESINK_DIR

MARKER_FORMAT = "lakesink.commit-user"
MARKER_VERSION = 1


def markers_dir(table_path: str) -> str:
    """`table_path` is the table's directory, or a branch's (`root`): each branch keeps its own
    markers, so a commit identity replayed on a branch is looked for on that branch."""
    return f"{table_path.rstrip('/')}/{LAKESINK_DIR}/commit-users"


def root(table) -> str:
    """Where the markers of `table`'s current branch live (the table's directory for main)."""
    from ..table.branches import branch_path
    return branch_path(str(table.table_path), table.current_branch())


def marker_path(table_path: str, commit_user: str) -> str:
    digest = hashlib.sha256(commit_user.encode()).hexdigest()[:32]
    return f"{markers_dir(table_path)}/{digest}.json"


def read_marker(file_io, table_path: str, commit_user: str) -> dict | None:
    path = marker_path(table_path, commit_user)
    if not file_io.exists(path):
        return None
    data = json.loads(file_io.read_file_utf8(path))
    if data.get("format") != MARKER_FORMAT or data.get("commit_user") != commit_user:
        raise CorruptStateError(f"{path} is not a lakesink commit-user marker for {commit_user!r}.")
    return data


def write_marker(file_io, table_path: str, commit_user: str, durable: bool = True, **fields) -> None:
    data = {"format": MARKER_FORMAT, "version": MARKER_VERSION, "commit_user": commit_user,
            "last_identifier": None, "last_snapshot": None, "scan_from": None}
    data.update(fields)
    storage.write_atomically(file_io, marker_path(table_path, commit_user), json.dumps(data), durable)


def forget(file_io, table_path: str, commit_user: str) -> None:
    """Drop the marker of a one-off commit user that will never commit again."""
    file_io.delete_quietly(marker_path(table_path, commit_user))


def before_commit(file_io, table_path: str, commit_user: str, latest: Snapshot | None) -> None:
    """Durably bound where a commit about to be attempted can land: after `latest`."""
    marker = read_marker(file_io, table_path, commit_user) or {}
    write_marker(file_io, table_path, commit_user, last_identifier=marker.get("last_identifier"),
                 last_snapshot=marker.get("last_snapshot"), scan_from=(latest.id + 1) if latest else 1)


def after_commit(file_io, table_path: str, commit_user: str, identifier: int, snapshot_id: int | None) -> None:
    # Not fsynced: if a crash loses it, the scan from the earlier marker finds the snapshot.
    write_marker(file_io, table_path, commit_user, durable=False, last_identifier=identifier,
                 last_snapshot=snapshot_id, scan_from=None)


def _scan_start(marker: dict) -> int:
    start = marker.get("scan_from")
    return start if start is not None else (marker.get("last_snapshot") or 0) + 1


def newest_of_user(manager, commit_user: str, newest: int, oldest: int,
                   get: Callable[[int], Snapshot | None] | None = None,
                   matches: Callable[[Snapshot], bool] | None = None) -> Snapshot | None:
    """The newest snapshot in [oldest, newest] by `commit_user` (and `matches`), or None.

    Identifiers of one user only grow, so the newest such snapshot holds the
    highest identifier. Snapshots expired meanwhile are skipped.
    """
    get = get or manager.get_snapshot_by_id
    for snapshot_id in range(newest, oldest - 1, -1):
        snapshot = get(snapshot_id)
        if snapshot is not None and snapshot.commit_user == commit_user and (matches is None or matches(snapshot)):
            return snapshot
    return None


def last_committed(table, commit_user: str) -> int | None:
    """The highest identifier `commit_user` committed to `table` (None: never)."""
    marker = read_marker(table.file_io, root(table), commit_user)
    if marker is None:
        return None  # a marker is written before any commit attempt: nothing ever landed
    best = marker.get("last_identifier")
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    if latest is None:
        return best
    earliest = manager.try_get_earliest_snapshot()
    start = max(_scan_start(marker), earliest.id if earliest else 1)
    found = newest_of_user(manager, commit_user, latest.id, start)
    if found is None:
        return best
    return found.commit_identifier if best is None else max(best, found.commit_identifier)


def committed_snapshot(table, commit_user: str, identifier: int, window: int = 1000) -> Snapshot | None:
    """The snapshot of (commit_user, identifier) among the newest `window` snapshots."""
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    if latest is None:
        return None
    earliest = manager.try_get_earliest_snapshot()
    oldest = max(earliest.id if earliest else 1, latest.id - window)
    return newest_of_user(manager, commit_user, latest.id, oldest,
                          matches=lambda s: s.commit_identifier == identifier)


def _markers(table):
    directory = markers_dir(root(table))
    file_io = table.file_io
    if not file_io.exists(directory):
        return
    for status in file_io.list_status(directory):
        if status.base_name.endswith(".json"):
            path = f"{directory}/{status.base_name}"
            marker = json.loads(file_io.read_file_utf8(path))
            if marker.get("format") == MARKER_FORMAT:
                yield path, marker


def carry_over(table, begin: int, end: int) -> int:
    """Before snapshots [begin, end) expire: carry each user's highest identifier there into its marker."""
    manager = table.snapshot_manager()
    cache: dict[int, Snapshot | None] = {}

    def cached(snapshot_id: int) -> Snapshot | None:
        if snapshot_id not in cache:
            cache[snapshot_id] = manager.get_snapshot_by_id(snapshot_id)
        return cache[snapshot_id]

    updated = 0
    for path, marker in _markers(table):
        start = _scan_start(marker)
        if start >= end:
            continue
        found = newest_of_user(manager, marker["commit_user"], end - 1, max(start, begin), get=cached)
        if found is None:
            continue
        fresh = json.loads(table.file_io.read_file_utf8(path))  # shrink the window for a racing commit
        last = fresh.get("last_identifier")
        if last is None or found.commit_identifier > last:
            fresh["last_identifier"] = found.commit_identifier
            storage.write_atomically(table.file_io, path, json.dumps(fresh))
            updated += 1
    return updated


def rewind(table, retained_id: int) -> None:
    """After a rollback to `retained_id`: markers forget what the rollback removed, so a
    writer re-commits it instead of skipping it as a replay."""
    manager = table.snapshot_manager()
    earliest = manager.try_get_earliest_snapshot()
    for path, marker in _markers(table):
        if (marker.get("last_snapshot") or 0) <= retained_id and (marker.get("scan_from") or 0) <= retained_id + 1:
            continue
        found = newest_of_user(manager, marker.get("commit_user"), retained_id, earliest.id if earliest else 1)
        marker.update(last_identifier=found.commit_identifier if found else None, last_snapshot=retained_id,
                      scan_from=None)
        storage.write_atomically(table.file_io, path, json.dumps(marker))
