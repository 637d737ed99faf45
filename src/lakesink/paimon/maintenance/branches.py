"""Branches as users manage them: create, list, delete, fast-forward (`paimon.table.branches`
holds the mechanics); a fast-forward also rewinds main's commit-user markers."""

from __future__ import annotations

from pypaimon.snapshot.snapshot import Snapshot

from .. import iceberg
from ..commit import identity
from ...errors import TableNotFoundError
from ..table import branches as _mechanics
from ..table.branches import snapshots_of_branches
from ..table.tables import open_table

__all__ = ["branch_heads", "create_branch", "delete_branch", "fast_forward", "list_branches", "snapshots_of_branches"]


def _main(path: str, fs_options: dict | None):
    table = open_table(path, fs_options)
    if table is None:
        raise TableNotFoundError(f"Table {path} does not exist.", table=path)
    return table


def create_branch(path: str, name: str, from_tag=None, from_snapshot=None, empty: bool = False,
                  fs_options: dict | None = None):
    return _mechanics.create_branch(_main(path, fs_options), name, from_tag, from_snapshot, empty)


def list_branches(path: str, fs_options: dict | None = None) -> list[str]:
    return _mechanics.list_branches(_main(path, fs_options))


def branch_heads(path: str, fs_options: dict | None = None) -> list[tuple[str, int | None]]:
    """(name, latest snapshot id or None when empty) of every branch, by name."""
    table = _main(path, fs_options)
    return [(name, _mechanics.latest_of(table, name)) for name in _mechanics.list_branches(table)]


def delete_branch(path: str, name: str, fs_options: dict | None = None) -> None:
    _mechanics.delete_branch(_main(path, fs_options), name)


def fast_forward(path: str, name: str, fs_options: dict | None = None) -> Snapshot:
    """Main becomes the branch's state; returns main's new latest snapshot.

    Main's commits from the branch's earliest snapshot on are gone, as after a rollback: their
    commit users' markers forget them, so a writer re-commits them instead of skipping a replay."""
    latest, earliest = _mechanics.fast_forward(_main(path, fs_options), name)
    identity.rewind(open_table(path, fs_options), earliest.id - 1)
    iceberg.after_commit(open_table(path, fs_options))  # Iceberg readers see main's new state
    return latest
