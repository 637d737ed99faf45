"""What a commit hands pypaimon: one commit message per (partition, bucket), and what publishing
its snapshot took.

A bucket's message holds its new data and changelog files (`bucket_messages`), its new hash
index file (`with_index`, dynamic-bucket tables) and a merge on write's removed files and
deletion-vector index swaps (`with_merge`; `discard_merge` when the commit definitely failed).
"""

from __future__ import annotations

from collections.abc import Sequence

from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.write.commit_message import CommitMessage
from pypaimon.write.file_store_commit import FileStoreCommit

from ..files.datafiles import StagedFile, table_path_of


def with_index(messages: list[CommitMessage], index: dict) -> None:
    """Each bucket's new hash index file (and the one it replaces) on that bucket's message."""
    by_bucket = {(tuple(m.partition), m.bucket): m for m in messages}
    for key, (adds, deletes) in index.items():
        message = by_bucket.get(key)
        if message is None:
            message = CommitMessage(partition=key[0], bucket=key[1], new_files=[])
            messages.append(message)
        message.index_adds = list(adds)
        message.index_deletes = list(deletes)


def with_merge(messages: list[CommitMessage], merged, total_buckets: int | None,
                check_from: int | None) -> None:
    """Add a merge on write's removed table files and deletion-vector index swaps to `messages`."""
    by_bucket = {(tuple(m.partition), m.bucket): m for m in messages}

    def message(key):
        if key not in by_bucket:
            by_bucket[key] = CommitMessage(partition=key[0], bucket=key[1], new_files=[],
                                           total_buckets=total_buckets, check_from_snapshot=check_from)
            messages.append(by_bucket[key])
        return by_bucket[key]

    for f in merged.removed:
        message((tuple(f.partition), f.bucket)).deleted_files.append(f.meta)
    for key, (adds, deletes) in merged.index.items():
        m = message(key)
        m.index_adds = list(m.index_adds) + list(adds)
        m.index_deletes = list(m.index_deletes) + list(deletes)


def discard_merge(table, merged) -> None:
    """A merge whose commit definitely failed: its placed runs and index files are nobody's."""
    file_io = table.file_io
    for f in merged.created():  # the write's own files stay with the protocol (kept or discarded)
        file_io.delete_quietly(table_path_of(table, f))
        if f.staged_path:
            file_io.delete_quietly(f.staged_path)
    for path in merged.index_paths:
        file_io.delete_quietly(path)
    merged.forget_staging()


def bucket_messages(files: Sequence[StagedFile], total_buckets: int | None = None,
                    check_from: int | None = None) -> list[CommitMessage]:
    """One message per (partition, bucket) of `files`: its data files and its changelog files."""
    grouped: dict[tuple, tuple[list, list]] = {}
    for f in files:
        data, changelog = grouped.setdefault((tuple(f.partition), f.bucket), ([], []))
        (changelog if f.changelog else data).append(f.meta)
    return [CommitMessage(partition=p, bucket=b, new_files=data, changelog_files=changelog,
                          total_buckets=total_buckets, check_from_snapshot=check_from)
            for (p, b), (data, changelog) in grouped.items()]


class Publications:
    """A commit's snapshot publication attempts (1 + retries after lost races), and the
    snapshot it published: the commit's outcome without reading the table again."""

    def __init__(self, file_store_commit: FileStoreCommit):
        self.count = 0
        self.snapshot: Snapshot | None = None
        inner = file_store_commit.snapshot_commit
        original = inner.commit

        def counting(base_snapshot_uuid, snapshot, *args, **kwargs):
            self.count += 1
            published = original(base_snapshot_uuid, snapshot, *args, **kwargs)
            if published:
                self.snapshot = snapshot
            return published

        inner.commit = counting
