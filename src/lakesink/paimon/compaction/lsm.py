"""Full compaction of one bucket of a primary-key table: Paimon's LSM merge, engine-neutral.

A primary-key bucket is an LSM tree: every write adds level-0 files (each one
a sorted run), compaction merges runs into higher levels, each level >= 1 is
one sorted run. A *full* compaction reads every data file of one (partition,
bucket), merges the versions of each key as the merge engine says, and writes
the survivors, sorted by key, as one sorted run at the table's highest level
(`num-levels` - 1). Output goes to the highest level, so retractions leave for
good (Paimon drops deletes only there).

Versions of a key merge as the table's merge engine says (`paimon.keyed.merge_engines`); which
runs a compaction takes is Paimon's universal compaction (`paimon.keyed.lsm_policy`).

`KeyedCompactTask` is picklable: an engine runs it on its executors (the
`Rewriter` of `paimon.compaction.rewrite`) or `rewrite_on_driver` runs it here. It writes
into the compaction's staging directory or, given an `InPlace`, straight to the
table paths (`paimon.compaction.outputs`). Planning (which buckets, when) lives in
`paimon.compaction.keyed_aggregator`, committing in `paimon.compaction.target`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ... import storage
from ...protocol import crashpoints
from ..table import parquet_layout
from .outputs import InPlace, placed
from ..files import deletion_vectors
from ..files.datafiles import StagedFile, TableLayout, describe_parquet, with_encoding
from ..keyed.layout import KEY_PREFIX, RETRACT_KINDS, VALUE_KIND, KeyedSpec, kv_schema, with_key_value_meta
from ..keyed.lsm_policy import CompactUnit, LsmOptions, age_order
from ..keyed.merge_engines import FILE_RANK, merge

COMPACT_FILE_SOURCE = 1  # Paimon's FileSource.COMPACT
_LEVEL = "_lakesink_file_level"


@dataclass(frozen=True)
class KeyedCompactTask:
    """Fully compact the files of one (partition, bucket). Picklable (Spark tasks)."""

    inputs: tuple          # paths of every data file of the bucket, oldest first (`age_order`)
    input_bytes: int
    input_rows: int
    partition: tuple
    bucket: int
    output_dir: str        # staging directory of the new files
    layout: TableLayout
    spec: KeyedSpec
    lsm: LsmOptions
    fs_options: dict | None = None
    output_level: int | None = None  # None: the highest level (a full compaction)
    drop_deletes: bool = True        # retractions leave (no older version can lie below the output)
    input_levels: tuple = ()         # the level of each input
    changelog: str = "none"          # the changelog this compaction writes: none | lookup | full-compaction
    lookup: tuple = ()               # lookup: the bucket's files outside the compaction, oldest first
    lookup_levels: tuple = ()
    in_place: InPlace | None = None  # write the new files at their table paths, named in an intent first
    # Tables with deletion vectors: per input, where its vector lies (`Vectors.deletions`), or None;
    # the rows it marks are not read. Empty: no vectors.
    deletions: tuple = ()

    @property
    def level(self) -> int:
        return self.lsm.max_level if self.output_level is None else self.output_level

    def run(self) -> list[StagedFile]:
        return compact_bucket(self)



def read_bucket(task: KeyedCompactTask, schema: pa.Schema) -> pa.Table:
    """Every row of the bucket's files, cast to `schema`, with each file's age rank."""
    return _read_files(task, task.inputs, schema, deletions=task.deletions)


def _read_files(task: KeyedCompactTask, paths, schema: pa.Schema, first_rank: int = 0,
                levels=None, keys: pa.Table | None = None, deletions: tuple = ()) -> pa.Table:
    """The rows of `paths` as `schema` with each file's age rank (and level, given `levels`);
    only rows whose key is among `keys`, given them; rows the deletion vector of a file marks
    (`deletions`, per path) left out."""
    file_io = storage.file_io(task.output_dir, task.fs_options)
    extra = [pa.field(FILE_RANK, pa.int32())] + ([pa.field(_LEVEL, pa.int32())] if levels is not None else [])
    parts = []
    for i, path in enumerate(paths):
        with file_io.new_input_stream(path) as source:
            part = pq.ParquetFile(source).read(columns=schema.names)
        if deletions and deletions[i] is not None:  # positions count the file's rows: before any filter
            part = deletion_vectors.drop_marked(part, deletion_vectors.read_vector(file_io, deletions[i]))
        part = part.select(schema.names)
        if not part.schema.equals(schema, check_metadata=False):
            part = part.cast(schema)
        if keys is not None:
            part = part.join(keys, keys.column_names, join_type="left semi").select(schema.names).cast(schema)
        part = part.append_column(FILE_RANK, pa.array([first_rank + i] * part.num_rows, pa.int32()))
        if levels is not None:
            part = part.append_column(_LEVEL, pa.array([levels[i]] * part.num_rows, pa.int32()))
        parts.append(part)
    return pa.concat_tables(parts) if parts else pa.schema(list(schema) + extra).empty_table()


def compact_bucket(task: KeyedCompactTask) -> list[StagedFile]:
    """Merge the compaction's runs into one sorted run at its output level (and write the
    changelog the table's producer asks of it)."""
    schema = kv_schema(task.layout, task.spec)
    if task.changelog == "none":
        merged = merge(read_bucket(task, schema), task.spec, task.lsm, task.drop_deletes).combine_chunks()
        changelog = None
    else:
        merged, changelog = _merge_with_changelog(task, schema)
    return write_run(task, schema, merged, changelog)


def write_run(task: KeyedCompactTask, schema: pa.Schema, merged: pa.Table,
              changelog: pa.Table | None = None) -> list[StagedFile]:
    """Write `merged` (sorted by key) as one sorted run at the task's level, in rolling files,
    and the changelog given one; their descriptions."""
    file_io = storage.file_io(task.output_dir, task.fs_options)
    outputs: list[StagedFile] = []
    intent = task.in_place.intent(file_io, f"bucket{task.bucket}") if task.in_place is not None else None
    if intent is None and (merged.num_rows or (changelog is not None and changelog.num_rows)):
        file_io.check_or_mkdirs(task.output_dir)
    # Rolling files of about `target-file-size`, as Paimon's rolling writer: row groups of
    # about an eighth of the target (estimated from the inputs' bytes per row), a new file
    # once the bytes written reach the target.
    estimate = task.input_bytes / max(task.input_rows, 1)
    group_rows = max(1, min(1 << 20, int(task.lsm.target_size / 8 / max(estimate, 1e-9))))
    try:
        for rows, is_changelog in ((merged, False), (changelog, True)):
            start = 0
            while rows is not None and start < rows.num_rows:
                written = _write_file(task, schema, rows, start, group_rows, file_io, intent,
                                      "changelog" if is_changelog else "data")
                outputs.append(_describe(task, written, rows.slice(start, written.rows), file_io, is_changelog))
                if start == 0 and not is_changelog:
                    crashpoints.reached("mid-rewrite")
                start += written.rows
    except BaseException:
        if intent is not None:  # in the table's directories: do not leave them to a sweep
            for path in intent.files:
                file_io.delete_quietly(path)
        raise
    return outputs  # no data file when every key was deleted: the bucket ends empty


def _merge_with_changelog(task: KeyedCompactTask, schema: pa.Schema) -> tuple[pa.Table, pa.Table]:
    """The merged run and its changelog (see `paimon.compaction.lsm_changelog` for what before and after are)."""
    from .lsm_changelog import changes

    data = _read_files(task, task.inputs, schema, levels=task.input_levels)
    keys = [KEY_PREFIX + k for k in task.spec.trimmed_keys]
    if task.changelog == "lookup":
        changed = data.filter(pc.equal(data.column(_LEVEL), 0)).select(keys)
        changed = changed.group_by(keys).aggregate([])
        if task.lookup:  # previous values of those keys in the runs above the compaction
            looked_up = _read_files(task, task.lookup, schema, first_rank=-len(task.lookup),
                                    levels=task.lookup_levels, keys=changed)
            data = pa.concat_tables([looked_up, data])
        before_rows = data.filter(pc.greater(data.column(_LEVEL), 0))
    else:  # full-compaction: keys with a row below the highest level, against that level's row
        changed = data.filter(pc.not_equal(data.column(_LEVEL), task.lsm.max_level)).select(keys)
        changed = changed.group_by(keys).aggregate([])
        before_rows = data.filter(pc.equal(data.column(_LEVEL), task.lsm.max_level))
    data = data.drop_columns([_LEVEL])
    merged = merge(data, task.spec, task.lsm, drop_deletes=False).combine_chunks()
    before = merge(before_rows.drop_columns([_LEVEL]), task.spec, task.lsm, drop_deletes=False)
    before = before.join(changed, keys, join_type="left semi")
    after = merged.join(changed, keys, join_type="left semi")
    after = after.take(pc.sort_indices(after, sort_keys=[(k, "ascending") for k in keys]))
    values = [f.name for f in task.layout.fields]
    changelog = changes(before, after, keys, values, row_deduplicate=task.lsm.row_deduplicate,
                        inserts_only=task.spec.merge_engine == "first-row").combine_chunks()
    if task.drop_deletes:
        merged = merged.filter(pc.invert(pc.is_in(merged.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))))
    return merged.select(schema.names).cast(schema), changelog.select(schema.names).cast(schema)


@dataclass
class _Written:
    path: str
    rows: int
    name: str | None = None        # in place: its file name
    metadata: object = None        # in place: the footer written
    size: int | None = None


def _write_file(task: KeyedCompactTask, schema: pa.Schema, merged: pa.Table, start: int, group_rows: int,
                file_io, intent=None, kind: str = "data") -> _Written:
    """Write rows of `merged` from `start` into one new file until it reaches the target size."""
    if intent is not None:
        path, name = task.in_place.open(file_io, intent, task.partition, task.bucket, kind)
        stream = storage.new_output(file_io, path)
    else:
        path, name = f"{task.output_dir}/compact-{uuid.uuid4().hex}.parquet", None
        stream = file_io.new_output_stream(path)
    written = 0
    try:
        writer = pq.ParquetWriter(stream, schema, compression=task.lsm.compression,
                                  **parquet_layout.writer_options(schema))
        try:
            while start + written < merged.num_rows:
                group = merged.slice(start + written, group_rows)
                writer.write_table(group, row_group_size=group.num_rows)
                written += group.num_rows
                if stream.tell() >= task.lsm.target_size:
                    break
        finally:
            writer.close()
        size = stream.tell()
    finally:
        stream.close()
    if name is None:
        return _Written(path, written)
    return _Written(path, written, name, getattr(getattr(writer, "writer", None), "metadata", None), size)


def _describe(task: KeyedCompactTask, written: _Written, chunk: pa.Table, file_io,
              changelog: bool = False) -> StagedFile:
    path, metadata = written.path, written.metadata
    if metadata is None:
        with file_io.new_input_stream(path) as source:
            metadata = pq.read_metadata(source)
    staged = describe_parquet(path, task.layout, file_io, partition=task.partition, metadata=metadata,
                              file_size=written.size if written.metadata is not None else None)
    staged = replace(staged, bucket=task.bucket)
    if written.name is not None:  # written in place, under its own name (changelog-... for a changelog)
        staged = replace(placed(staged, written.name), changelog=changelog)
    elif changelog:  # a changelog file: in the snapshot's changelog manifests, named as Paimon names them
        staged = replace(staged, changelog=True, meta=replace(
            staged.meta, file_name="changelog-" + staged.meta.file_name[len("data-"):]))
    keys = [KEY_PREFIX + k for k in task.spec.trimmed_keys]
    first = [chunk.column(k)[0].as_py() for k in keys]
    last = [chunk.column(k)[chunk.num_rows - 1].as_py() for k in keys]
    float_keys = {}
    for k in task.spec.trimmed_keys:
        column = chunk.column(KEY_PREFIX + k)
        if pa.types.is_floating(column.type):
            mm = pc.min_max(column)
            float_keys[k] = (mm["min"].as_py(), mm["max"].as_py(), column.null_count)
    deletes = 0 if task.drop_deletes and not changelog else int(pc.sum(pc.is_in(
        chunk.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))).as_py() or 0)
    # Encoded here, where the rewrite runs (a Spark task when distributed), not in the commit.
    return with_encoding(with_key_value_meta(staged, metadata, task.layout, task.spec, first, last, float_keys,
                                             deletes=deletes, level=task.level, file_source=COMPACT_FILE_SOURCE),
                         task.layout)


def task_for(files: Sequence[StagedFile], table_path_of, output_dir: str, layout: TableLayout,
             spec: KeyedSpec, lsm: LsmOptions, fs_options: dict | None = None,
             unit: CompactUnit | None = None, in_place: InPlace | None = None,
             deletions: dict | None = None) -> KeyedCompactTask:
    """The task compacting `unit` (default: fully compacting `files`, every live file of one bucket);
    its outputs written in place given `in_place`. `deletions` ({file name: where its deletion
    vector lies}): a deletion-vector table's vectors, whose rows are not read; its outputs drop
    retractions at every level, as Paimon's do there (no level-0 file is read)."""
    unit = unit or lsm.full(files)
    ordered = age_order(unit.files)
    first = ordered[0]
    path_of = (lambda f: f.staged_path or table_path_of(f))
    changelog, lookup = "none", []
    if lsm.producer == "lookup" and any(f.meta.level == 0 for f in ordered):
        changelog = "lookup"
        picked = {f.meta.file_name for f in ordered}
        lookup = age_order([f for f in files if f.meta.file_name not in picked])
    elif lsm.producer == "full-compaction" and unit.output_level == lsm.max_level:
        changelog = "full-compaction"
    return KeyedCompactTask(tuple(path_of(f) for f in ordered),
                            sum(f.file_size for f in ordered), sum(f.row_count for f in ordered),
                            tuple(first.partition), first.bucket, output_dir, layout, spec, lsm, fs_options,
                            unit.output_level, unit.drop_deletes or deletions is not None,
                            tuple(f.meta.level for f in ordered),
                            changelog, tuple(path_of(f) for f in lookup), tuple(f.meta.level for f in lookup),
                            in_place, tuple(deletions.get(f.meta.file_name) for f in ordered) if deletions else ())
