"""Staging that failed or killed jobs left behind, and whether it is safe to remove.

lakesink writes data files into staging before a commit moves them into the
table, and removes the staging when the job ends. A killed job leaves it:

* `<table>/_lakesink/staging/<16 hex>`: a batch job (`lakesink.write`,
  `format("paimon")` batch writes). Nothing outside the job's process refers to
  it: removed once nothing in it changed for `older_than` (a running job keeps
  writing there).
* `<table>/_lakesink/staging/<12 hex>-b<N>`: micro-batch N of a streaming
  query. When the query's commit user has committed an identifier above N, the
  directory holds only leftovers and is removed (what the query itself does when
  it restarts). Otherwise it may hold a batch the query's checkpoint still
  commits (pipelined mode) or replays: kept, unless `include_pending` and it is
  older than `older_than` (a restarted query then fails with `RestoreError`
  instead of committing that batch).
* `<table>/_lakesink/staging/<12 hex>-compact`: compaction. Of a streaming
  query's aggregator (its commit user is known): as pending batches. Of a
  `lakesink compact` run: by age.
* Data files written in place (`write.in-place`, the default on object stores) lie in
  the table's directories; the staging's intents name them. Before a directory is
  removed, the files its intents name that no retained snapshot or tag lists go.
* `<database>/.<table>.lakesink-staging-<token>`: a CREATE/REPLACE TABLE AS
  that did not publish. Removed when its process on this host is gone or it is
  older than `older_than` (`lakesink.clean_staging`'s rule).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import time

from ... import storage
from ...errors import NotAPaimonTableError
from ...protocol.staging import STAGING_AGE, staging_age
from ..commit import identity, intents
from ..catalog import cleanup
from ..catalog import staged_table as staged
from ..catalog.cleanup import StagingEntry
from ..table import tables

_BATCH_JOB = re.compile(r"^[0-9a-f]{16}$")
_STREAM_BATCH = re.compile(r"^([0-9a-f]{12})-b(\d+)$")
_COMPACTION = re.compile(r"^([0-9a-f]{12})-compact$")


# A table's job staging carries no owner and no heartbeat: its age is the only sign that its job
# is over, and removing it under a running job loses that job's rows. Its default is longer than
# the staged tables' (STAGING_AGE).
JOB_STAGING_AGE = dt.timedelta(days=1)


def clean_staging(path: str, older_than: dt.timedelta | float | None = None, dry_run: bool = False,
                  include_pending: bool = False, fs_options: dict | None = None,
                  now: float | None = None) -> list[StagingEntry]:
    """Find (and unless `dry_run`, remove) staging of failed or killed jobs of the table at `path`.

    `path` may also be a table that does not exist (yet): a CREATE TABLE AS that
    died leaves only its staged table beside it; or a database directory: its
    staged tables (`cleanup.clean_database`). `older_than`: a `datetime.timedelta` or
    seconds; by default an hour for staged tables (`STAGING_AGE`) and a day for the
    table's job staging (`JOB_STAGING_AGE`). Returns every staging directory found,
    with what was done and why.
    """
    job_age = JOB_STAGING_AGE if older_than is None else staging_age(older_than)
    staged_age = STAGING_AGE if older_than is None else staging_age(older_than)
    now = time.time() if now is None else now
    cutoff = now - job_age.total_seconds()
    path = storage.normalize(path)
    out: list[StagingEntry] = []
    out += _job_staging(path, cutoff, job_age, include_pending, fs_options, now)
    local = storage.local_path(path)
    if local is not None:
        parent, name = os.path.split(local.rstrip("/"))
        out += cleanup.clean_database(parent, staged_age, dry_run, name, now)
        if os.path.isdir(local) and not os.path.isdir(os.path.join(local, "schema")):
            out += cleanup.clean_database(local, staged_age, dry_run, None, now)  # a database directory
    if not dry_run:
        io = storage.file_io(path, fs_options)
        referenced = None
        for entry in out:
            if not entry.remove or entry.kind == "staged-table":  # staged tables: cleanup removed them
                continue
            named = intents.read_intents(entry.path, fs_options)
            if named:  # files written in place by the staging's job: those no snapshot needs go
                if referenced is None:
                    referenced = _referenced_names(path, fs_options)
                intents.delete_named(named, lambda p: os.path.basename(p) in referenced, fs_options)
            io.delete_directory_quietly(entry.path)
    return out


def _referenced_names(path: str, fs_options: dict | None) -> set[str]:
    """Names of the data files any retained snapshot or tag of the table lists. Which job a
    staging directory belonged to, and whether it landed, may be unknown here (a one-off
    user's marker is dropped after its commit): any reference keeps a file."""
    from .metadata import Metadata, list_tags
    try:
        table = tables.open_table(path, fs_options)
    except NotAPaimonTableError:
        table = None
    if table is None:
        return set()
    snapshots = list(table.snapshot_manager().list_snapshots()) + list(list_tags(table).values())
    return {os.path.basename(p) for p in Metadata(table).referenced(snapshots)}


def _job_staging(path: str, cutoff: float, older_than: dt.timedelta, include_pending: bool,
                 fs_options: dict | None, now: float) -> list[StagingEntry]:
    directory = f"{path}/{tables.LAKESINK_DIR}/staging"
    entries = storage.list_dir(directory, fs_options, files_only=False)
    if not entries:
        return []
    users = _commit_users(path, fs_options)
    files = storage.list_dir(directory, fs_options, recursive=True)
    out = []
    for entry in entries:
        if not entry.is_dir:
            continue
        name = entry.path.rstrip("/").rsplit("/", 1)[-1]
        inside = [f.mtime for f in files if f.path.startswith(entry.path.rstrip("/") + "/")]
        newest = max([entry.mtime, *inside])
        when = dt.datetime.fromtimestamp(newest, dt.timezone.utc) if newest else None
        old = newest < cutoff
        age = f"last changed {_ago(now - newest)} ago" if newest else "no modification time"
        young = f"{age}, within --older-than {_ago(older_than.total_seconds())}: its job may still run"
        if _BATCH_JOB.match(name):
            out.append(StagingEntry(entry.path, "batch-job", when, old,
                                    f"batch job staging, {age}" if old else young))
            continue
        match = _STREAM_BATCH.match(name)
        if match:
            user, last = users.get(match.group(1), (None, None))
            batch = int(match.group(2))
            if last is not None and batch < last:
                out.append(StagingEntry(entry.path, "stream-batch", when, True,
                                        f"micro-batch {batch} of commit user {user!r}, which has committed up "
                                        f"to identifier {last}: leftovers"))
            else:
                out.append(_pending(entry.path, "stream-batch", when, old, include_pending, young,
                                    f"micro-batch {batch} of {_who(user)} is not committed: its checkpoint "
                                    "may still commit or replay it"))
            continue
        match = _COMPACTION.match(name)
        if match:
            owner = users.get(match.group(1), (None, None))[0]
            if owner is None:
                out.append(StagingEntry(entry.path, "compaction", when, old,
                                        f"compaction job staging, {age}" if old else young))
            else:
                out.append(_pending(entry.path, "compaction", when, old, include_pending, young,
                                    f"compaction of {owner!r}: its rewritten files may be pending in a "
                                    "streaming checkpoint"))
            continue
        out.append(StagingEntry(entry.path, "unknown", when, old, f"unknown staging, {age}" if old else young))
    return out


def _pending(path, kind, when, old, include_pending, young, why) -> StagingEntry:
    if not old:
        return StagingEntry(path, kind, when, False, f"{why}; {young}")
    if include_pending:
        return StagingEntry(path, kind, when, True, f"{why}; removed as asked (--include-pending)")
    return StagingEntry(path, kind, when, False, f"{why}; kept (remove with --include-pending)")


def _who(user: str | None) -> str:
    return f"commit user {user!r}" if user is not None else "a streaming query whose commit user is unknown"


def _ago(seconds: float) -> str:
    return staged._age_text(seconds)


def _commit_users(path: str, fs_options: dict | None) -> dict[str, tuple[str, int | None]]:
    """Staging token -> (commit user, last committed identifier), for every commit user with a marker.

    A stream's batches stage under sha256(user)[:12]; its aggregator under
    sha256(user + ".compact")[:12] (that one maps to the user, no identifier)."""
    io = storage.file_io(path, fs_options)
    try:
        table = tables.open_table(path, fs_options)
    except NotAPaimonTableError:
        table = None  # a directory holding other things: markers' own identifiers only
    out: dict[str, tuple[str, int | None]] = {}
    for entry in storage.list_dir(identity.markers_dir(path), fs_options):
        if not entry.path.endswith(".json"):
            continue
        try:
            marker = identity.MARKER.read(io, entry.path, skip_other_formats=True)
        except OSError:
            continue
        user = marker.get("commit_user") if marker is not None else None
        if not isinstance(user, str):
            continue
        last = identity.last_committed(table, user) if table is not None else marker.get("last_identifier")
        out[_token(user)] = (user, last)
        out.setdefault(_token(user + ".compact"), (user, None))
    return out


def _token(user: str) -> str:
    return hashlib.sha256(user.encode()).hexdigest()[:12]
