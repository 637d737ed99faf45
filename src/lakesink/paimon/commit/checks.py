"""What a commit checks before anything moves: other writers in its buckets since it was planned, the
bucket count its files were written for, and their schemas.

Fixed-bucket tables take one writer per bucket, as Paimon requires: a write's sequence numbers
continue above what its buckets held at the snapshot it was planned on, and another writer's
files landing there since are a conflict (`bucket_check_base`, before pypaimon's own check).
"""

from __future__ import annotations

from collections.abc import Sequence

from pypaimon.snapshot.snapshot import Snapshot

from ...errors import CommitConflictError, SchemaMismatchError
from ..files.datafiles import StagedFile
from . import hooks, key_ranges


def bucket_check_base(table, path: str, commit_user: str, identifier: int, check_from: int,
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
    where = f"Commit {identifier} of {commit_user} to {path}"
    same_counts = True
    manager = table.snapshot_manager()
    manifests = None
    for snapshot_id in range(check_from + 1, latest.id + 1):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise CommitConflictError(
                f"Commit {identifier} of {commit_user} to {path} cannot check for other writers in its "
                f"buckets: snapshot {snapshot_id} (after snapshot {check_from}, which its sequence numbers "
                "were planned on) has expired. Keep snapshots longer than a batch may stay pending.",
                table=path, commit_user=commit_user, identifier=identifier, snapshot=snapshot_id)
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
                                                          table=path, commit_user=commit_user,
                                                          identifier=identifier)
                        if conflict is None:
                            continue
                        raise conflict
                    raise CommitConflictError(
                        f"Commit {identifier} of {commit_user} to {path} conflicts with a concurrent "
                        f"change: snapshot {snapshot_id} ({snapshot.commit_user!r}) added files to partition "
                        f"{tuple(entry.partition.values)}, bucket {entry.bucket} after snapshot {check_from}, "
                        "which this commit's sequence numbers were planned on. Paimon allows one writer "
                        "per bucket.", table=path, commit_user=commit_user, identifier=identifier,
                        snapshot=snapshot_id)
    return latest.id, same_counts


def check_bucket_counts(table, path: str, files: Sequence[StagedFile], fixed: int, commit_user: str,
                        identifier: int) -> None:
    """Files are bucketed for the count of the schema they were written with. If the table's
    count changed since (ALTER ... SET ('bucket'), a rescale), their keys are in the wrong
    buckets for it, even where pypaimon's check finds the partition rescaled or empty."""
    for schema_id in {f.meta.schema_id for f in files} - {table.table_schema.id}:
        schema = table.schema_manager.get_schema(schema_id)
        written = int((schema.options if schema else {}).get("bucket", fixed))
        if written != fixed:
            raise CommitConflictError(
                f"Commit {identifier} of {commit_user} to {path} refused: its files were bucketed for "
                f"{written} buckets (schema {schema_id}), and the table now has {fixed}: its `bucket` option "
                "changed while the write ran. Write again: it plans for the new count. Nothing was committed.",
                table=path, commit_user=commit_user, identifier=identifier)


def check_schema_ids(table, files: Sequence[StagedFile]) -> None:
    for f in files:
        if f.meta.schema_id > table.table_schema.id:
            raise SchemaMismatchError(f"{f.meta.file_name} has schema id {f.meta.schema_id} "
                                      f"newer than the table's {table.table_schema.id}")
