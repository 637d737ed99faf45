"""Where compaction outputs go, and who removes those no snapshot took.

Staged (the local file system's default): a rewrite writes into the compaction's
staging directory (`PaimonCompactionTarget.staging_dir`) and the COMPACT commit
renames each output into the table. In place (`write.in-place`; `auto`: every
store but the local file system, where a rename is a COPY and a DELETE of the
whole file): each task writes its outputs straight to their table paths under
fresh names, each named first in the attempt's intent under that staging
directory (`paimon.commit.intents`), as the write tasks do; the commit moves nothing.

An in-place output no snapshot takes is removed by whoever ends its compaction:
the commit (what the intents name beyond its snapshot: failed task attempts), a
conflict or rebase (`discard`), the restore after a dead driver and
`clean_staging` (`sweep`: what the intents name beyond the compact user's last
snapshot). That last rule holds because a compaction's intents never outlive
it: each commit removes its own, and a compaction target sweeps once before its
first plan (`before_round`) and again whenever a commit's removal failed, so
the intents under a compact user's staging never name a file of a compaction
that committed before the latest one.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ... import storage
from ..commit import intents
from ..files.datafiles import StagedFile

log = logging.getLogger(__name__)


def wanted(table_path: str, in_place: bool | str | None) -> bool:
    """Whether compaction outputs of the table at `table_path` are written in place
    (`in_place`: the write's `write.in-place` as given or decided; None: `auto`)."""
    if isinstance(in_place, bool):
        return in_place
    return intents.in_place(table_path, in_place)


@dataclass(frozen=True)
class InPlace:
    """Where a compaction task writes its outputs in place (picklable: rides in Spark tasks)."""

    paths: object          # the table's path factory
    staging_dir: str       # the compaction's staging: the intents go under it

    @classmethod
    def of(cls, table, staging_dir: str) -> InPlace:
        return cls(table.path_factory(), staging_dir)

    def intent(self, file_io, task: str) -> intents.Intent:
        return intents.Intent(file_io, self.staging_dir, task)

    def open(self, file_io, intent: intents.Intent, partition: tuple, bucket: int,
             kind: str = "data") -> tuple[str, str]:
        """A fresh table path for one output (`kind`: data or changelog), declared in `intent`
        before a byte of it exists: (its path, its file name)."""
        name = f"{kind}-{uuid.uuid4()}-0.parquet"
        path = intents.data_file_path(self.paths, tuple(partition), bucket, name)
        intent.declare([path])
        return path, name


def placed(staged: StagedFile, name: str) -> StagedFile:
    """`staged` as written in place: already at its table path, under `name`."""
    return replace(staged, staged_path=None, meta=replace(staged.meta, file_name=name))


# -- removing what no snapshot took ----------------------------------------------------------
def sweep(target, staging_dir: str, compact_user: str) -> int:
    """Delete what the intents under `staging_dir` name that the compact user's last snapshot did
    not add, then the intents. Only while no compaction of the user is under way."""
    named = intents.read_intent_files(staging_dir, target.fs_options)
    if not named:
        return 0  # the common case: one listing
    last = target.last_committed(compact_user)
    keep = intents.committed_names(target, compact_user, last) if last is not None else set()
    if keep is None:
        log.warning("%s: the last compaction of %s landed but its snapshot is gone; the files its "
                    "intents name are left for remove_orphan_files", staging_dir, compact_user)
        keep_all = {os.path.basename(p) for files in named.values() for p in files}
        return _remove(target, staging_dir, named, keep_all)
    return _remove(target, staging_dir, named, keep)


def after_commit(target, staging_dir: str, committed: Iterable[str]) -> bool:
    """After a compaction landed with the files named `committed`: delete what its intents name
    besides (failed task attempts), then the intents. Never raises: False when it failed (the
    intents stay; the next sweep removes them)."""
    try:
        _remove(target, staging_dir, intents.read_intent_files(staging_dir, target.fs_options), set(committed))
        return True
    except Exception as exc:  # noqa: BLE001 - the compaction landed; its leftovers wait for a sweep
        log.warning("%s: could not remove what failed rewrite attempts left (%s); the next round or "
                    "restore removes it", staging_dir, exc)
        return False


def _remove(target, staging_dir: str, named: dict[str, list[str]], keep: set[str]) -> int:
    """Delete the files `named` (by intent) whose names are not in `keep`, then the intents."""
    if not named:
        return 0
    removed = intents.delete_named([p for files in named.values() for p in files],
                                   lambda p: os.path.basename(p) in keep, target.fs_options)
    if removed:
        log.info("%s: removed %d compaction outputs no snapshot took", staging_dir, removed)
    for path in named:  # the intents just read (one written meanwhile stays for the next sweep)
        target.file_io.delete_quietly(path)
    local = storage.local_path(intents.intents_dir(staging_dir))
    if local is not None:
        try:
            os.rmdir(local)
        except OSError:
            pass  # not empty, or gone
    return removed


def in_place_outputs(files) -> bool:
    """Whether some of `files` are outputs written in place (at their table paths, uncommitted)."""
    return any(f.staged_path is None for f in files)
