"""The Paimon connector's `CommitTarget`: one snapshot per checkpoint into a table directory.

Commit identity (which (commit user, identifier) landed) is kept as Paimon
keeps it, in the snapshots, with a marker per user for fast checks: see
`identity`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import pyarrow as pa
from pypaimon.snapshot.snapshot import Snapshot

from .file_store import new_file_store_commit

from ... import options as registry
from ... import storage
from ...errors import CommitConflictError, TableNotFoundError, UnsupportedTableError
from ...protocol import crashpoints
from ...protocol.target import CommitReport, CommitTarget, Overwrite
from ..table import branches, evolution, tables
from . import hooks, identity, intents
from .checks import bucket_check_base, check_bucket_counts, check_schema_ids
from .durable import DurableForm
from .messages import Publications, bucket_messages, discard_merge, with_index, with_merge
from ..files.datafiles import StagedFile, place, table_path_of

log = logging.getLogger(__name__)

class TableSpec:
    """How to create the table on first commit, when it does not exist yet."""

    def __init__(self, schema: pa.Schema, partition_keys: list[str], primary_keys: list[str],
                 options: dict[str, str]):
        self.schema, self.partition_keys = schema, list(partition_keys)
        self.primary_keys, self.options = list(primary_keys), dict(options)
        # The table's options, all of them now: refused before anything is written or created.
        registry.check_honoured(self.options, primary_keys=self.primary_keys, complete=True)


class PaimonTarget(DurableForm, CommitTarget[StagedFile]):
    """A table directory as the protocol's target; its committables' durable form (`encode`,
    `decode`) comes from `DurableForm`."""

    def __init__(self, path: str, create: TableSpec | None = None, fs_options: dict | None = None,
                 branch: str | None = None, table=None):
        """`table`: the table as the job's planning opened it (None: opened on first use)."""
        self.path = storage.normalize(path)
        # A Paimon branch (None: main): snapshots and schemas under <table>/branch/branch-<name>/,
        # commit-user markers there too, so identities are per branch.
        self.branch = None if branches.is_main(branch) else branch
        self.identity_root = branches.branch_path(self.path, self.branch)
        self.create = create
        self.fs_options = fs_options
        self.empty_commits = False  # streaming: a snapshot even for a batch without rows
        self.after_commit = []  # callables(table, report): e.g. background maintenance
        self.maintenance = True  # background expiry/tags after each commit (option maintenance.enabled)
        # Fixed-bucket tables: the snapshot the write's sequence numbers were planned on. A
        # commit that landed files in the same buckets after it is a conflict (pypaimon's
        # fixed-bucket commit check): one writer per bucket, as Paimon requires.
        self.bucket_check_from: int | None = None
        # The bucket count every file of that snapshot had, when all had the table's (else None):
        # the commit then checks that no snapshot since changed a partition's count instead of
        # reading the partitions' files again for pypaimon's bucket-count check.
        self.uniform_buckets: int | None = None
        # The same per checkpoint, where checkpoints are planned before earlier ones commit
        # (pipelined streams) or come back from pending state: {identifier: snapshot id or None}.
        self._check_from: dict[int, int | None] = {}
        self._uniform: dict[int, int | None] = {}  # not kept in pending state: restored commits read
        self._table = table
        # (commit user, identifier, snapshot id, names of the files it added) of the last snapshot
        # this target published: what it added, without reading its manifests back.
        self._published: tuple | None = None

    def __getstate__(self):
        # Spark pickles the target into tasks and commit processes: drop open handles.
        state = dict(self.__dict__)
        state["_table"] = None
        return state

    # -- table access ------------------------------------------------------
    def table(self, refresh: bool = False):
        """The table (None: not there). `refresh`: as it is now, which is the table held unless
        its schema changed since (`tables.current`): snapshots are read afresh on every use."""
        if self._table is None:
            self._table = tables.open_table(self.path, self.fs_options, self.branch)
        elif refresh:
            self._table = tables.current(self._table, self.path, self.fs_options, self.branch)
        return self._table

    def published(self, commit_user: str, identifier: int, snapshot_id: int | None = None) -> set[str] | None:
        """Names of the data and changelog files the snapshot of (commit_user, identifier) added,
        when this target published it (else None: read them from the table)."""
        record = self._published
        if record is None or record[:2] != (commit_user, identifier):
            return None
        if snapshot_id is not None and record[2] != snapshot_id:
            return None
        return set(record[3])

    def table_or_create(self):
        table = self.table(refresh=True)
        if table is None:
            if self.create is None:
                raise TableNotFoundError(f"Table {self.path} does not exist.", table=self.path)
            try:
                table = tables.create_table(self.path, self.create.schema, self.create.partition_keys,
                                            self.create.primary_keys, self.create.options, self.fs_options)
            except Exception:
                table = self.table(refresh=True)  # lost a creation race: use theirs if it fits
                if table is None:
                    raise
            if self.create.schema is not None:
                tables.check_schema(table, self.create.schema)
            self._table = table
        return table

    @property
    def file_io(self):
        return storage.file_io(self.path, self.fs_options)

    def describe(self) -> str:
        return self.path

    def lakesink_dir(self) -> str:
        return f"{self.path}/{tables.LAKESINK_DIR}"

    # -- commit identity (see identity.py) ---------------------------------
    def forget_commit_user(self, commit_user: str) -> None:
        identity.forget(self.file_io, self.identity_root, commit_user)

    def last_committed(self, commit_user: str) -> int | None:
        table = self.table()  # (the snapshots and markers are read afresh)
        if table is None:
            marker = identity.read_marker(self.file_io, self.identity_root, commit_user)
            return marker.get("last_identifier") if marker else None
        return identity.last_committed(table, commit_user)

    def committed_snapshot(self, commit_user: str, identifier: int) -> Snapshot | None:
        return identity.committed_snapshot(self.table(), commit_user, identifier)

    # -- the fixed-bucket check's base snapshot -----------------------------
    def plan_check_from(self, identifier: int, snapshot_id: int, uniform_buckets: int | None = None) -> None:
        """Checkpoint `identifier` was planned on `snapshot_id` (kept in its pending state), whose
        files all had `uniform_buckets` buckets (None: not all the same, or unknown)."""
        self._check_from[identifier] = snapshot_id
        self._uniform[identifier] = uniform_buckets

    def check_from(self, identifier: int) -> int | None:
        return self._check_from.get(identifier, self.bucket_check_from)

    def restore_check_from(self, identifier: int, version: int | None) -> None:
        # Unaware-bucket (append) tables have no such check: their pending state records none.
        if version is None and self._fixed_buckets():
            log.warning("pending commit %s of %s has no check_from (older state): committed without "
                        "the fixed-bucket conflict check", identifier, self.path)
        self._check_from[identifier] = version
        self._uniform[identifier] = None

    def _fixed_buckets(self) -> bool:
        table = self.table()
        if table is not None:
            return bool(table.total_buckets and table.total_buckets > 0)
        return self.create is not None and int(self.create.options.get("bucket", "-1")) > 0

    def found_landed(self, commit_user: str, identifier: int) -> None:
        """Its commit may have died between the snapshot and the derived metadata: refreshed now."""
        if hooks.iceberg is None or self.branch is not None:
            return
        try:
            known = self.table()  # the option lives in the schema: no fresh open for tables without it
            if known is None or not hooks.iceberg.enabled(known):
                return
            table = self.table(refresh=True)
        except Exception:  # derived state only: the next commit or maintenance refreshes it
            log.exception("could not open %s to refresh its derived metadata", self.path)
            return
        if table is not None:
            hooks.refresh_derived(table, self.branch)

    # -- commit ------------------------------------------------------------
    def commit(self, commit_user: str, identifier: int, committables: Sequence[StagedFile],
               overwrite: Overwrite | None = None,
               properties: dict[str, str] | None = None) -> CommitReport:
        started = time.perf_counter()
        hooks.maintenance.raise_failure(self.path, self.file_io)  # an earlier background run failed
        table = self.table_or_create()
        files = list(committables)
        if evolution.ensure_schemas(table, files):
            # The table's next schema is written; the snapshot below refers to it. A crash
            # from here on leaves extra nullable columns, and the retry finds them in place.
            table = self.table(refresh=True)
            crashpoints.reached("schema-written")
        check_schema_ids(table, files)
        hooks.check_derived(table, self.branch)
        latest = table.snapshot_manager().get_latest_snapshot()
        fixed = table.total_buckets if table.total_buckets and table.total_buckets > 0 else None
        if fixed:
            check_bucket_counts(table, self.path, files, fixed, commit_user, identifier)
        planned = identifier in self._check_from
        check_from = self._check_from.pop(identifier) if planned else self.bucket_check_from
        uniform = self._uniform.pop(identifier, None) if planned else self.uniform_buckets
        dynamic = is_dynamic(table)
        # Cross-partition (a key without every partition column): no hash index, the keys' index is
        # the whole table's, read by the write as of check_from (paimon.keyed.cross_partition).
        cross = dynamic and table.table_schema.cross_partition_update()
        check_from = check_from if fixed or dynamic else None
        guard = None
        if dynamic and files:
            # Assignment read each partition's index (cross-partition: every partition's keys) as of
            # check_from: nobody else may have written there since (checked again on every
            # publication attempt, below).
            partitions = None if cross else {tuple(f.partition) for f in files}
            rule = ("A cross-partition table takes one writer at a time (a key's partition comes from the "
                    "whole table's keys)" if cross else
                    "A dynamic-bucket partition takes one writer at a time (its keys' buckets come from its "
                    "hash index)")

            def guard(snapshot, base=check_from or 0):
                reason = hooks.dynamic_index.partition_conflict(table, base, snapshot, partitions, commit_user, identifier)
                if reason is None:
                    return None
                return CommitConflictError(
                    f"Commit {identifier} of {commit_user} to dynamic-bucket table {self.path} conflicts with a "
                    f"concurrent writer: {reason}. {rule}; write again. Nothing was committed.",
                    table=self.path, commit_user=commit_user, identifier=identifier)

            conflict = guard(latest)
            if conflict is not None:
                raise conflict
        counts_at = None
        if check_from is not None and files:  # before anything moves: a conflict leaves files staged
            check_from, same_counts = bucket_check_base(table, self.path, commit_user, identifier, check_from,
                                                        files, latest, fixed)
            # Every file had the count this commit writes when it was planned, none since has
            # another: pypaimon's bucket-count check holds without reading the partitions' files.
            if same_counts and uniform == fixed and overwrite is None:
                counts_at = check_from  # (now the latest snapshot checked)
        index = None
        if dynamic and files and not cross:  # (Paimon keeps no HASH index for cross-partition tables)
            # An overwrite's index starts empty: the keys it replaces are gone (pypaimon's overwrite
            # drops the replaced partitions' index files; ours replace those of the buckets written).
            index, index_writer = hooks.dynamic_index.index_changes(table, files, latest, fresh=overwrite is not None)
        merged = None
        if files and hooks.merge_on_write is not None and hooks.merge_on_write.enabled(table):
            if overwrite is not None and latest is None:
                overwrite = None  # nothing to replace: the first commit of a new table, as an append
            if overwrite is not None:
                raise UnsupportedTableError(
                    f"{self.path} has deletion-vectors.enabled=true: lakesink does not overwrite such a table "
                    "yet (its deletion vectors would outlive the replaced files). Write the changes as upserts "
                    "and deletes, or overwrite it with Apache Paimon's Java writers. Nothing was committed.",
                    table=self.path)
            # Level 0 leaves before the snapshot: the files committed are the merged runs. What a
            # killed earlier attempt of this user placed and never published goes first.
            record = hooks.merge_on_write.record_path(self.identity_root, commit_user)
            hooks.merge_on_write.settle_previous(record, self.fs_options,
                                           lambda i: self.committed_snapshot(commit_user, i) is not None)
            merged = hooks.merge_on_write.merge_commit(table, files, hooks.merge_on_write.staging_dir(self.path),
                                                 self.fs_options, record)
        committed = merged.added if merged is not None else files
        identity.before_commit(self.file_io, self.identity_root, commit_user, latest)
        if merged is not None:
            merged.placing(table, commit_user, identifier)  # its own record of the runs it places
        else:
            intents.declare_placement(table, files)
        place(table, committed)
        crashpoints.reached("files-placed")

        messages = bucket_messages(committed, fixed, check_from)
        if index:
            with_index(messages, index)
        if merged is not None:
            with_merge(messages, merged, fixed, check_from)
        data = [f for f in files if not f.changelog]
        rows = sum(f.row_count for f in data)
        size = sum(f.file_size for f in data)
        props = {"lakesink.rows-added": str(rows), "lakesink.files-added": str(len(data)),
                 "lakesink.bytes-added": str(size)}
        props.update(properties or {})

        file_store_commit = new_file_store_commit(table, commit_user, bucket_counts_at=counts_at)
        file_store_commit.guard = guard
        attempts = Publications(file_store_commit)
        crashpoints.reached("before-snapshot")
        try:
            if overwrite is not None:
                target_table = table
                if overwrite.dynamic and table.partition_keys:
                    target_table = table.copy({"dynamic-partition-overwrite": "true"})
                else:
                    target_table = table.copy({"dynamic-partition-overwrite": "false"})
                file_store_commit = new_file_store_commit(target_table, commit_user)
                attempts = Publications(file_store_commit)
                partition = {} if overwrite.partitions is None else dict(overwrite.partitions[0])
                file_store_commit.overwrite(partition, messages, identifier, props)
            elif messages or self.empty_commits or merged is not None:
                if not messages:
                    empty_ok = table.copy({"snapshot.ignore-empty-commit": "false"})
                    file_store_commit = new_file_store_commit(empty_ok, commit_user)
                    attempts = Publications(file_store_commit)
                file_store_commit.commit(messages, identifier, props)
        except CommitConflictError as exc:
            exc.identifier = identifier
            if index:  # definitely not committed: its index files are referenced by nothing
                index_writer.abort()
            if merged is not None:
                discard_merge(table, merged)
            raise
        finally:
            file_store_commit.close()
        crashpoints.reached("after-snapshot")
        if merged is not None:
            merged.forget_staging()
        if attempts.snapshot is not None:
            self._published = (commit_user, identifier, attempts.snapshot.id,
                               frozenset(f.file_name for m in messages for f in (*m.new_files, *m.changelog_files)))

        # A retry that found its own snapshot already there (an uncertain earlier attempt)
        # published nothing here: look it up.
        snapshot = attempts.snapshot or (self.committed_snapshot(commit_user, identifier)
                                         if (messages or overwrite or self.empty_commits or merged is not None)
                                         else None)
        identity.after_commit(self.file_io, self.identity_root, commit_user, identifier,
                              snapshot.id if snapshot else (latest.id if latest else None))
        report = CommitReport(commit_user, identifier,
                              snapshot_id=snapshot.id if snapshot else None,
                              commit_kind=snapshot.commit_kind if snapshot else None,
                              attempts=attempts.count,
                              files_added=len(data), rows_added=rows, bytes_added=size)
        if snapshot is not None:
            hooks.refresh_derived(table, self.branch)
        report.duration_ms = (time.perf_counter() - started) * 1000
        for hook in self.after_commit:
            hook(table, report)
        # Background expiry runs on main only: a branch's snapshots share files with main's.
        if getattr(self, "maintenance", True) and self.branch is None:
            hooks.maintenance.after_commit(self.path, table, report, self.fs_options)
        return report

    # -- discard / restore -------------------------------------------------
    def discard(self, committables: Sequence[StagedFile], include_placed: bool = True) -> int:
        table = self.table(refresh=True) if include_placed else None
        # Files written in place exist at their table paths before the table does (its first commit
        # creates it): their paths then come from the planned table.
        planned = (intents.planned_path_factory(self) if include_placed and table is None and self.create
                   and any(f.staged_path is None for f in committables) else None)
        file_io = self.file_io
        removed = 0
        for i, f in enumerate(committables):
            paths = [f.staged_path] if f.staged_path else []
            if table is not None:
                paths.append(table_path_of(table, f))
            elif planned is not None and f.staged_path is None:
                paths.append(intents.data_file_path(planned, f.partition, f.bucket, f.meta.file_name))
            for p in paths:
                if p and file_io.exists(p):
                    file_io.delete_quietly(p)
                    removed += 1
            if i == 0 and len(committables) > 1:
                crashpoints.reached("during-abort")
        return removed

    def missing_files(self, committables: Sequence[StagedFile]) -> list[str]:
        table = self.table_or_create()
        file_io = self.file_io
        missing = []
        for f in committables:
            final = table_path_of(table, f)
            if not ((f.staged_path and file_io.exists(f.staged_path)) or file_io.exists(final)):
                missing.append(f.staged_path or final)
        return missing


def is_dynamic(table) -> bool:
    """A dynamic-bucket primary-key table (`bucket=-1`): keys find their bucket in a hash index."""
    return bool(table.is_primary_key_table) and int(table.table_schema.options.get("bucket", "-1")) == -1
