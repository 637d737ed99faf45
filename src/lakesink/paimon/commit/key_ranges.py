"""Concurrent writers of one bucket of a primary-key table, told apart by their keys.

A keyed write numbers its rows above everything the bucket held at the snapshot it was
planned on. Another writer's files landing in the bucket after that snapshot were numbered
from the same base: for a key both wrote, nobody can tell which version is the later one
(the reader would keep the higher number, not the later commit). For a key only one of
them wrote, nothing is at stake: its older versions are all below both.

So a commit goes ahead past such files when their key range (first to last key) does not
meet the range of its own files in that bucket, and is a `KeyRangeConflictError` naming the
bucket, the overlap and the other writer where it does. Key ranges are a file's first and
last keys (Paimon's `min_key`/`max_key`, in key order); ranges that cannot be compared
count as overlapping.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import KeyRangeConflictError


def key_of(row) -> tuple:
    return tuple(row.values) if row is not None else ()


def ranges_by_bucket(files: Iterable) -> dict[tuple, tuple[tuple, tuple]]:
    """{(partition, bucket): (first key, last key)} over the data files of a commit (`DataFileMeta`
    with its partition and bucket: StagedFile or manifest entry)."""
    out: dict[tuple, tuple[tuple, tuple]] = {}
    for partition, bucket, meta in files:
        low, high = key_of(meta.min_key), key_of(meta.max_key)
        owner = (tuple(partition), bucket)
        if owner in out:
            low, high = _min(out[owner][0], low), _max(out[owner][1], high)
        out[owner] = (low, high) if low and high else ((), ())
    return out


def overlap(ours: tuple[tuple, tuple], low: tuple, high: tuple) -> tuple[tuple, tuple] | None:
    """The keys both ranges hold (first, last), or None when they do not meet. A range without
    keys (a file of a table without primary key) or of keys that do not compare: all of `ours`."""
    if not ours[0] or not ours[1] or not low or not high:
        return ours
    try:
        if high < ours[0] or ours[1] < low:
            return None
        return max(ours[0], low), min(ours[1], high)
    except TypeError:
        return ours


def check_added(entry, snapshot, ours: dict, where: str, check_from: int, **fields) -> KeyRangeConflictError | None:
    """The conflict of one file another writer's `snapshot` added (a manifest entry), or None.
    `where`: how the message names this commit ("Commit 7 of user to /path")."""
    owner = (tuple(entry.partition.values), entry.bucket)
    mine = ours.get(owner)
    if mine is None:
        return None
    found = overlap(mine, key_of(entry.file.min_key), key_of(entry.file.max_key))
    if found is None:
        return None
    return KeyRangeConflictError(
        f"{where} conflicts with a concurrent writer: snapshot {snapshot.id} ({snapshot.commit_user!r}) added "
        f"keys {_shown(found[0])} to {_shown(found[1])} to partition {owner[0]}, bucket {owner[1]} after snapshot "
        f"{check_from}, which this commit's sequence numbers were planned on, and this commit writes keys "
        f"{_shown(mine[0])} to {_shown(mine[1])} there: which version of a key both wrote is the later one "
        "cannot be told. Nothing was committed. Write again: a new write plans above the other writer's "
        "(Paimon's rule: one writer per bucket; writers of disjoint key ranges may share one).",
        partition=owner[0], bucket=owner[1], key_range=found, other_commit_user=snapshot.commit_user,
        snapshot=snapshot.id, **fields)


def _shown(key: tuple) -> str:
    return repr(key[0]) if len(key) == 1 else repr(key)


def _min(a: tuple, b: tuple) -> tuple:
    try:
        return min(a, b) if a and b else ()
    except TypeError:
        return ()  # not comparable: no range (every file then counts as overlapping)


def _max(a: tuple, b: tuple) -> tuple:
    try:
        return max(a, b) if a and b else ()
    except TypeError:
        return ()
