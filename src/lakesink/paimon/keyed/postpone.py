"""Postpone-bucket tables (bucket=-2): where a write puts its rows, and how they are named.

A write into such a table assigns no buckets: its key-value files (the layout of every keyed
file, `layout`) go to the partition's `bucket-postpone` directory, bucket -2 in the manifest
entries (whose total bucket count is the table's, -2), level 0. Readers skip them (Paimon's
and pypaimon's scans read real buckets only) until a compaction routes their rows to real
buckets (`paimon.compaction.postpone`).

Files are named as Paimon's postpone writer names them, `data--u-<commit user>-s-<writer
id>-w-<uuid>-<n>.parquet` (`data-`, the data file prefix, then `-u-`): Paimon's compaction groups
a partition's postpone files by the prefix up to `-w-` (one writer) and reads each writer's
files by creation time.
"""

from __future__ import annotations

import dataclasses
import re
import uuid

from .rules import POSTPONE_BUCKET

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def writer_prefix(commit_user: str | None, writer_id: int) -> str:
    """`data--u-<user>-s-<id>-w-`: the prefix one writer's files share."""
    user = _UNSAFE.sub("_", commit_user or "lakesink")
    return f"data--u-{user}-s-{int(writer_id) & 0x7FFFFFFF}-w-"


def file_name(commit_user: str | None, writer_id: int, count: int = 0, token: str | None = None) -> str:
    return f"{writer_prefix(commit_user, writer_id)}{token or uuid.uuid4()}-{count}.parquet"


def relabel(staged, commit_user: str | None, writer_id: int):
    """A key-value file described for a bucket of its own (a write's task) as a postpone file."""
    staged = dataclasses.replace(staged, bucket=POSTPONE_BUCKET, encoded=None,
                                 meta=dataclasses.replace(staged.meta, file_name=file_name(commit_user, writer_id)))
    return staged
