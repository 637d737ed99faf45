"""The Paimon connector's `CommitTarget`: one snapshot per checkpoint into a table directory.

Commit identity (which (commit user, identifier) landed) is kept as Paimon
keeps it, in the snapshots, with a marker per user for fast checks: see
`identity`.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Sequence

import pyarrow as pa
from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.write.commit_message import CommitMessage
from pypaimon.write.commit_message_serializer import (VERSION as MESSAGE_VERSION,
                                                      deserialize_commit_message)
from pypaimon.write.file_store_commit import FileStoreCommit

from .file_store import new_file_store_commit

from ... import options as registry
from ... import storage
from ...errors import CommitConflictError, SchemaMismatchError, TableNotFoundError, UnsupportedTableError
from ...protocol import crashpoints
from ...protocol.target import CommitReport, CommitTarget, Overwrite
from ..table import branches, evolution, tables
from . import hooks, identity, intents, key_ranges
from ..files.datafiles import StagedFile, encode_message, encoding_key, place, table_path_of

log = logging.getLogger(__name__)

class TableSpec:
    """How to create the table on first commit, when it does not exist yet."""

    def __init__(self, schema: pa.Schema, partition_keys: list[str], primary_keys: list[str],
                 options: dict[str, str]):
        self.schema, self.partition_keys = schema, list(partition_keys)
        self.primary_keys, self.options = list(primary_keys), dict(options)
        # The table's options, all of them now: refused before anything is written or created.
        registry.check_honoured(self.options, primary_keys=self.primary_keys, complete=True)


class PaimonTarget(CommitTarget[StagedFile]):
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

    def _bucket_check_base(self, table, commit_user: str, identifier: int, check_from: int,
                           files: Sequence[StagedFile], latest: Snapshot | None,
                           buckets: int | None = None) -> tuple[int, bool]:
        """The snapshot pypaimon's fixed-bucket check starts from, after checking the snapshots
        since `check_from` here: a checkpoint planned while its predecessors were still being
        committed (pipelined) has them, and the compactions after them, in between. Those are
        not conflicts: its sequence numbers continue above theirs. Any other writer's files in
        its buckets are. Only this checkpoint's committer commits for its user, so nothing of
        ours lands after `latest`: pypaimon checks from there (and again on each retry).
        Also whether no file those snapshots added to the commit's partitions has a bucket count
        other than `buckets` (a rescale writes a partition anew, not always into our buckets).
        Primary-key tables: another writer's appended files whose key range does not meet this
        commit's in that bucket are no conflict (`key_ranges`: its keys' older versions all lie
        below this commit's sequence numbers, and the other writer holds none of them)."""
        if latest is None or latest.id <= check_from:
            return check_from, True
        merged_on_write = hooks.merge_on_write is not None and hooks.merge_on_write.enabled(table)
        owners = {(tuple(f.partition), f.bucket) for f in files}
        partitions = {p for p, _ in owners}
        # Primary-key tables: another writer's APPEND files in our buckets whose keys do not meet
        # ours there are no conflict (key_ranges); table without key: any file is.
        ours = (key_ranges.ranges_by_bucket((f.partition, f.bucket, f.meta) for f in files if not f.changelog)
                if table.is_primary_key_table else None)
        where = f"Commit {identifier} of {commit_user} to {self.path}"
        same_counts = True
        manager = table.snapshot_manager()
        manifests = None
        for snapshot_id in range(check_from + 1, latest.id + 1):
            snapshot = manager.get_snapshot_by_id(snapshot_id)
            if snapshot is None:
                raise CommitConflictError(
                    f"Commit {identifier} of {commit_user} to {self.path} cannot check for other writers in its "
                    f"buckets: snapshot {snapshot_id} (after snapshot {check_from}, which its sequence numbers "
                    "were planned on) has expired. Keep snapshots longer than a batch may stay pending.",
                    table=self.path, commit_user=commit_user, identifier=identifier, snapshot=snapshot_id)
            if snapshot.commit_kind == "COMPACT":
                continue  # keeps sequence numbers; the commit's own check skips them too (paimon.commit.file_store)
            if (snapshot.commit_user == commit_user and snapshot.commit_identifier < identifier
                    and (snapshot.commit_kind == "APPEND" or (merged_on_write and snapshot.commit_kind == "OVERWRITE"))):
                continue  # an earlier batch of this checkpoint (merged on write: an OVERWRITE, as Paimon's)
            if manifests is None:
                from pypaimon.manifest.manifest_file_manager import ManifestFileManager
                from pypaimon.manifest.manifest_list_manager import ManifestListManager
                manifests = ManifestListManager(table), ManifestFileManager(table)
            for meta in manifests[0].read_delta(snapshot):
                for entry in manifests[1].read(meta.file_name, file_size=meta.file_size):
                    if entry.kind != 0:
                        continue
                    if entry.total_buckets != buckets and tuple(entry.partition.values) in partitions:
                        same_counts = False
                    if (tuple(entry.partition.values), entry.bucket) in owners:
                        if ours is not None and snapshot.commit_kind == "APPEND":
                            conflict = key_ranges.check_added(entry, snapshot, ours, where, check_from,
                                                              table=self.path, commit_user=commit_user,
                                                              identifier=identifier)
                            if conflict is None:
                                continue
                            raise conflict
                        raise CommitConflictError(
                            f"Commit {identifier} of {commit_user} to {self.path} conflicts with a concurrent "
                            f"change: snapshot {snapshot_id} ({snapshot.commit_user!r}) added files to partition "
                            f"{tuple(entry.partition.values)}, bucket {entry.bucket} after snapshot {check_from}, "
                            "which this commit's sequence numbers were planned on. Paimon allows one writer "
                            "per bucket.", table=self.path, commit_user=commit_user, identifier=identifier,
                            snapshot=snapshot_id)
        return latest.id, same_counts

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
        self._check_schema_ids(table, files)
        hooks.check_derived(table, self.branch)
        latest = table.snapshot_manager().get_latest_snapshot()
        fixed = table.total_buckets if table.total_buckets and table.total_buckets > 0 else None
        if fixed:
            self._check_bucket_counts(table, files, fixed, commit_user, identifier)
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
            check_from, same_counts = self._bucket_check_base(table, commit_user, identifier, check_from, files,
                                                              latest, fixed)
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

        messages = _messages(committed, fixed, check_from)
        if index:
            _with_index(messages, index)
        if merged is not None:
            _with_merge(messages, merged, fixed, check_from)
        data = [f for f in files if not f.changelog]
        rows = sum(f.row_count for f in data)
        size = sum(f.file_size for f in data)
        props = {"lakesink.rows-added": str(rows), "lakesink.files-added": str(len(data)),
                 "lakesink.bytes-added": str(size)}
        props.update(properties or {})

        file_store_commit = new_file_store_commit(table, commit_user, bucket_counts_at=counts_at)
        file_store_commit.guard = guard
        attempts = _Publications(file_store_commit)
        crashpoints.reached("before-snapshot")
        try:
            if overwrite is not None:
                target_table = table
                if overwrite.dynamic and table.partition_keys:
                    target_table = table.copy({"dynamic-partition-overwrite": "true"})
                else:
                    target_table = table.copy({"dynamic-partition-overwrite": "false"})
                file_store_commit = new_file_store_commit(target_table, commit_user)
                attempts = _Publications(file_store_commit)
                partition = {} if overwrite.partitions is None else dict(overwrite.partitions[0])
                file_store_commit.overwrite(partition, messages, identifier, props)
            elif messages or self.empty_commits or merged is not None:
                if not messages:
                    empty_ok = table.copy({"snapshot.ignore-empty-commit": "false"})
                    file_store_commit = new_file_store_commit(empty_ok, commit_user)
                    attempts = _Publications(file_store_commit)
                file_store_commit.commit(messages, identifier, props)
        except CommitConflictError as exc:
            exc.identifier = identifier
            if index:  # definitely not committed: its index files are referenced by nothing
                index_writer.abort()
            if merged is not None:
                _discard_merge(table, merged)
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

    def _check_bucket_counts(self, table, files: Sequence[StagedFile], fixed: int, commit_user: str,
                             identifier: int) -> None:
        """Files are bucketed for the count of the schema they were written with. If the table's
        count changed since (ALTER ... SET ('bucket'), a rescale), their keys are in the wrong
        buckets for it, even where pypaimon's check finds the partition rescaled or empty."""
        for schema_id in {f.meta.schema_id for f in files} - {table.table_schema.id}:
            schema = table.schema_manager.get_schema(schema_id)
            written = int((schema.options if schema else {}).get("bucket", fixed))
            if written != fixed:
                raise CommitConflictError(
                    f"Commit {identifier} of {commit_user} to {self.path} refused: its files were bucketed for "
                    f"{written} buckets (schema {schema_id}), and the table now has {fixed}: its `bucket` option "
                    "changed while the write ran. Write again: it plans for the new count. Nothing was committed.",
                    table=self.path, commit_user=commit_user, identifier=identifier)

    def _check_schema_ids(self, table, files: Sequence[StagedFile]) -> None:
        for f in files:
            if f.meta.schema_id > table.table_schema.id:
                raise SchemaMismatchError(f"{f.meta.file_name} has schema id {f.meta.schema_id} "
                                          f"newer than the table's {table.table_schema.id}")

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

    # -- durable form ------------------------------------------------------
    def _partition_fields(self):
        table = self.table()
        if table is not None:
            return table.partition_keys_fields
        fields = self._planned_fields()
        return [fields[k] for k in self.create.partition_keys]

    def _key_fields(self):
        """The fields of a key-value file's min/max key (the primary key minus partition
        columns); None for tables without a primary key."""
        table = self.table()
        if table is not None:
            return table.trimmed_primary_keys_fields or None
        if not self.create.primary_keys:
            return None
        from pypaimon.schema.data_types import PyarrowFieldParser
        fields = {f.name: f for f in PyarrowFieldParser.to_paimon_schema(self.create.schema)}
        return [fields[k] for k in self.create.primary_keys if k not in self.create.partition_keys]

    def _planned_fields(self) -> dict:
        from pypaimon.schema.data_types import PyarrowFieldParser
        return {f.name: f for f in PyarrowFieldParser.to_paimon_schema(self.create.schema)}

    _ENCODED_KEPT = 4096  # encoded messages remembered: a stream saves the same files' state every batch

    def encode(self, committable: StagedFile) -> dict:
        # pypaimon's own serializer; a changelog file travels as the message's changelog file.
        # A file's description changes only with its level or schema (evolution at commit): one
        # encoding per file, level and schema, kept here and on the file (made by its task).
        key = encoding_key(committable)
        encoded = self.__dict__.setdefault("_encoded", {})
        message = encoded.get(key)
        if message is None:
            carried = committable.encoded
            message = carried[1] if carried is not None and carried[0] == key else \
                encode_message(committable, self._partition_fields())
            if len(encoded) >= self._ENCODED_KEPT:
                encoded.pop(next(iter(encoded)))
            encoded[key] = message
        out = {"paimon_commit_message_v": MESSAGE_VERSION, "message": message,
               "staged_path": committable.staged_path}
        if committable.schema is not None and not self._has_schema(committable.schema):
            # A restore must be able to write it (table/evolution.py); once the table has it, the
            # schema id alone says it (streams keep planning with it for the query's life).
            out["table_schema"] = evolution.schema_to_json(committable.schema)
        return out

    def _has_schema(self, schema) -> bool:
        """Does the table hold `schema` (same id, same columns)? Remembered once true."""
        known = self.__dict__.setdefault("_schemas_in_table", set())
        if schema.id not in known:
            from pypaimon.schema.schema_manager import SchemaManager
            existing = SchemaManager(self.file_io, self.path, self.branch or "main").get_schema(schema.id)
            if existing is None or not evolution.same_columns(existing, schema):
                return False
            known.add(schema.id)
        return True

    def decode(self, data: dict) -> StagedFile:
        message = deserialize_commit_message(base64.b64decode(data["message"]), self._partition_fields(),
                                             self._key_fields(),
                                             version=int(data["paimon_commit_message_v"]))
        schema = data.get("table_schema")
        changelog = not message.new_files and bool(message.changelog_files)
        staged = StagedFile(partition=tuple(message.partition), bucket=message.bucket,
                            meta=(message.changelog_files if changelog else message.new_files)[0],
                            staged_path=data.get("staged_path"),
                            schema=evolution.schema_from_json(schema) if schema else None, changelog=changelog)
        if int(data["paimon_commit_message_v"]) == MESSAGE_VERSION:  # saved again as it came
            staged.encoded = (encoding_key(staged), data["message"])
        return staged


def is_dynamic(table) -> bool:
    """A dynamic-bucket primary-key table (`bucket=-1`): keys find their bucket in a hash index."""
    return bool(table.is_primary_key_table) and int(table.table_schema.options.get("bucket", "-1")) == -1


def _with_index(messages: list[CommitMessage], index: dict) -> None:
    """Each bucket's new hash index file (and the one it replaces) on that bucket's message."""
    by_bucket = {(tuple(m.partition), m.bucket): m for m in messages}
    for key, (adds, deletes) in index.items():
        message = by_bucket.get(key)
        if message is None:
            message = CommitMessage(partition=key[0], bucket=key[1], new_files=[])
            messages.append(message)
        message.index_adds = list(adds)
        message.index_deletes = list(deletes)


def _with_merge(messages: list[CommitMessage], merged, total_buckets: int | None,
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


def _discard_merge(table, merged) -> None:
    """A merge whose commit definitely failed: its placed runs and index files are nobody's."""
    file_io = table.file_io
    for f in merged.created():  # the write's own files stay with the protocol (kept or discarded)
        file_io.delete_quietly(table_path_of(table, f))
        if f.staged_path:
            file_io.delete_quietly(f.staged_path)
    for path in merged.index_paths:
        file_io.delete_quietly(path)
    merged.forget_staging()


def _messages(files: Sequence[StagedFile], total_buckets: int | None = None,
              check_from: int | None = None) -> list[CommitMessage]:
    grouped: dict[tuple, tuple[list, list]] = {}
    for f in files:
        data, changelog = grouped.setdefault((tuple(f.partition), f.bucket), ([], []))
        (changelog if f.changelog else data).append(f.meta)
    return [CommitMessage(partition=p, bucket=b, new_files=data, changelog_files=changelog,
                          total_buckets=total_buckets, check_from_snapshot=check_from)
            for (p, b), (data, changelog) in grouped.items()]


class _Publications:
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
