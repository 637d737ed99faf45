"""The Paimon connector: a `CommitTarget` over a Paimon table directory.

Commit identity lives in Paimon's own snapshot fields (commitUser,
commitIdentifier). To answer "did (user, identifier) land?" without scanning
every snapshot, each commit user has a small marker in `_lakesink/commit-users/`:
written *before* a commit is attempted (so no marker means nothing of that
user ever landed) and updated after it. The check then reads the marker and
only the snapshots published since it. Expiry keeps markers current before it
deletes snapshots (see maintenance), so the check stays right after expiry.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Sequence

import pyarrow as pa
from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.write.commit_message import CommitMessage
from pypaimon.write.commit_message_serializer import (VERSION as MESSAGE_VERSION,
                                                      deserialize_commit_message,
                                                      serialize_commit_message)
from pypaimon.write.file_store_commit import FileStoreCommit

from .commit import new_file_store_commit

from ..errors import CommitConflictError, SchemaMismatchError
from ..protocol import crashpoints
from ..protocol.target import CommitReport, CommitTarget, Overwrite
from . import maintenance, tables
from .datafiles import StagedFile, place, table_path_of
from .publish import write_file_atomically

log = logging.getLogger(__name__)

MARKER_FORMAT = "lakesink.commit-user"
MARKER_VERSION = 1


class TableSpec:
    """How to create the table on first commit, when it does not exist yet."""

    def __init__(self, schema: pa.Schema, partition_keys: list[str], primary_keys: list[str],
                 options: dict[str, str]):
        self.schema, self.partition_keys = schema, list(partition_keys)
        self.primary_keys, self.options = list(primary_keys), dict(options)


class PaimonTarget(CommitTarget[StagedFile]):
    def __init__(self, path: str, create: TableSpec | None = None, fs_options: dict | None = None):
        self.path = tables.normalize_path(path)
        self.create = create
        self.fs_options = fs_options
        self.empty_commits = False  # streaming: a snapshot even for a batch without rows
        self.after_commit = []  # callables(table, report): e.g. background maintenance
        self.maintenance = True  # background expiry/tags after each commit (option maintenance.enabled)
        self._table = None

    def __getstate__(self):
        # Spark pickles the target into tasks and commit processes: drop open handles.
        state = dict(self.__dict__)
        state["_table"] = None
        return state

    # -- table access ------------------------------------------------------
    def table(self, refresh: bool = False):
        if self._table is None or refresh:
            self._table = tables.open_table(self.path, self.fs_options)
        return self._table

    def table_or_create(self):
        table = self.table(refresh=True)
        if table is None:
            if self.create is None:
                raise FileNotFoundError(f"Table {self.path} does not exist.")
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
        return tables.file_io_for(self.path, self.fs_options)

    def describe(self) -> str:
        return self.path

    def lakesink_dir(self) -> str:
        return f"{self.path}/{tables.LAKESINK_DIR}"

    # -- commit identity ---------------------------------------------------
    def _marker_path(self, commit_user: str) -> str:
        digest = hashlib.sha256(commit_user.encode()).hexdigest()[:32]
        return f"{self.lakesink_dir()}/commit-users/{digest}.json"

    def read_marker(self, commit_user: str) -> dict | None:
        path = self._marker_path(commit_user)
        file_io = self.file_io
        if not file_io.exists(path):
            return None
        data = json.loads(file_io.read_file_utf8(path))
        if data.get("format") != MARKER_FORMAT or data.get("commit_user") != commit_user:
            raise ValueError(f"{path} is not a lakesink commit-user marker for {commit_user!r}")
        return data

    def _write_marker(self, commit_user: str, durable: bool = True, **fields) -> None:
        data = {"format": MARKER_FORMAT, "version": MARKER_VERSION, "commit_user": commit_user,
                "last_identifier": None, "last_snapshot": None, "scan_from": None}
        data.update(fields)
        write_file_atomically(self.file_io, self._marker_path(commit_user), json.dumps(data), durable)

    def forget_commit_user(self, commit_user: str) -> None:
        """Drop the marker of a one-off commit user that will never commit again."""
        self.file_io.delete_quietly(self._marker_path(commit_user))

    def last_committed(self, commit_user: str) -> int | None:
        marker = self.read_marker(commit_user)
        if marker is None:
            return None  # a marker is written before any commit attempt: nothing ever landed
        best = marker.get("last_identifier")
        table = self.table(refresh=True)
        if table is None:
            return best
        manager = table.snapshot_manager()
        latest = manager.get_latest_snapshot()
        if latest is None:
            return best
        start = marker.get("scan_from")
        if start is None:
            start = (marker.get("last_snapshot") or 0) + 1
        earliest = manager.try_get_earliest_snapshot()
        if earliest is not None and start < earliest.id:
            start = earliest.id
        # Newest first: identifiers of one user grow, so the first hit is the highest.
        for snapshot_id in range(latest.id, start - 1, -1):
            snapshot = manager.get_snapshot_by_id(snapshot_id)
            if snapshot is None:
                continue  # expired meanwhile; expiry updates the marker before deleting
            if snapshot.commit_user == commit_user:
                ident = snapshot.commit_identifier
                return ident if best is None else max(best, ident)
        return best

    def committed_snapshot(self, commit_user: str, identifier: int) -> Snapshot | None:
        table = self.table(refresh=True)
        manager = table.snapshot_manager()
        latest = manager.get_latest_snapshot()
        if latest is None:
            return None
        earliest = manager.try_get_earliest_snapshot()
        for snapshot_id in range(latest.id, (earliest.id if earliest else 1) - 1, -1):
            snapshot = manager.get_snapshot_by_id(snapshot_id)
            if snapshot and snapshot.commit_user == commit_user and snapshot.commit_identifier == identifier:
                return snapshot
            if latest.id - snapshot_id > 1000:
                break
        return None

    # -- commit ------------------------------------------------------------
    def commit(self, commit_user: str, identifier: int, committables: Sequence[StagedFile],
               overwrite: Overwrite | None = None,
               properties: dict[str, str] | None = None) -> CommitReport:
        started = time.perf_counter()
        maintenance.raise_failure(self.path, self.file_io)  # an earlier background run failed
        table = self.table_or_create()
        latest = table.snapshot_manager().get_latest_snapshot()
        marker = self.read_marker(commit_user) or {}
        self._write_marker(commit_user, last_identifier=marker.get("last_identifier"),
                           last_snapshot=marker.get("last_snapshot"),
                           scan_from=(latest.id + 1) if latest else 1)
        files = list(committables)
        self._check_schema_ids(table, files)
        place(table, files)
        crashpoints.reached("files-placed")

        messages = _messages(files)
        rows = sum(f.row_count for f in files)
        size = sum(f.file_size for f in files)
        props = {"lakesink.rows-added": str(rows), "lakesink.files-added": str(len(files)),
                 "lakesink.bytes-added": str(size)}
        props.update(properties or {})

        file_store_commit = new_file_store_commit(table, commit_user)
        attempts = _AttemptCounter(file_store_commit)
        crashpoints.reached("before-snapshot")
        try:
            if overwrite is not None:
                target_table = table
                if overwrite.dynamic and table.partition_keys:
                    target_table = table.copy({"dynamic-partition-overwrite": "true"})
                else:
                    target_table = table.copy({"dynamic-partition-overwrite": "false"})
                file_store_commit = new_file_store_commit(target_table, commit_user)
                attempts = _AttemptCounter(file_store_commit)
                partition = {} if overwrite.partitions is None else dict(overwrite.partitions[0])
                file_store_commit.overwrite(partition, messages, identifier, props)
            elif messages or self.empty_commits:
                if not messages:
                    empty_ok = table.copy({"snapshot.ignore-empty-commit": "false"})
                    file_store_commit = new_file_store_commit(empty_ok, commit_user)
                file_store_commit.commit(messages, identifier, props)
        except RuntimeError as exc:
            if "conflict" in str(exc).lower():
                raise CommitConflictError(f"Commit {identifier} to {self.path} conflicts: {exc}") from exc
            raise
        finally:
            file_store_commit.close()
        crashpoints.reached("after-snapshot")

        snapshot = (self.committed_snapshot(commit_user, identifier)
                    if (messages or overwrite or self.empty_commits) else None)
        # Not fsynced: if a crash loses it, the scan from the earlier marker finds the snapshot.
        self._write_marker(commit_user, durable=False, last_identifier=identifier,
                           last_snapshot=snapshot.id if snapshot else (latest.id if latest else None),
                           scan_from=None)
        report = CommitReport(commit_user, identifier,
                              snapshot_id=snapshot.id if snapshot else None,
                              commit_kind=snapshot.commit_kind if snapshot else None,
                              attempts=attempts.count,
                              files_added=len(files), rows_added=rows, bytes_added=size)
        report.duration_ms = (time.perf_counter() - started) * 1000
        for hook in self.after_commit:
            hook(table, report)
        if getattr(self, "maintenance", True):
            maintenance.after_commit(self.path, table, report, self.fs_options)
        return report

    def _check_schema_ids(self, table, files: Sequence[StagedFile]) -> None:
        for f in files:
            if f.meta.schema_id != table.table_schema.id:
                if f.meta.schema_id > table.table_schema.id:
                    raise SchemaMismatchError(f"{f.meta.file_name} has schema id {f.meta.schema_id} "
                                              f"newer than the table's {table.table_schema.id}")

    # -- discard / restore -------------------------------------------------
    def discard(self, committables: Sequence[StagedFile], include_placed: bool = True) -> int:
        table = self.table(refresh=True) if include_placed else None
        file_io = self.file_io
        removed = 0
        for i, f in enumerate(committables):
            paths = [f.staged_path] if f.staged_path else []
            if table is not None:
                paths.append(table_path_of(table, f))
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
        from pypaimon.schema.data_types import PyarrowFieldParser
        fields = {f.name: f for f in PyarrowFieldParser.to_paimon_schema(self.create.schema)}
        return [fields[k] for k in self.create.partition_keys]

    def encode(self, committable: StagedFile) -> dict:
        message = CommitMessage(partition=committable.partition, bucket=committable.bucket,
                                new_files=[committable.meta])
        body = serialize_commit_message(message, self._partition_fields())
        return {"paimon_commit_message_v": MESSAGE_VERSION,
                "message": base64.b64encode(body).decode("ascii"),
                "staged_path": committable.staged_path}

    def decode(self, data: dict) -> StagedFile:
        message = deserialize_commit_message(base64.b64decode(data["message"]), self._partition_fields(),
                                             version=int(data["paimon_commit_message_v"]))
        return StagedFile(partition=tuple(message.partition), bucket=message.bucket,
                          meta=message.new_files[0], staged_path=data.get("staged_path"))


def _messages(files: Sequence[StagedFile]) -> list[CommitMessage]:
    grouped: dict[tuple, list] = {}
    for f in files:
        grouped.setdefault((tuple(f.partition), f.bucket), []).append(f.meta)
    return [CommitMessage(partition=p, bucket=b, new_files=metas) for (p, b), metas in grouped.items()]


class _AttemptCounter:
    """Counts snapshot publication attempts (1 + retries after lost races)."""

    def __init__(self, file_store_commit: FileStoreCommit):
        self.count = 0
        inner = file_store_commit.snapshot_commit
        original = inner.commit

        def counting(*args, **kwargs):
            self.count += 1
            return original(*args, **kwargs)

        inner.commit = counting
