"""Data files written in place, and how what failed attempts wrote there is found again.

On object stores a rename is a COPY and a DELETE of the whole file, so the
Spark-native path's tasks write each data file straight to its table path
(`<table>/<partition dirs>/bucket-N/<uuid name>`, a name no other attempt can
take) and the commit moves nothing. Those files sit in the table's own
directories before any snapshot references them, so every task attempt first
writes an *intent* under its job's staging prefix naming the files it is about
to write:

    <staging>/intents/<task>-<uuid>.json
    {"format": "lakesink.intent", "version": 1, "files": ["s3://b/t/dt=1/bucket-0/data-….parquet", …]}

rewritten (one small PUT) each time the attempt opens another file. Whoever
ends the job (its commit, its abort, a replay, the restore after a dead driver,
`clean_staging`) reads the intents and deletes the named files no snapshot of
the job references, then removes the prefix (`sweep`). Local disks keep staging
and renaming (cheap and atomic there) unless `write.in-place` says otherwise.

Staged files get an intent too, just before the commit moves them to their table
paths (`declare_placement`, task name `placement`): a driver killed between those
moves and the snapshot would otherwise leave files that nothing names.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from pypaimon.utils.file_store_path_factory import canonical_data_file_path

from ... import storage
from ...errors import ConfigurationError

log = logging.getLogger(__name__)

INTENT = storage.DocumentKind("lakesink.intent", 1, "lakesink intent",
                               "Its job's files are unknown: leave the staging directory to a lakesink that reads it.")
INTENTS = "intents"
CHOICES = ("auto", "true", "false")
STAGING = "/_lakesink/staging/"


def in_place(table_path: str, choice: str | None) -> bool:
    """Whether data files of a write to `table_path` go straight to their table paths
    (option `write.in-place`: `auto` means on every store but the local file system)."""
    choice = (choice or "auto").lower()
    if choice not in CHOICES:
        raise ConfigurationError(f"write.in-place={choice!r}: use one of {', '.join(CHOICES)}.",
                                 option="write.in-place")
    if choice == "auto":
        return not storage.is_local(table_path)
    return choice == "true"


# -- where a file goes ----------------------------------------------------------------------
class _Paths:
    """What `canonical_data_file_path` asks of a table: its path factory (picklable)."""

    def __init__(self, factory):
        self.factory = factory

    def path_factory(self):
        return self.factory


def planned_path_factory(target):
    """The path factory of the write's table, also of a table the first commit will create
    (built from the planned schema; writes nothing)."""
    table = target.table()
    if table is not None:
        return table.path_factory()
    from pypaimon.schema.schema import Schema
    from pypaimon.schema.table_schema import TableSchema
    from pypaimon.table.file_store_table import FileStoreTable
    from ..table.tables import _identifier
    spec = target.create
    schema = Schema.from_pyarrow_schema(spec.schema, partition_keys=spec.partition_keys or None,
                                        primary_keys=spec.primary_keys or None, options=dict(spec.options))
    planned = FileStoreTable(target.file_io, _identifier(target.path), target.path,
                             TableSchema.from_schema(0, schema))
    return planned.path_factory()


def data_file_path(factory, partition: tuple, bucket: int, name: str) -> str:
    """Where the table keeps data file `name` of `partition`/`bucket` (as `datafiles.table_path_of`)."""
    return canonical_data_file_path(_Paths(factory), tuple(partition), bucket, name)


# -- the task's side ------------------------------------------------------------------------
def intents_dir(staging_dir: str) -> str:
    return f"{staging_dir.rstrip('/')}/{INTENTS}"


class Intent:
    """One task attempt's intent: the table paths it writes, declared before each is opened."""

    def __init__(self, file_io, staging_dir: str, task: str):
        self.file_io = file_io
        # A uuid as well: attempt ids start again at 0 in a restarted driver, which may rerun
        # the same micro-batch into the same staging directory.
        self.path = f"{intents_dir(staging_dir)}/{task}-{uuid.uuid4().hex[:12]}.json"
        self.files: list[str] = []

    def declare(self, paths: Iterable[str]) -> None:
        """Name `paths` (with every file named before) before any of them is written."""
        self.files.extend(paths)
        text = INTENT.dumps(files=self.files)
        if storage.is_local(self.path):
            # Replaced whole (a killed task leaves the old text or the new, never a torn one); no
            # fsync: a SIGKILL loses no page cache, and the files it names are not durable either.
            storage.write_atomically(self.file_io, self.path, text, durable=False)
            return
        with storage.new_output(self.file_io, self.path) as out:  # one PUT, whole or nothing
            out.write(text.encode("utf-8"))


def staging_dir_of(staged_path: str) -> str | None:
    """The job's staging directory a staged file lies under (None: not under one)."""
    at = staged_path.find(STAGING)
    if at < 0:
        return None
    end = staged_path.find("/", at + len(STAGING))
    return staged_path[:end] if end > 0 else None


def declare_placement(table, files: Iterable) -> None:
    """Before staged files move to their table paths: name those paths in an intent of their
    job's staging directory, so that whoever ends the job after a driver died between the
    moves and the snapshot (a re-run with the job's identity, `clean_staging`) finds them."""
    from ..files.datafiles import PathsOf, table_path_of

    paths, by_dir = PathsOf(table), {}
    for staged in files:
        staging_dir = staged.staged_path and staging_dir_of(staged.staged_path)
        if staging_dir:
            by_dir.setdefault(staging_dir, []).append(table_path_of(paths, staged))
    for staging_dir, targets in by_dir.items():
        Intent(table.file_io, staging_dir, "placement").declare(targets)


# -- the cleaner's side ---------------------------------------------------------------------
def read_intents(staging_dir: str, fs_options: dict | None) -> list[str]:
    """Every file the intents under `staging_dir` name (none if there are no intents)."""
    return [p for files in read_intent_files(staging_dir, fs_options).values() for p in files]


def read_intent_files(staging_dir: str, fs_options: dict | None) -> dict[str, list[str]]:
    """{intent's path: the files it names} of every intent under `staging_dir`."""
    entries = [e for e in storage.list_dir(intents_dir(staging_dir), fs_options) if e.path.endswith(".json")]
    if not entries:
        return {}
    io = storage.file_io(staging_dir, fs_options)
    named: dict[str, list[str]] = {}
    for entry in entries:
        # A local write is replaced atomically and an object PUT is whole: a torn intent is not
        # something lakesink writes. Refuse (CorruptStateError) rather than guess what it named.
        data = INTENT.read(io, entry.path)
        if data is None:
            continue  # removed meanwhile (the attempt cleaned up after itself)
        named[entry.path] = [str(p) for p in data.get("files", [])]
    return named


def added_names(table, snapshot) -> set[str]:
    """Names of the data and changelog files `snapshot` added."""
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager
    lists, files = ManifestListManager(table), ManifestFileManager(table)
    metas = list(lists.read_delta(snapshot))
    if snapshot.changelog_manifest_list:
        metas += lists.read_changelog(snapshot)
    names = set()
    for meta in metas:
        for entry in files.read(meta.file_name, file_size=meta.file_size):
            names.add(entry.file.file_name)
    return names


def committed_names(target, commit_user: str, identifier: int, snapshot_id: int | None = None) -> set[str] | None:
    """Names of the files the snapshot of (commit_user, identifier) added: empty when it did not
    land; None when it landed but its snapshot is no longer found (expired), so nobody can tell."""
    from . import identity
    published = getattr(target, "published", None)
    known = published(commit_user, identifier, snapshot_id) if published is not None else None
    if known is not None:  # this target published that snapshot: it knows what it added
        return known
    table = target.table()  # (its snapshots are read afresh)
    if table is None:
        return set()
    if snapshot_id is not None:
        snapshot = table.snapshot_manager().get_snapshot_by_id(snapshot_id)
    else:
        last = identity.last_committed(table, commit_user)
        if last is None or last < identifier:
            return set()
        snapshot = identity.committed_snapshot(table, commit_user, identifier)
    if snapshot is None:
        return None
    return added_names(table, snapshot)


def delete_named(paths: Iterable[str], keep: Callable[[str], bool], fs_options: dict | None) -> int:
    """Delete every path in `paths` that `keep` refuses; returns how many were there to delete."""
    doomed = sorted({p for p in paths if not keep(p)})
    if not doomed:
        return 0
    io = storage.file_io(doomed[0], fs_options)

    def delete(path: str) -> int:
        try:
            return 1 if io.delete(path) else 0
        except FileNotFoundError:
            return 0  # never written, or removed by its own attempt

    if len(doomed) == 1:
        return delete(doomed[0])
    with ThreadPoolExecutor(min(8, len(doomed))) as pool:
        return sum(pool.map(delete, doomed))


def sweep(target, staging_dir: str, commit_user: str, identifier: int, snapshot_id: int | None = None) -> int:
    """Delete what the intents under `staging_dir` name and the job's snapshot did not add.

    `snapshot_id`: the job's snapshot when the caller knows it (saves looking it up). The
    caller removes the prefix afterwards. Returns the number of files deleted."""
    named = read_intents(staging_dir, target.fs_options)
    if not named:
        return 0
    keep = committed_names(target, commit_user, identifier, snapshot_id)
    if keep is None:
        log.warning("%s: commit %s of %s landed but its snapshot is gone; the %d files its attempts named "
                    "are left for remove_orphan_files", staging_dir, identifier, commit_user, len(named))
        return 0
    removed = delete_named(named, lambda p: os.path.basename(p) in keep, target.fs_options)
    if removed:
        log.info("%s: removed %d data files of failed or losing attempts", staging_dir, removed)
    return removed
