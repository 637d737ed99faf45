"""Merge on write: a commit into a deletion-vector primary-key table, as Paimon's writers make it.

Readers of a table with `deletion-vectors.enabled` skip level-0 files and merge nothing across
files: they read every file at level >= 1 and drop the rows its deletion vector marks. So a
commit may leave no level-0 file, and each key may be live in at most one row of its bucket.
Before its snapshot, a commit therefore merges, per bucket it writes, its new level-0 files
with the runs Paimon's universal compaction adds (`LsmOptions.pick`, level 0 always taken) into
one sorted run at level >= 1, and looks the merged keys up in the bucket's other files: their
older rows are marked deleted in those files' deletion vectors (Paimon's lookup). A rewritten
file leaves with its deletion vector; rows its vector marked are not read. Fixed- and
dynamic-bucket tables alike: a merge keeps every key in its bucket, so a dynamic-bucket commit's
hash index (`keyed.dynamic.index_changes`, from the new level-0 files) holds as without deletion
vectors, and its index files join the same snapshot.

Deletion vectors are read and written per bucket as one index file of kind DELETION_VECTORS
through `paimon.files.deletion_vectors` (pypaimon's bitmaps and index files).
The result is one snapshot's worth of changes (`MergedCommit`): the files it adds, the table
files it removes, the index files it swaps. The commit (`paimon.commit.target`) publishes them
as one snapshot, so no reader ever sees a level-0 file or a key twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ... import storage
from ..files import deletion_vectors
from ..files.datafiles import StagedFile, TableLayout, table_path_of
from ..keyed.layout import KEY_PREFIX, RETRACT_KINDS, VALUE_KIND, KeyedSpec, kv_schema
from ..keyed.lsm_policy import LsmOptions, age_order
from ..keyed.merge_engines import FILE_RANK, merge
from .lsm import KeyedCompactTask, write_run
from .target import live_files

_POSITION = "_lakesink_row_position"

# The table paths a commit's merge placed (runs, index files), kept until its snapshot landed or
# it gave up: a commit killed in between leaves them to the next commit of its user, which
# deletes them unless that identifier landed after all (then they are the table's).
RECORD = storage.DocumentKind("lakesink.merged-runs", 1, "lakesink record of a commit's merged runs",
                              "Move it away if it is not lakesink's; the files it names are then left "
                              "for remove_orphans.")


def record_path(identity_root: str, commit_user: str) -> str:
    import hashlib
    digest = hashlib.sha256(commit_user.encode()).hexdigest()[:32]
    return f"{storage.normalize(identity_root)}/_lakesink/merged-runs/{digest}.json"


@dataclass
class MergedCommit:
    """One commit's changes to a deletion-vector table, per (partition, bucket)."""

    added: list[StagedFile] = field(default_factory=list)     # the merged runs (staged)
    removed: list[StagedFile] = field(default_factory=list)   # table files the merge rewrote
    index: dict = field(default_factory=dict)                 # (partition, bucket) -> (adds, deletes)
    index_paths: list[str] = field(default_factory=list)      # index files written (for an abort)
    staging: str | None = None                                # where the runs were written
    fs_options: dict | None = None
    record: str | None = None                                 # the record naming what was placed
    upgraded: set = field(default_factory=set)                # names of new files committed as they are

    def placing(self, table, commit_user: str, identifier: int) -> None:
        """Record the table paths the commit is about to place, before it places them."""
        if self.record is None:
            return
        files = ([table_path_of(table, f) for f in self.created()]) + list(self.index_paths)
        RECORD.write(storage.file_io(self.record, self.fs_options), self.record, commit_user=commit_user,
                     identifier=identifier, files=files)

    def created(self) -> list[StagedFile]:
        """The runs the merge wrote (not the write's own files it commits as they are)."""
        return [f for f in self.added if not f.changelog and f.meta.file_name not in self.upgraded]

    def forget_staging(self) -> None:
        """Remove the runs' staging directory and the record (after the commit landed, or gave up)."""
        io = storage.file_io(self.staging or self.record, self.fs_options)
        if self.staging:
            io.delete_directory_quietly(self.staging)
        if self.record:
            io.delete_quietly(self.record)


def settle_previous(record: str, fs_options: dict | None, landed) -> int:
    """Delete what an earlier commit of the same user placed and never published (killed between
    placing and its snapshot): unless `landed(identifier)`. Returns the files deleted."""
    io = storage.file_io(record, fs_options)
    previous = RECORD.read(io, record)
    if previous is None:
        return 0
    deleted = 0
    if not landed(int(previous["identifier"])):
        for path in previous["files"]:
            if io.exists(path):
                io.delete_quietly(path)
                deleted += 1
    io.delete_quietly(record)
    return deleted


def enabled(table) -> bool:
    """Whether commits into `table` are merged on write: primary-key tables with deletion vectors,
    but for postpone buckets (bucket=-2), whose writers add plain postpone files that readers skip;
    the compaction assigning them to buckets merges them (`paimon.compaction.postpone`)."""
    from ..keyed.rules import POSTPONE_BUCKET
    return (table.is_primary_key_table and bool(table.options.deletion_vectors_enabled())
            and table.total_buckets != POSTPONE_BUCKET)


def merge_commit(table, files: Sequence[StagedFile], output_dir: str, fs_options: dict | None = None,
                 record: str | None = None) -> MergedCommit:
    """The changes that put `files` (new level-0 files and changelog files) into the table's latest
    snapshot as a deletion-vector table holds them. Changelog files are passed through. `record`:
    where `MergedCommit.placing` records what the commit places."""
    layout, spec, lsm = TableLayout.of(table), KeyedSpec.of_table(table), LsmOptions.of_table(table)
    result = MergedCommit(added=[f for f in files if f.changelog], staging=output_dir, fs_options=fs_options,
                          record=record)
    new_by_bucket: dict[tuple, list[StagedFile]] = {}
    for f in files:
        if not f.changelog:
            new_by_bucket.setdefault((tuple(f.partition), f.bucket), []).append(f)
    if not new_by_bucket:
        return result
    latest = table.snapshot_manager().get_latest_snapshot()
    live: dict[tuple, list[StagedFile]] = {}
    if latest is not None:
        for f in live_files(table):
            key = (tuple(f.partition), f.bucket)
            if key in new_by_bucket:
                live.setdefault(key, []).append(f)
    vectors = deletion_vectors.Vectors(table, latest)
    for key, new in new_by_bucket.items():
        old = live.get(key, [])
        entries, deleted = vectors.of_bucket(*key)
        bucket = old + new
        _check_schemas(table, bucket)
        unit = lsm.pick(bucket)
        picked = {f.meta.file_name for f in unit.files} if unit is not None else set()
        if unit is None or any(f.meta.file_name not in picked for f in bucket if f.meta.level == 0):
            raise AssertionError(f"the pick of bucket {key} of {table.table_path} leaves a level-0 file")
        lookup = age_order([f for f in bucket if f.meta.file_name not in picked])
        path_of = _paths(table, fs_options)
        first = unit.files[0]
        # One new file of its own (each key once, no retraction): committed as it is at the output
        # level, as Paimon upgrades a lone file, with no rewrite. Else the runs are merged into one;
        # retractions always leave: every older version of their keys is marked deleted below.
        upgrade = (len(unit.files) == 1 and first.meta.level == 0 and not (first.meta.delete_row_count or 0)
                   and first.meta.schema_id == table.table_schema.id and first.meta.file_name in {f.meta.file_name for f in new})
        task = KeyedCompactTask(tuple(path_of(f) for f in unit.files), sum(f.file_size for f in unit.files),
                                sum(f.row_count for f in unit.files), tuple(first.partition), first.bucket,
                                output_dir, layout, spec, lsm, fs_options, unit.output_level, True)
        outputs, marks = _merge_bucket(task, age_order(unit.files), lookup, path_of, deleted, write=not upgrade)
        if upgrade and (outputs is None or (marks and _values_needed(task))):  # rewritten after all
            upgrade = False
            outputs, marks = _merge_bucket(task, age_order(unit.files), lookup, path_of, deleted)
        if upgrade:
            outputs = [replace(first, meta=replace(first.meta, level=unit.output_level), encoded=None)]
            result.upgraded.add(first.meta.file_name)
        result.added.extend(outputs)
        old_names = {f.meta.file_name for f in old}
        result.removed.extend(f for f in unit.files if f.meta.file_name in old_names)
        # Deletion vectors of the bucket after the commit: rewritten files drop theirs.
        after = {name: dv for name, dv in deleted.items() if name not in picked}
        for name, positions in marks.items():
            if positions:
                dv = after.get(name)
                if dv is None:
                    from pypaimon.deletionvectors import BitmapDeletionVector
                    dv = after[name] = BitmapDeletionVector()
                for position in positions:
                    dv.delete(int(position))
        if after == deleted and not marks:
            continue  # no deletion vector changed
        adds = []
        if after:
            adds = [vectors.write(key[0], key[1], after)]
            result.index_paths.append(vectors.path_of(adds[0]))
        result.index[key] = (adds, [deletion_vectors.as_delete(e) for e in entries])
    return result


def _check_schemas(table, files: Sequence[StagedFile]) -> None:
    """Files of older schemas are read by column name, missing columns as nulls: right where the
    schemas since only added columns. Any other change (a rename, a new type) is refused."""
    current = {f.id: (f.name, str(f.type)) for f in table.table_schema.fields}
    for schema_id in {f.meta.schema_id for f in files} - {table.table_schema.id}:
        schema = table.schema_manager.get_schema(schema_id)
        changed = [f.name for f in (schema.fields if schema else []) if current.get(f.id) != (f.name, str(f.type))]
        if schema is None or changed:
            from ...errors import UnsupportedTableError
            raise UnsupportedTableError(
                f"{table.table_path} has deletion-vectors.enabled=true and files of schema {schema_id}, whose "
                f"columns {changed or '?'} were renamed or retyped since: lakesink does not merge such files "
                "on write yet. Compact the table with Paimon's own compaction first. Nothing was committed.",
                table=str(table.table_path))


def _paths(table, fs_options):
    """Where a file of the merge is read: its staged path, or its table path (files of the table,
    written in place, or placed by an attempt of this commit that was killed before its snapshot)."""
    def path_of(f: StagedFile) -> str:
        if f.staged_path and storage.file_io(f.staged_path, fs_options).exists(f.staged_path):
            return f.staged_path
        return table_path_of(table, f)
    return path_of


def _merge_bucket(task: KeyedCompactTask, inputs: list[StagedFile], lookup: list[StagedFile], path_of,
                  deleted: dict, write: bool = True) -> tuple[list[StagedFile], dict[str, list[int]]]:
    """Merge the picked runs into one sorted run (their deleted rows left out; `write`: written)
    and find the rows of the other files that the merged keys supersede: {file name: row positions}."""
    schema = kv_schema(task.layout, task.spec)
    file_io = storage.file_io(task.output_dir, task.fs_options)
    keys = [KEY_PREFIX + k for k in task.spec.trimmed_keys]
    data = _read(file_io, [path_of(f) for f in inputs], [deleted.get(f.meta.file_name) for f in inputs],
                 schema if write else pa.schema([schema.field(k) for k in [*keys, VALUE_KIND]]), first_rank=0)
    if not write and pc.any(pc.is_in(data.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))).as_py():
        return None, {}  # retractions after all: the caller merges (they must not reach a reader)
    changed = data.select(keys).group_by(keys).aggregate([])
    marks: dict[str, list[int]] = {}
    parts = [data]
    span = _key_span(changed, keys)
    # Deduplicate ordered by sequence number alone: the merged version of a key is never an older
    # file's, so those files give only the positions of its old rows (their keys read, no values).
    # With ignore-delete a key's only new version may be a retraction the merge ignores: values read.
    values_needed = _values_needed(task)
    read_schema = schema if values_needed else pa.schema([schema.field(k) for k in keys])
    for rank, f in enumerate(lookup, start=-len(lookup)):  # older than every picked run
        if span is None or not _may_hold(f, span):
            continue  # no merged key within the file's key range: nothing to read there
        rows = _read(file_io, [path_of(f)], [deleted.get(f.meta.file_name)], read_schema, first_rank=rank,
                     positions=True)
        rows = rows.join(changed, keys, join_type="left semi")
        if rows.num_rows:
            marks[f.meta.file_name] = rows.column(_POSITION).to_pylist()
            if values_needed:
                parts.append(rows.drop_columns([_POSITION]).select(data.column_names).cast(data.schema))
    if not write:
        return [], marks
    merged = merge(pa.concat_tables(parts), task.spec, task.lsm, drop_deletes=True).combine_chunks()
    merged = merged.select(schema.names).cast(schema)
    return write_run(task, schema, merged), marks


def _values_needed(task: KeyedCompactTask) -> bool:
    """Whether an older file's version of a key may shape the merged row (all engines but
    deduplicate by sequence number alone, whose newest version wins whole)."""
    return task.spec.merge_engine != "deduplicate" or bool(task.spec.sequence_fields) or task.lsm.ignore_delete


def _key_span(changed: pa.Table, keys: list[str]) -> tuple | None:
    """(first, last) of the merged keys, as tuples (None: no key)."""
    if not changed.num_rows:
        return None
    ordered = changed.sort_by([(k, "ascending") for k in keys])
    return (tuple(ordered.column(k)[0].as_py() for k in keys),
            tuple(ordered.column(k)[ordered.num_rows - 1].as_py() for k in keys))


def _may_hold(f: StagedFile, span: tuple) -> bool:
    """Whether the file's key range (Paimon's min_key / max_key) meets `span`; True when unsure."""
    try:
        low, high = tuple(f.meta.min_key.values), tuple(f.meta.max_key.values)
        return not (high < span[0] or low > span[1])
    except (AttributeError, TypeError):  # no key range, or values Python does not order
        return True


def _read(file_io, paths: Sequence[str], vectors: Sequence, schema: pa.Schema, first_rank: int,
          positions: bool = False) -> pa.Table:
    """The live rows of `paths` (rows their deletion vectors mark left out) as `schema`, with
    each file's age rank (and each row's position in its file, given `positions`)."""
    parts = []
    for i, (path, dv) in enumerate(zip(paths, vectors)):
        with file_io.new_input_stream(path) as source:
            parquet = pq.ParquetFile(source)
            present = set(parquet.schema_arrow.names)
            part = parquet.read(columns=[n for n in schema.names if n in present])
        for name in schema.names:  # columns added since the file's schema (`_check_schemas`)
            if name not in present:
                part = part.append_column(schema.field(name), pa.nulls(part.num_rows, schema.field(name).type))
        part = part.select(schema.names)
        if not part.schema.equals(schema, check_metadata=False):
            part = part.cast(schema)
        part = part.append_column(FILE_RANK, pa.array([first_rank + i] * part.num_rows, pa.int32()))
        if positions:
            part = part.append_column(_POSITION, pa.array(range(part.num_rows), pa.int64()))
        parts.append(deletion_vectors.drop_marked(part, dv))
    return pa.concat_tables(parts)


def staging_dir(table_path: str) -> str:
    """Where one commit's merged runs wait to be placed (removed after the commit)."""
    from ..table import tables
    return f"{storage.normalize(table_path)}/{tables.LAKESINK_DIR}/staging/merge-{uuid.uuid4().hex}"
