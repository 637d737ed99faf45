"""Full compaction of one bucket of a primary-key table: Paimon's LSM merge, engine-neutral.

A primary-key bucket is an LSM tree: every write adds level-0 files (each one
a sorted run), compaction merges runs into higher levels, each level >= 1 is
one sorted run. A *full* compaction reads every data file of one (partition,
bucket), merges the versions of each key as the merge engine says, and writes
the survivors, sorted by key, as one sorted run at the table's highest level
(`num-levels` - 1). Output goes to the highest level, so retractions leave for
good (Paimon drops deletes only there).

Merge order, as Paimon's readers merge: by key, then `sequence.field` (nulls
first), then `_SEQUENCE_NUMBER`; equal versions by file age (higher levels are
older than lower ones, level-0 files by sequence range). `deduplicate` keeps
the last version, `first-row` the first; `partial-update` and `aggregation` merge
the versions of a key with several into one +I row (`merge_field`), a key's only
version stays as it is (Paimon's reducer); a surviving `-U`/`-D` removes the key;
with `ignore-delete` retractions are ignored before merging.

`KeyedCompactTask` is picklable: an engine runs it on its executors (the
`Rewriter` of `paimon.rewrite`) or `rewrite_on_driver` runs it here. It writes
into the compaction's staging directory or, given an `InPlace`, straight to the
table paths (`paimon.compact_outputs`). Planning (which buckets, when) lives in
`paimon.keyed_compaction`, committing in `paimon.compaction_target`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import options as registry
from .. import storage
from ..errors import UnsupportedTableError
from ..protocol import crashpoints
from . import parquet_layout
from .compact_outputs import InPlace, placed
from .datafiles import StagedFile, TableLayout, describe_parquet, with_encoding
from .keyed import KEY_PREFIX, RETRACT_KINDS, SEQUENCE, VALUE_KIND, KeyedSpec, with_key_value_meta

COMPACT_FILE_SOURCE = 1  # Paimon's FileSource.COMPACT
_RANK = "_lakesink_file_rank"
_LEVEL = "_lakesink_file_level"


@dataclass(frozen=True)
class LsmOptions:
    """A primary-key table's compaction options, as Paimon reads them (picklable)."""

    trigger: int             # num-sorted-run.compaction-trigger
    num_levels: int          # num-levels; Paimon's default: trigger + 1
    target_size: int         # target-file-size (Paimon's default for primary-key tables: 128 MB)
    write_only: bool         # write-only: writers never compact
    ignore_delete: bool      # ignore-delete (and its merge-engine specific aliases)
    merge_engine: str
    compression: str
    max_size_amp: int = 200  # compaction.max-size-amplification-percent
    size_ratio: int = 1      # compaction.size-ratio
    producer: str = "none"   # changelog-producer
    row_deduplicate: bool = False       # changelog-producer.row-deduplicate
    delta_commits: int | None = None    # full-compaction.delta-commits

    @property
    def full_compaction_every(self) -> int | None:
        """Commits between automatic full compactions: `full-compaction.delta-commits`, or every
        commit for `changelog-producer=full-compaction` (Paimon's writers do the same)."""
        if self.delta_commits is not None:
            return self.delta_commits
        return 1 if self.producer == "full-compaction" else None

    @property
    def max_level(self) -> int:
        return self.num_levels - 1

    @classmethod
    def of_table(cls, table) -> LsmOptions:
        raw = registry.table_options_of(table)
        trigger = registry.table_value(raw, "num-sorted-run.compaction-trigger")
        levels = registry.table_value(raw, "num-levels")
        engine = str(raw.get("merge-engine", "deduplicate")).strip().lower()
        return cls(trigger=trigger, num_levels=levels if levels is not None else trigger + 1,
                   target_size=table.options.target_file_size(True),
                   write_only=registry.table_value(raw, "write-only"),
                   ignore_delete=bool(table.options.ignore_delete()), merge_engine=engine,
                   compression=registry.table_value(raw, "file.compression"),
                   max_size_amp=registry.table_value(raw, "compaction.max-size-amplification-percent"),
                   size_ratio=registry.table_value(raw, "compaction.size-ratio"),
                   producer=str(raw.get("changelog-producer", "none")).strip().lower(),
                   row_deduplicate=registry.table_value(raw, "changelog-producer.row-deduplicate"),
                   delta_commits=registry.table_value(raw, "full-compaction.delta-commits"))

    def sorted_runs(self, files: Sequence[StagedFile]) -> int:
        """Sorted runs of one bucket: each level-0 file is one, each non-empty level above one."""
        return sum(1 for f in files if f.meta.level == 0) + len({f.meta.level for f in files if f.meta.level > 0})

    def needs_compaction(self, files: Sequence[StagedFile]) -> bool:
        """Whether the automatic policy (`pick`) compacts anything in this bucket."""
        return self.pick(files) is not None

    def pick(self, files: Sequence[StagedFile]) -> CompactUnit | None:
        """What the automatic policy compacts in one bucket: Paimon's universal compaction.

        Sorted runs newest first (level-0 files by sequence range, then levels 1, 2, ...).
        1. size amplification: the runs above the oldest add up to more than
           `compaction.max-size-amplification-percent` of it: all runs (a full compaction);
        2. size ratio: from the newest run, take older runs while the next is at most
           `compaction.size-ratio`% larger than the runs taken;
        3. run count over the trigger: at least the newest runs - trigger + 1, grown by ratio.
        Output goes to the level below the first run left out (never level 0; the highest level
        when every run is taken). First-row tables and aggregation buckets holding retractions
        always compact fully (`needs_compaction`): readers must not see their level-0 files.
        With `changelog-producer=lookup` every level-0 run is compacted after its commit.
        """
        level0 = sum(1 for f in files if f.meta.level == 0)
        if self.merge_engine == "first-row" and level0:
            return self.full(files)
        if self.merge_engine == "aggregation" and level0 and (
                self.producer == "lookup" or any(f.meta.level == 0 and f.meta.delete_row_count for f in files)):
            # pypaimon (lakesink's reader) cannot merge an aggregation's retractions, nor the merged
            # values a lookup compaction writes above older ones: such buckets compact fully.
            return self.full(files)
        runs = _runs(files)
        unit = self._universal(runs)
        if self.producer == "lookup" and level0 and (
                unit is None or sum(1 for f in unit.files if f.meta.level == 0) < level0):
            # Paimon's ForceUpLevel0Compaction: with a lookup changelog every level-0 run leaves
            # level 0 in the round after its commit, merged with the runs the size ratio adds.
            unit = self._by_ratio(runs, level0, force=True)
        return unit

    def _universal(self, runs: list) -> CompactUnit | None:
        if len(runs) < max(self.trigger, 2):
            return None
        newer = sum(_size(r) for r in runs[:-1])
        if newer * 100 > self.max_size_amp * _size(runs[-1]):
            return self.full([f for run in runs for f in run])
        unit = self._by_ratio(runs, 1)
        if unit is None and len(runs) > self.trigger:
            unit = self._by_ratio(runs, len(runs) - self.trigger + 1, force=True)
        return unit

    def full(self, files: Sequence[StagedFile]) -> CompactUnit:
        return CompactUnit(tuple(files), self.max_level, True)

    def _by_ratio(self, runs: list, count: int, force: bool = False) -> CompactUnit | None:
        size = sum(_size(r) for r in runs[:count])
        while count < len(runs) and size * (100.0 + self.size_ratio) / 100.0 >= _size(runs[count]):
            size += _size(runs[count])
            count += 1
        if not force and count <= 1:
            return None
        if count == len(runs):
            return self.full([f for run in runs for f in run])
        output = max(0, _level(runs[count]) - 1)
        if output == 0:  # never write level 0: take runs up to the first one above it
            while count < len(runs):
                level = _level(runs[count])
                count += 1
                if level != 0:
                    output = level
                    break
            if count == len(runs):
                return self.full([f for run in runs for f in run])
        picked = [f for run in runs[:count] for f in run]
        highest = max(_level(r) for r in runs)
        return CompactUnit(tuple(picked), output, output >= highest)

    def fully_compacted(self, files: Sequence[StagedFile]) -> bool:
        """One sorted run at the highest level without retractions: a full compaction changes nothing."""
        return all(f.meta.level == self.max_level and not (f.meta.delete_row_count or 0) for f in files)


@dataclass(frozen=True)
class CompactUnit:
    """Files of one bucket to merge into one sorted run at `output_level`; `drop_deletes` when no
    older version of a key can lie below (the output is the bucket's highest non-empty level)."""

    files: tuple
    output_level: int
    drop_deletes: bool


def _runs(files: Sequence[StagedFile]) -> list[list[StagedFile]]:
    """A bucket's sorted runs, newest first: each level-0 file (by sequence range), then each level."""
    level0 = sorted((f for f in files if f.meta.level == 0),
                    key=lambda f: (f.meta.max_sequence_number, f.meta.min_sequence_number, f.meta.file_name),
                    reverse=True)
    levels = sorted({f.meta.level for f in files if f.meta.level > 0})
    return [[f] for f in level0] + [[f for f in files if f.meta.level == lv] for lv in levels]


def _size(run: list[StagedFile]) -> int:
    return sum(f.file_size for f in run)


def _level(run: list[StagedFile]) -> int:
    return run[0].meta.level


def check_compactable(table) -> None:
    """Refuse primary-key tables lakesink cannot compact, naming the option."""
    from .keyed import MERGE_ENGINES, check_keyed_table
    check_keyed_table(table, None)  # Parquet only; no deletion vectors, no changelog producer
    engine = str(table.table_schema.options.get("merge-engine", "deduplicate")).strip().lower()
    if engine not in MERGE_ENGINES:
        raise UnsupportedTableError(
            f"{table.table_path} has merge-engine={engine}, which lakesink does not compact yet "
            f"(it compacts {' and '.join(MERGE_ENGINES)} tables); compact it with Paimon's own compaction.")
    if not table.options.sequence_field_sort_order_is_ascending():
        raise UnsupportedTableError(
            f"{table.table_path} has sequence.field.sort-order=descending, which lakesink does not "
            "compact yet; compact it with Paimon's own compaction.")
    problem = parquet_layout.nanosecond_layout_problem(TableLayout.of(table).arrow_schema())
    if problem is not None:
        raise UnsupportedTableError(f"{table.table_path}: lakesink cannot compact this table: {problem}.")


def age_order(files: Sequence[StagedFile]) -> list[StagedFile]:
    """Files oldest first: higher levels before lower ones, level 0 last by sequence range."""
    return sorted(files, key=lambda f: (f.meta.level == 0, -f.meta.level, f.meta.max_sequence_number,
                                        f.meta.min_sequence_number, f.meta.file_name))


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

    @property
    def level(self) -> int:
        return self.lsm.max_level if self.output_level is None else self.output_level

    def run(self) -> list[StagedFile]:
        return compact_bucket(self)


def kv_schema(layout: TableLayout, spec: KeyedSpec) -> pa.Schema:
    """The key-value file schema: `_KEY_<k>`..., `_SEQUENCE_NUMBER`, `_VALUE_KIND`, table columns."""
    values = layout.arrow_schema()
    keys = [pa.field(KEY_PREFIX + k, values.field(k).type, nullable=False) for k in spec.trimmed_keys]
    return pa.schema(keys + [pa.field(SEQUENCE, pa.int64(), nullable=False),
                             pa.field(VALUE_KIND, pa.int8(), nullable=False)] + list(values))


def merge(data: pa.Table, spec: KeyedSpec, lsm: LsmOptions, drop_deletes: bool = True) -> pa.Table:
    """The surviving version of every key, sorted by key; retractions dropped with `drop_deletes`
    (output at the bucket's highest non-empty level), else kept to cancel older versions below.

    `data` holds the rows of all files of one bucket with a `_lakesink_file_rank` column (file
    age, oldest lowest); the result has the columns of `data` but that one.
    """
    retract = pc.is_in(data.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))
    if lsm.ignore_delete:
        data = data.filter(pc.invert(retract))
    elif lsm.merge_engine == "first-row" and pc.any(retract).as_py():
        raise UnsupportedTableError(
            "a first-row table holds retractions (-U/-D), which merge-engine=first-row cannot merge; "
            "set ignore-delete=true on the table to ignore them, as Paimon asks.")
    keys = [KEY_PREFIX + k for k in spec.trimmed_keys]
    order = ([(k, "ascending") for k in keys] + [(c, "ascending") for c in spec.sequence_fields]
             + [(SEQUENCE, "ascending"), (_RANK, "ascending")])
    data = data.take(pc.sort_indices(data, sort_keys=order, null_placement="at_start"))
    n = data.num_rows
    if n > 1:
        same = None  # same[i]: row i has the key of row i + 1
        for k in keys:
            column = data.column(k)
            eq = pc.equal(column.slice(0, n - 1), column.slice(1))
            same = eq if same is None else pc.and_(same, eq)
        differs = pc.invert(same)
        if lsm.merge_engine == "first-row":   # the first version of each key
            keep = pa.concat_arrays([pa.array([True])] + differs.chunks)
        elif lsm.merge_engine in ("partial-update", "aggregation"):
            data = _merge_versions(data, spec, differs, keys)
            keep = None
        else:                                   # deduplicate: the last
            keep = pa.concat_arrays(differs.chunks + [pa.array([True])])
        if keep is not None:
            data = data.filter(keep)
    if drop_deletes:
        data = data.filter(pc.invert(pc.is_in(data.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))))
    return data.drop_columns([_RANK])


def _merge_versions(data: pa.Table, spec: KeyedSpec, differs: pa.ChunkedArray, keys: list) -> pa.Table:
    """partial-update / aggregation: a key's only version kept as it is (Paimon's reducer), the
    versions of a key with several merged into one +I row (the last version's key and sequence
    number), in order; `data` is sorted by key and version. Sorted by key on return."""
    last = pa.concat_arrays(differs.chunks + [pa.array([True])])
    first = pa.concat_arrays([pa.array([True])] + differs.chunks)
    single = pc.and_(first, last)
    if pc.all(single).as_py():
        return data
    singles = data.filter(single)
    several = data.filter(pc.invert(single))
    ends = pc.indices_nonzero(pc.filter(last, pc.invert(single))).to_pylist()
    values = [c for c in several.column_names
              if c not in keys and c not in (SEQUENCE, VALUE_KIND, _RANK) and c not in spec.primary_keys]
    kinds = several.column(VALUE_KIND).to_pylist()
    columns = {c: several.column(c).to_pylist() for c in values}
    merged = {c: [] for c in values}
    start = 0
    for end in ends:
        retracts = [kinds[i] in RETRACT_KINDS for i in range(start, end + 1)]
        for c in values:
            merged[c].append(merge_field(spec, c, columns[c][start:end + 1], retracts))
        start = end + 1
    picked = several.take(pa.array(ends, pa.int64()))
    for c in values:
        picked = picked.set_column(picked.schema.get_field_index(c), picked.schema.field(c),
                                   pa.array(merged[c], picked.schema.field(c).type))
    picked = picked.set_column(picked.schema.get_field_index(VALUE_KIND), picked.schema.field(VALUE_KIND),
                               pa.array([0] * picked.num_rows, pa.int8()))
    out = pa.concat_tables([singles, picked])
    return out.take(pc.sort_indices(out, sort_keys=[(k, "ascending") for k in keys]))


def merge_run(rows: pa.Table, spec: KeyedSpec, lsm: LsmOptions, drop_deletes: bool = False) -> pa.Table:
    """`merge` of the rows of one sorted run in the making (a writer's buffer): one file rank."""
    return merge(rows.append_column(_RANK, pa.repeat(pa.scalar(0, pa.int32()), rows.num_rows)), spec, lsm,
                 drop_deletes)


def merge_field(spec: KeyedSpec, column: str, versions: list, retracts: list):
    """One value column over a key's versions, oldest first: Paimon's partial-update (last non-null)
    or the column's aggregate function (Java's FieldAggregator agg/retract)."""
    if spec.merge_engine == "partial-update":
        if any(retracts):
            raise UnsupportedTableError(
                "a partial-update table holds a retraction (-U/-D) of a key with several versions; "
                "merge-engine=partial-update cannot merge it (Paimon refuses it too).")
        out = None
        for v in versions:
            if v is not None:
                out = v
        return out
    function = spec.aggregate_of(column)
    delimiter = dict(spec.delimiters).get(column, ",")
    acc, started = None, False
    for v, retract in zip(versions, retracts):
        if retract:
            if function == "sum":
                acc = acc if v is None else (-v if acc is None else acc - v)
            elif function == "last_value":
                acc = None
            elif function == "last_non_null_value":
                acc = acc if v is None else None
            else:
                raise UnsupportedTableError(
                    f"the aggregate function {function} of column {column} cannot retract a -U/-D row "
                    "(as in Paimon); set ignore-delete=true on the table to drop retractions.")
            continue
        if function == "sum":
            acc = v if acc is None else (acc if v is None else acc + v)
        elif function == "min":
            acc = v if acc is None else (acc if v is None else min(acc, v))
        elif function == "max":
            acc = v if acc is None else (acc if v is None else max(acc, v))
        elif function == "last_value":
            acc = v
        elif function == "last_non_null_value":
            acc = acc if v is None else v
        elif function == "first_value":
            acc, started = (v, True) if not started else (acc, True)
        elif function == "first_non_null_value":
            acc = v if acc is None else acc
        elif function == "bool_and":
            acc = v if acc is None else (acc if v is None else (acc and v))
        elif function == "bool_or":
            acc = v if acc is None else (acc if v is None else (acc or v))
        elif function == "listagg":  # null and blank values skipped, as Paimon
            if v is not None and v.strip():
                acc = v if acc is None else acc + delimiter + v
        else:
            raise UnsupportedTableError(f"lakesink does not merge the aggregate function {function}.")
    return acc


def read_bucket(task: KeyedCompactTask, schema: pa.Schema) -> pa.Table:
    """Every row of the bucket's files, cast to `schema`, with each file's age rank."""
    return _read_files(task, task.inputs, schema)


def _read_files(task: KeyedCompactTask, paths, schema: pa.Schema, first_rank: int = 0,
                levels=None, keys: pa.Table | None = None) -> pa.Table:
    """The rows of `paths` as `schema` with each file's age rank (and level, given `levels`);
    only rows whose key is among `keys`, given them."""
    file_io = storage.file_io(task.output_dir, task.fs_options)
    extra = [pa.field(_RANK, pa.int32())] + ([pa.field(_LEVEL, pa.int32())] if levels is not None else [])
    parts = []
    for i, path in enumerate(paths):
        with file_io.new_input_stream(path) as source:
            part = pq.ParquetFile(source).read(columns=schema.names)
        part = part.select(schema.names)
        if not part.schema.equals(schema, check_metadata=False):
            part = part.cast(schema)
        if keys is not None:
            part = part.join(keys, keys.column_names, join_type="left semi").select(schema.names).cast(schema)
        part = part.append_column(_RANK, pa.array([first_rank + i] * part.num_rows, pa.int32()))
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
    """The merged run and its changelog (see `paimon.lsm_changelog` for what before and after are)."""
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
             unit: CompactUnit | None = None, in_place: InPlace | None = None) -> KeyedCompactTask:
    """The task compacting `unit` (default: fully compacting `files`, every live file of one bucket);
    its outputs written in place given `in_place`."""
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
                            unit.output_level, unit.drop_deletes, tuple(f.meta.level for f in ordered),
                            changelog, tuple(path_of(f) for f in lookup), tuple(f.meta.level for f in lookup),
                            in_place)
