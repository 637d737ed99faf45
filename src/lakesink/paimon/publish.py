"""Atomic snapshot publication: `snapshot-N` is created only if it does not exist.

pypaimon publishes a snapshot by "check absent, write temp, rename", and a
local rename replaces a file another process published in between: that
commit is silently lost (see FINDINGS). Here publication is one atomic step
of the storage that fails when the target exists:

* local / POSIX: write a temporary file, then `link()` it to the final name
  (fails with EEXIST if another writer got there first);

A lost race returns False, and pypaimon's commit loop retries on the new
latest snapshot (after checking that its own commit did not land).
"""

from __future__ import annotations

import logging
import os
import uuid

from pypaimon.common.json_util import JSON
from pypaimon.snapshot.renaming_snapshot_commit import RenamingSnapshotCommit
from pypaimon.snapshot.snapshot_commit import SnapshotCommit

log = logging.getLogger(__name__)


def _local_path(path: str) -> str | None:
    if path.startswith("file://"):
        return path[len("file://"):]
    if path.startswith("file:"):
        return path[len("file:"):]
    if "://" not in path:
        return path
    return None


def write_file_atomically(file_io, path: str, content: str) -> None:
    """Replace `path` with `content` so readers see the old or the new text, never a torn one."""
    local = _local_path(path)
    if local is None:
        file_io.overwrite_file_utf8(path, content)  # an object-store PUT is atomic
        return
    os.makedirs(os.path.dirname(local), exist_ok=True)
    tmp = f"{local}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(content)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, local)


class LinkingSnapshotCommit(SnapshotCommit):
    """Publishes with link(2): atomic create-if-absent on local and POSIX file systems."""

    def __init__(self, snapshot_manager):
        self.snapshot_manager = snapshot_manager
        self.file_io = snapshot_manager.file_io

    def commit(self, base_snapshot_uuid, snapshot, statistics) -> bool:
        final = _local_path(self.snapshot_manager.get_snapshot_path(snapshot.id))
        os.makedirs(os.path.dirname(final), exist_ok=True)
        tmp = f"{os.path.dirname(final)}/.{os.path.basename(final)}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(JSON.to_json(snapshot, indent=2))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        self._update_latest_hint(snapshot.id)
        return True

    def _update_latest_hint(self, snapshot_id: int) -> None:
        # LATEST is only a hint: readers verify it against the listing.
        try:
            write_file_atomically(self.file_io, self.snapshot_manager.latest_file, str(snapshot_id))
        except OSError as exc:
            log.warning("could not update LATEST hint: %s", exc)

    def close(self):
        pass


def atomic_snapshot_commit(table) -> SnapshotCommit:
    manager = table.snapshot_manager()
    if _local_path(manager.get_snapshot_path(1)) is not None:
        return LinkingSnapshotCommit(manager)
    log.warning("no atomic publication for %s: concurrent commits may be lost", table.table_path)
    return RenamingSnapshotCommit(manager)
