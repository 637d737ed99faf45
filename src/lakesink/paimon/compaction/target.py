"""Compaction commits into a Paimon table, and the live files a round reads.

A COMPACT snapshot swaps files: DELETE entries for the files before, ADD entries for
the files after, with Paimon's conflict check (a compaction conflicts when a file it
removes is no longer live). The swap is one snapshot, so a reader sees the small files
or the big one, never both and never neither.

In an append table with deletion vectors the rewrites left out the rows the vectors marked:
the snapshot also drops the removed files' vectors from their buckets' index, and is a
conflict if rows of a removed file were marked after its rewrite read them (the count its
vector marks now differs from the count the rewrite left out, `deletion_vectors.applied_conflict`)
or another writer changed those buckets' vectors meanwhile. A rewrite left with no row adds no
file. A primary-key table with deletion vectors is handled alike, except that its merge also
drops rows: the rewrite reports how many rows each input's vector marked as it read them
(`applied`), and the commit conflicts if a vector of a removed file marks more now (a writer's
merge on write marked an older version of a key the rewrite kept).

pypaimon refuses compaction increments in a normal commit; `commit_compaction`
drives its commit loop (`_try_commit`, kind COMPACT, conflict detection on)
directly, through the same atomic publication and manifest merging as every
other lakesink commit. Outputs are staged and renamed into the table, or written
in place on object stores (`paimon.compaction.outputs`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.manifest.schema.manifest_entry import ManifestEntry
from pypaimon.table.row.generic_row import GenericRow

from ... import storage
from ...errors import CommitConflictError
from ...protocol import crashpoints
from ...protocol.coordinator import CompactionTarget
from ...protocol.target import CommitReport
from . import outputs as compact_outputs
from ..commit import identity
from ..commit.file_store import new_file_store_commit
from ..files import deletion_vectors
from ..files.datafiles import StagedFile, place, table_path_of
from ..commit.hooks import refresh_derived
from ..commit.target import PaimonTarget

log = logging.getLogger(__name__)

_ADD, _DELETE = 0, 1


def _entry(table, kind: int, f: StagedFile) -> ManifestEntry:
    return ManifestEntry(kind=kind, partition=GenericRow(list(f.partition), table.partition_keys_fields),
                         bucket=f.bucket, file=f.meta,
                         total_buckets=table.total_buckets if f.total_buckets is None else f.total_buckets)


def live_files(table, partitions: Sequence[dict] | None = None) -> list[StagedFile]:
    """The data files the latest snapshot holds (optionally of some partitions only)."""
    from ..commit.live_files import live_entries
    from pypaimon.manifest.schema.file_entry import FileEntry

    wanted = None
    if partitions is not None:
        wanted = [tuple(_partition_value(table, k, p.get(k)) for k in table.partition_keys) for p in partitions]
    out = []
    for e in FileEntry.merge_entries(live_entries(table)):
        if e.kind != _ADD:
            continue
        values = tuple(e.partition.values)
        if wanted is not None and values not in wanted:
            continue
        out.append(StagedFile(values, e.bucket, e.file, None, total_buckets=e.total_buckets))
    return out


def _partition_value(table, key: str, value):
    """A partition value as the manifests hold it (the user may give '2024-01-01' for a DATE)."""
    if value is None or not isinstance(value, str):
        return value
    field = next(f for f in table.partition_keys_fields if f.name == key)
    type_name = str(field.type).upper()
    try:
        if type_name.startswith(("INT", "BIGINT", "SMALLINT", "TINYINT")):
            return int(value)
        if type_name.startswith("DATE"):
            import datetime as dt
            return dt.date.fromisoformat(value)
        if type_name.startswith("BOOLEAN"):
            return value.lower() == "true"
    except ValueError:
        pass
    return value


class PaimonCompactionTarget(CompactionTarget[StagedFile]):
    """Compaction commits into one Paimon table, with lakesink's commit identity markers."""

    def __init__(self, target: PaimonTarget):
        self.target = target
        # Compact users whose intents name no file a snapshot took (paimon.compaction.outputs).
        self._swept: set[str] = set()

    def identity(self, f: StagedFile) -> str:
        return f.meta.file_name

    def encode(self, f: StagedFile) -> dict:
        return self.target.encode(f)

    def decode(self, data: dict) -> StagedFile:
        return self.target.decode(data)

    def as_committed(self, f: StagedFile) -> StagedFile:
        return f if f.staged_path is None else replace(f, staged_path=None)

    def last_committed(self, commit_user: str) -> int | None:
        return self.target.last_committed(commit_user)

    def staging_dir(self, compact_user: str) -> str:
        token = hashlib.sha256(compact_user.encode()).hexdigest()[:12]
        return f"{self.target.lakesink_dir()}/staging/{token}-compact"

    def commit_compaction(self, commit_user: str, identifier: int, replaced: Sequence[StagedFile],
                          new: Sequence[StagedFile], properties: dict[str, str] | None = None,
                          applied: dict[str, int] | None = None) -> CommitReport:
        """`applied`: in a primary-key table with deletion vectors, {input file name: rows its
        vector marked when the rewrite read it} (`KeyedCompactionAggregator.applied`)."""
        started = time.perf_counter()
        table = self.target.table(refresh=True)
        latest = table.snapshot_manager().get_latest_snapshot()
        identity.before_commit(table.file_io, self.target.identity_root, commit_user, latest)
        marks = deletion_vectors.enabled(table) and not table.is_primary_key_table
        if marks:
            for f in new:  # every row of its inputs was marked deleted: nothing to add
                if not f.changelog and f.row_count == 0:
                    table.file_io.delete_quietly(f.staged_path or table_path_of(table, f))
            new = [f for f in new if f.changelog or f.row_count > 0]
        place(table, list(new))
        entries = ([_entry(table, _DELETE, f) for f in replaced]
                   + [_entry(table, _ADD, f) for f in new if not f.changelog])
        changelog = [_entry(table, _ADD, f) for f in new if f.changelog]  # lookup / full-compaction producers
        props = {"lakesink.files-removed": str(len(replaced)), "lakesink.files-added": str(len(new)),
                 "lakesink.rows-rewritten": str(sum(f.row_count for f in new))}
        props.update(properties or {})
        commit = new_file_store_commit(table, commit_user)
        changes = []
        if deletion_vectors.enabled(table):
            changes = self._dropped_vectors(table, latest, replaced)
            rows_after = sum(f.row_count for f in new if not f.changelog)

            def guard(snapshot):
                found = _vectors_conflict(table, snapshot, replaced, rows_after, applied)
                return None if found is None else CommitConflictError(
                    f"Compaction of {table.table_path} conflicts with a concurrent change: {found}.",
                    table=str(table.table_path), commit_user=commit_user)
            commit.guard = guard
        index_adds, index_deletes = deletion_vectors.index_entries(changes)
        try:
            commit._try_commit(commit_kind="COMPACT", commit_identifier=identifier,
                               commit_entries_plan=lambda _snapshot: entries, detect_conflicts=True,
                               allow_rollback=False, snapshot_properties=props, changelog_entries=changelog,
                               index_adds=index_adds, index_deletes=index_deletes)
        except CommitConflictError as exc:
            exc.identifier = identifier
            deletion_vectors.discard(table.file_io, changes)  # definitely not committed
            raise
        finally:
            commit.close()
        crashpoints.reached("after-compact")
        snapshot = self.target.committed_snapshot(commit_user, identifier)
        identity.after_commit(table.file_io, self.target.identity_root, commit_user, identifier,
                              snapshot.id if snapshot else None)
        if snapshot is not None:
            refresh_derived(table, self.target.branch)
        if compact_outputs.in_place_outputs(new):  # what failed attempts wrote in place goes
            swept = compact_outputs.after_commit(self.target, self.staging_dir(commit_user),
                                                 {f.meta.file_name for f in new})
            (self._swept.add if swept else self._swept.discard)(commit_user)
        return CommitReport(commit_user, identifier, snapshot_id=snapshot.id if snapshot else None,
                            commit_kind="COMPACT", files_added=len(new),
                            rows_added=sum(f.row_count for f in new), bytes_added=sum(f.file_size for f in new),
                            files_removed=len(replaced), rows_removed=sum(f.row_count for f in replaced),
                            bytes_removed=sum(f.file_size for f in replaced),
                            duration_ms=(time.perf_counter() - started) * 1000)

    @staticmethod
    def _dropped_vectors(table, snapshot, replaced: Sequence[StagedFile]) -> list:
        """The index changes dropping the vectors of `replaced` from their buckets."""
        vectors = deletion_vectors.Vectors(table, snapshot)
        marked = set(vectors.cardinalities())
        by_bucket: dict[tuple, list[str]] = {}
        for f in replaced:
            if f.meta.file_name in marked:
                by_bucket.setdefault((tuple(f.partition), f.bucket), []).append(f.meta.file_name)
        changes = [vectors.change_bucket(partition, bucket, dropped=names)
                   for (partition, bucket), names in by_bucket.items()]
        return [c for c in changes if c is not None]

    def stale(self, replaced: Sequence[StagedFile], new: Sequence[StagedFile],
              applied: dict[str, int] | None = None) -> bool:
        """Whether rows of `replaced` were marked deleted after their rewrite into `new` read them."""
        table = self.target.table(refresh=True)
        if table is None or not deletion_vectors.enabled(table):
            return False
        return _vectors_conflict(table, table.snapshot_manager().get_latest_snapshot(), replaced,
                                 sum(f.row_count for f in new if not f.changelog), applied) is not None

    def discard(self, committables: Sequence[StagedFile]) -> int:
        return self.target.discard(committables)

    def before_round(self, compact_user: str) -> None:
        """Before a plan writes anything: once, and after a failed removal, remove what the intents
        of earlier compactions name and no snapshot took (their commit may have died first)."""
        if compact_user not in self._swept:
            compact_outputs.sweep(self.target, self.staging_dir(compact_user), compact_user)
            self._swept.add(compact_user)

    def missing_files(self, committables: Sequence[StagedFile]) -> list[str]:
        placed = [f for f in committables if f.staged_path is None]  # staged ones: `place` checks
        return self.target.missing_files(placed) if placed else []

    def live(self, committables: Sequence[StagedFile]) -> list[StagedFile]:
        table = self.target.table(refresh=True)
        if table is None:
            return []
        names = {f.meta.file_name for f in live_files(table)}
        return [f for f in committables if f.meta.file_name in names]

    def committed_since(self, commit_user: str, identifier: int | None,
                        limit: int = 1000) -> list[tuple[int, list[StagedFile]]]:
        table = self.target.table(refresh=True)
        if table is None:
            return []
        manager = table.snapshot_manager()
        latest = manager.get_latest_snapshot()
        if latest is None:
            return []
        earliest = manager.try_get_earliest_snapshot()
        lists, manifests = ManifestListManager(table), ManifestFileManager(table)
        found = []
        for snapshot_id in range(latest.id, max(earliest.id if earliest else 1, latest.id - limit) - 1, -1):
            snapshot = manager.get_snapshot_by_id(snapshot_id)
            if snapshot is None or snapshot.commit_user != commit_user:
                continue
            if identifier is not None and snapshot.commit_identifier <= identifier:
                break
            files = []
            for meta in lists.read_delta(snapshot):
                for e in manifests.read(meta.file_name, drop_stats=False, file_size=meta.file_size):
                    if e.kind == _ADD:
                        files.append(StagedFile(tuple(e.partition.values), e.bucket, e.file, None))
            found.append((snapshot.commit_identifier, files))
        return list(reversed(found))

    def clean_staging(self, compact_user: str, keep: Sequence[StagedFile]) -> int:
        removed = 0
        if not compact_outputs.in_place_outputs(keep):  # else a compaction in place of unknown outcome
            try:
                removed = compact_outputs.sweep(self.target, self.staging_dir(compact_user), compact_user)
                self._swept.add(compact_user)
            except Exception as exc:  # noqa: BLE001 - the next round sweeps before it writes
                log.warning("%s: could not remove compaction outputs written in place: %s",
                            self.staging_dir(compact_user), exc)
        keep_paths = {storage.normalize(f.staged_path) for f in keep if f.staged_path}
        file_io = self.target.file_io
        for entry in storage.list_dir(self.staging_dir(compact_user), self.target.fs_options):
            if storage.normalize(entry.path) not in keep_paths:
                file_io.delete_quietly(entry.path)
                removed += 1
        return removed


def _vectors_conflict(table, snapshot, replaced: Sequence[StagedFile], rows_after: int,
                      applied: dict[str, int] | None) -> str | None:
    """Rows of `replaced` marked deleted after the rewrite read them, described; or None."""
    if not table.is_primary_key_table:
        return deletion_vectors.applied_conflict(table, snapshot, replaced, rows_after)
    return deletion_vectors.marked_since(table, snapshot, replaced, applied or {})
