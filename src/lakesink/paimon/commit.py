"""Builds the pypaimon `FileStoreCommit` every lakesink commit goes through.

One place to choose how snapshots are published (atomically, see `publish`)
and how manifests are written.
"""

from __future__ import annotations

from pypaimon.write.file_store_commit import FileStoreCommit

from .publish import atomic_snapshot_commit


def new_file_store_commit(table, commit_user: str) -> FileStoreCommit:
    return FileStoreCommit(atomic_snapshot_commit(table), table, commit_user)
