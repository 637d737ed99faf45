"""Branches as users manage them: create, list, delete, fast-forward (`paimon.table.branches`
holds the mechanics); a fast-forward also rewinds main's commit-user markers."""

from __future__ import annotations

from pypaimon.snapshot.snapshot import Snapshot

from ..commit import identity
from ..table.branches import create_branch, delete_branch, list_branches, snapshots_of_branches
from ..table import branches as _mechanics
from ..table.tables import open_table

__all__ = ["create_branch", "delete_branch", "fast_forward", "list_branches", "snapshots_of_branches"]


def fast_forward(path: str, name: str, fs_options: dict | None = None) -> Snapshot:
    """Main becomes the branch's state; returns main's new latest snapshot.

    Main's commits from the branch's earliest snapshot on are gone, as after a rollback: their
    commit users' markers forget them, so a writer re-commits them instead of skipping a replay."""
    latest, earliest = _mechanics.fast_forward(path, name, fs_options)
    identity.rewind(open_table(path, fs_options), earliest.id - 1)
    return latest
