"""A Paimon table staged beside its final place, published by one directory rename.

The staged table is a complete Paimon table (schema, data, first snapshot) in
`<parent>/.<name>.lakesink-staging-<token>/`. Names starting with a dot are
skipped by Paimon's file-system catalog, and the directory holds `STAGED.json`
so nothing mistakes it for a table. Paimon's manifests name data files
relative to the table directory, so the whole directory can move.

* create: `rename(staging, path)` — atomic; fails if `path` is a non-empty
  directory, so of two concurrent creators exactly one wins.
* replace: `renameat2(RENAME_EXCHANGE)` swaps old and new atomically (Linux);
  the old table, now at the staging path, is then removed.

Object stores have no atomic directory rename: atomic CTAS needs a local or
POSIX file system there (`ctas.atomicity-enabled=false` selects the plain path).
"""

from __future__ import annotations

import ctypes
import datetime as dt
import errno
import json
import os
import shutil
import socket
import time
import uuid

from ... import storage
from ...errors import ConfigurationError, TableAlreadyExistsError
from ...protocol.staging import StagedTable
from ..table import tables

MARKER = "STAGED.json"
STAGED = storage.DocumentKind("lakesink.staged-table", 1, "lakesink staged-table marker",
                              "A lakesink that reads it decides whether its job is over.")
STAGING_INFIX = storage.paths.STAGING_INFIX


def _local(path: str) -> str:
    path = storage.normalize(path)
    if path.startswith("file://"):
        return path[len("file://"):]
    if path.startswith("file:"):
        return path[len("file:"):]
    if "://" in path:
        raise ConfigurationError(
            f"Atomic CREATE TABLE AS needs a local or POSIX file system; {path} is not one. "
            "Set option ctas.atomicity-enabled=false to create it without atomicity."
        )
    return path


def exchange(a: str, b: str) -> None:
    """Atomically swap two paths (Linux renameat2 with RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, a.encode(), at_fdcwd, b.encode(), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


class PaimonStagedTable(StagedTable):
    def __init__(self, path: str, replace: bool = False, if_not_exists: bool = False):
        self.path = _local(path)
        self.replace = replace
        self.if_not_exists = if_not_exists
        parent, name = os.path.split(self.path)
        self.staging_path = os.path.join(parent, f".{name}{STAGING_INFIX}{uuid.uuid4().hex[:12]}")
        self._skipped = False

    @property
    def skipped(self) -> bool:
        return self._skipped

    def begin(self) -> None:
        if not self.replace and tables.open_table(self.path) is not None:
            if self.if_not_exists:
                self._skipped = True
                return
            raise TableAlreadyExistsError(f"Table {self.path} already exists; nothing was written.")
        self.make_staging()

    def make_staging(self) -> None:
        """The hidden staging directory, with a marker naming its owner (for `clean_staging`)."""
        os.makedirs(self.staging_path)
        STAGED.write(None, os.path.join(self.staging_path, MARKER), target=self.path, pid=os.getpid(),
                     host=socket.gethostname(), created_at=time.time())

    def commit(self) -> None:
        os.unlink(os.path.join(self.staging_path, MARKER))
        if self.replace and tables.open_table(self.path) is not None:
            exchange(self.staging_path, self.path)
            shutil.rmtree(self.staging_path, ignore_errors=True)  # the old table
            return
        _clear_leftovers(self.path)
        try:
            os.rename(self.staging_path, self.path)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                self.abort()
                raise TableAlreadyExistsError(
                    f"Table {self.path} was created by another job while this one ran; "
                    "this job's data was removed."
                ) from exc
            raise

    def abort(self, settle_s: float = 10.0) -> None:
        # An interrupted job's writer may still be cleaning its own files in there (Spark's job
        # abort deletes `_temporary` after cancelled tasks stop): a removal racing it fails on
        # the last rmdir and leaves an empty directory. Removed again until it stays gone.
        deadline = time.monotonic() + settle_s
        while True:
            shutil.rmtree(self.staging_path, ignore_errors=True)
            if time.monotonic() >= deadline:
                return
            time.sleep(0.2)
            if not os.path.exists(self.staging_path):
                time.sleep(0.3)
                if not os.path.exists(self.staging_path):
                    return


def _clear_leftovers(path: str) -> None:
    """A directory holding only lakesink's own leftovers (no table) must not block the rename."""
    if os.path.isdir(path) and tables.open_table(path) is None:
        if set(os.listdir(path)) <= {tables.LAKESINK_DIR}:
            shutil.rmtree(path)


def read_marker(directory: str) -> dict | None:
    """The STAGED.json marker of a (local) directory, or None when it has none (a catalog CTAS
    keeps it in the table's own directory until its catalog transaction committed)."""
    path = os.path.join(directory, MARKER)
    try:
        with open(path) as src:
            marker = json.load(src)
    except (OSError, ValueError):
        return None  # none, or torn (an older lakesink wrote it in place): not a marker
    return STAGED.check(marker, path) if STAGED.is_one(marker) else None


def local_dir(path: str) -> str:
    """The local directory of `path`; object stores are refused (atomic CTAS needs a rename)."""
    return _local(path)


def staged_tables(directory: str, table_name: str | None = None) -> list[tuple[str, dict]]:
    """(path, marker) of the staged tables under a database directory (of `table_name` only, if given)."""
    directory = _local(directory)
    found = []
    prefix = f".{table_name}{STAGING_INFIX}" if table_name is not None else None
    for entry in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        full = os.path.join(directory, entry)
        if not (entry.startswith(".") and STAGING_INFIX in entry and os.path.isdir(full)):
            continue
        if prefix is not None and not entry.startswith(prefix):
            continue
        marker = read_marker(full)
        if marker is not None:
            found.append((full, marker))
    return found


def abandoned(marker: dict, older_than: dt.timedelta, now: float | None = None) -> tuple[bool, str]:
    """Whether a staged table's job is over, and why (or why it may still run)."""
    older_than_s = older_than.total_seconds()
    age = (now if now is not None else time.time()) - float(marker.get("created_at", 0))
    host, pid = marker.get("host"), int(marker.get("pid", -1))
    if host == socket.gethostname() and not _alive(pid):
        return True, f"its job's process {pid} on this host is gone"
    if age > older_than_s:
        return True, f"started {_age_text(age)} ago, longer than {_age_text(older_than_s)}"
    where = "on this host" if host == socket.gethostname() else f"on {host}"
    return False, f"its job (process {pid} {where}) may still run: started {_age_text(age)} ago"


def _age_text(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.0f} s"


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
