"""Cross-partition primary-key tables: `bucket=-1` and a primary key without every partition
column (Paimon's CROSS_PARTITION mode). A key lives in one (partition, bucket) of the whole
table; a row of a key that lives in another partition is handled by the merge engine
(Paimon's `GlobalIndexAssigner` and its `ExistingProcessor`s):

    deduplicate      the key moves: a -D of it goes to its old (partition, bucket), the row to a
                     bucket of its new partition
    partial-update,  the row goes to the old (partition, bucket), its partition values replaced
    aggregation      by the old ones, and merges there
    first-row        the row is ignored (the key's first row stays where it is)

A new key gets a bucket of its partition by dynamic assignment (`BucketCounts`, Paimon's
cross-partition `BucketAssigner`: the lowest bucket of the assigner with fewer than
`dynamic-bucket.target-row-num` keys, else its lowest unused one). Rows are taken in arrival
order, so a key with rows in several partitions of one write ends where Paimon's processing
puts it: deduplicate in the partition of its last row, the others in its old partition or, for a
new key, in the partition of its first row.

The index is not stored: Paimon writes no HASH index files for this mode and bootstraps the
index from the table's keys at job start (`IndexBootstrap`); lakesink reads the keys of the
snapshot a write is planned on (`bucket_groups`, `live_keys`: each bucket's files merged,
a deduplicate key whose last version is a retraction is gone). Every write plans on one snapshot,
and any other writer committing to the table meanwhile is a conflict (`dynamic.partition_conflict`
over every partition), never a key in two partitions.

Here: the engine-neutral pieces and the assignment of one process that sees every row of its
keys (`TaskAssigner`: a one-task stream micro-batch, a `format("paimon")` task). The Spark job
of `lakesink.write` distributes the same rules (spark.cross_partition).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .layout import RETRACT_KINDS, SEQUENCE, VALUE_KIND, KeyedSpec

DELETE_KIND = 3
# What a row of a key living in another partition does, per merge engine (Paimon's processors).
MOVE, USE_OLD, SKIP_NEW = "move", "use-old", "skip-new"
_ACTIONS = {"deduplicate": MOVE, "partial-update": USE_OLD, "aggregation": USE_OLD, "first-row": SKIP_NEW}


def existing_action(spec: KeyedSpec) -> str:
    return _ACTIONS[spec.merge_engine]


def assigner_count(options, default: int) -> int:
    """Assigners of a cross-partition write, Paimon's rule: the larger of
    `dynamic-bucket.initial-buckets` and `dynamic-bucket.assigner-parallelism`, else the write's
    parallelism (`dynamic-bucket.max-buckets` is not applied, as in Paimon's cross-partition
    assigner)."""
    given = [n for n in (options.initial_buckets, options.assigners) if n]
    return max(1, max(given) if given else default)


# -- the table's keys at the planned snapshot ----------------------------------------------

@dataclass(frozen=True)
class BucketGroup:
    """The data files of one (partition, bucket), oldest first (picklable)."""

    partition: tuple
    bucket: int
    paths: tuple
    # Deletion-vector tables: per path, where its vector lies (`Vectors.deletions`), or None.
    deletions: tuple = ()


def bucket_groups(table, snapshot) -> list[BucketGroup]:
    """Every (partition, bucket) of `snapshot` with its live data files, oldest first (as
    compaction orders them: higher levels first, level 0 by sequence range). In a table with
    deletion vectors, the files its readers read (level >= 1) and their vectors: a key Paimon's
    readers do not see (deleted, or moved away, its row marked) is not in the index either."""
    from ..commit.live_files import live_entries
    from ..files import deletion_vectors
    from ..files.datafiles import canonical_data_file_path

    if snapshot is None:
        return []
    vectors = (deletion_vectors.Vectors(table, snapshot).deletions()
               if deletion_vectors.enabled(table) else None)
    grouped: dict[tuple, list] = {}
    for entry in live_entries(table, snapshot):
        if vectors is not None and entry.file.level == 0:
            continue  # unread in a deletion-vector table (lakesink's commits leave none)
        grouped.setdefault((tuple(entry.partition.values), entry.bucket), []).append(entry)
    out = []
    for (partition, bucket), entries in sorted(grouped.items(), key=lambda item: repr(item[0])):
        entries.sort(key=lambda e: (e.file.level == 0, -e.file.level, e.file.max_sequence_number,
                                    e.file.min_sequence_number, e.file.file_name))
        paths = tuple(e.file.external_path or canonical_data_file_path(table, partition, bucket, e.file.file_name)
                      for e in entries)
        deletions = tuple(vectors.get(e.file.file_name) for e in entries) if vectors else ()
        out.append(BucketGroup(partition, bucket, paths, deletions))
    return out


def key_columns(spec: KeyedSpec) -> list[str]:
    """The columns an index entry holds: the whole primary key (Paimon's global key), then the
    partition columns it does not hold."""
    return [*spec.primary_keys, *[k for k in spec.partition_keys if k not in spec.primary_keys]]


def live_keys(file_io, paths, spec: KeyedSpec, schema: pa.Schema, deletions=()) -> pa.Table:
    """The keys one bucket's files (`paths`, oldest first) hold at their snapshot, with their
    partition columns (`key_columns`, typed as `schema`): deduplicate keys whose last version is
    a retraction are gone; the other engines keep a key once written (lakesink refuses the options
    that would remove one); rows a file's deletion vector marks (`deletions`, per path) are not
    read. The key and partition columns are read from the files' value columns, where every row
    carries them."""
    from ..files import deletion_vectors

    columns = key_columns(spec)
    target = pa.schema([schema.field(c) for c in columns])
    parts = []
    for rank, path in enumerate(paths):
        with file_io.new_input_stream(path) as source:
            part = pq.ParquetFile(source).read(columns=[*columns, SEQUENCE, VALUE_KIND])
        if deletions and deletions[rank] is not None:  # positions in the file: before any filter
            part = deletion_vectors.drop_marked(part, deletion_vectors.read_vector(file_io, deletions[rank]))
        part = part.select([*columns, SEQUENCE, VALUE_KIND])
        keys = part.select(columns)
        if not keys.schema.equals(target, check_metadata=False):
            keys = keys.cast(target)
        parts.append(keys.append_column(SEQUENCE, part.column(SEQUENCE))
                     .append_column(VALUE_KIND, part.column(VALUE_KIND))
                     .append_column("_rank", pa.array(np.full(part.num_rows, rank, np.int32))))
    if not parts:
        return target.empty_table()
    data = pa.concat_tables(parts)
    keys = spec.primary_keys
    order = [(k, "ascending") for k in keys] + [(SEQUENCE, "ascending"), ("_rank", "ascending")]
    data = data.take(pc.sort_indices(data, sort_keys=order))
    n = data.num_rows
    if n > 1:
        same = None  # row i has the key of row i + 1
        for k in keys:
            column = data.column(k)
            eq = pc.equal(column.slice(0, n - 1), column.slice(1))
            same = eq if same is None else pc.and_(same, eq)
        last = pa.concat_arrays(pc.invert(same).chunks + [pa.array([True])])
        data = data.filter(last)
    if spec.merge_engine == "deduplicate":
        data = data.filter(pc.invert(pc.is_in(data.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))))
    return data.select(columns)


# -- bucket assignment within a partition --------------------------------------------------

class BucketCounts:
    """Paimon's cross-partition `BucketAssigner`: keys per (partition, bucket) as one assigner
    knows them, and the bucket a new key of a partition gets."""

    def __init__(self, target_rows: int, assigners: int = 1, assigner: int = 0):
        self.target = target_rows
        self.assigners, self.assigner = assigners, assigner
        self._counts: dict[tuple, dict[int, int]] = {}

    def add(self, partition: tuple, bucket: int, count: int = 1) -> None:
        buckets = self._counts.setdefault(partition, {})
        buckets[bucket] = buckets.get(bucket, 0) + count

    def decrement(self, partition: tuple, bucket: int) -> None:
        buckets = self._counts.setdefault(partition, {})
        buckets[bucket] = max(0, buckets.get(bucket, 0) - 1)

    def assign(self, partition: tuple) -> int:
        buckets = self._counts.setdefault(partition, {})
        for bucket in sorted(buckets):
            if self._owns(bucket) and buckets[bucket] < self.target:
                buckets[bucket] += 1
                return bucket
        bucket = self.assigner
        while bucket in buckets:
            bucket += self.assigners
        buckets[bucket] = 1
        return bucket

    def _owns(self, bucket: int) -> bool:
        return bucket % self.assigners == self.assigner


@dataclass(frozen=True)
class Decision:
    """Where one key's rows of a write go: its `home` (partition, bucket); `keep`: the partition
    whose rows are kept (None: every row, its partition values replaced by home's); `delete`: the
    (partition, bucket) that gets a -D of the key (it moved away from there)."""

    home: tuple
    bucket: int
    keep: tuple | None
    delete: tuple | None = None  # (partition, bucket)


def decide(action: str, old: tuple | None, first: tuple, last: tuple, counts: BucketCounts) -> Decision:
    """The outcome of Paimon's processing of one key's rows in arrival order, given where the key
    lives (`old`: (partition, bucket) or None) and the partitions of its first and last row."""
    if action == MOVE:
        if old is not None and old[0] == last:
            return Decision(last, old[1], last)
        if old is not None:
            counts.decrement(*old)
        return Decision(last, counts.assign(last), last, old)
    if old is not None:
        return Decision(old[0], old[1], None if action == USE_OLD else old[0])
    return Decision(first, counts.assign(first), None if action == USE_OLD else first)


# -- in one process: rows in arrival order -------------------------------------------------

class TaskAssigner:
    """Paimon's `GlobalIndexAssigner` in one process: the planned snapshot's keys (read on first
    use, every bucket), then each row in arrival order: a new key gets a bucket of its partition
    (one assigner owning every bucket), a key of another partition is moved, merged into its old
    partition or ignored (`existing_action`). Exact for the rows this process sees; rows of one key
    in several processes are refused at commit (`keys_in_several_writers`)."""

    def __init__(self, plan, spec: KeyedSpec, schema: pa.Schema):
        self.plan, self.spec, self.schema = plan, spec, schema
        self.action = existing_action(spec)
        self._index: pa.Table | None = None
        self._moved: dict[tuple, tuple] = {}  # keys this process placed: key -> (partition, bucket)
        self._counts = BucketCounts(plan.target_rows)

    def _load(self) -> None:
        from concurrent.futures import ThreadPoolExecutor
        table, snapshot = self.plan.open()
        groups = bucket_groups(table, snapshot) if table is not None else []
        file_io = table.file_io if table is not None else None

        def one(group):
            keys = live_keys(file_io, group.paths, self.spec, self.schema, group.deletions)
            return keys.append_column("_bucket", pa.array(np.full(keys.num_rows, group.bucket, np.int32)))

        with ThreadPoolExecutor(max(1, min(8, len(groups)))) as pool:
            parts = list(pool.map(one, groups))
        columns = key_columns(self.spec)
        empty = pa.schema([*[self.schema.field(c) for c in columns], pa.field("_bucket", pa.int32())]).empty_table()
        self._index = pa.concat_tables(parts) if parts else empty
        # Counted from the keys themselves: partition values compare as the rows' do.
        partition_keys = list(self.spec.partition_keys)
        counts = self._index.group_by([*partition_keys, "_bucket"], use_threads=False).aggregate(
            [("_bucket", "count")])
        for values in counts.to_pylist():
            self._counts.add(tuple(values[k] for k in partition_keys), values["_bucket"], values["_bucket_count"])

    def _lookup(self, data: pa.Table) -> dict[int, tuple]:
        """{row: (partition, bucket)} of the rows whose key the planned snapshot holds."""
        keys = list(self.spec.primary_keys)
        index = self._index.select([*key_columns(self.spec), "_bucket"])
        probe = data.select(keys).append_column("_row", pa.array(np.arange(data.num_rows, dtype=np.int64)))
        found = probe.join(index, keys=keys, join_type="inner", use_threads=False)
        partitions = list(zip(*[found.column(k).to_pylist() for k in self.spec.partition_keys]))
        return {row: (partition, bucket) for row, partition, bucket in
                zip(found.column("_row").to_pylist(), partitions, found.column("_bucket").to_pylist())}

    def route(self, data: pa.Table, kind_column: str) -> tuple[pa.Table, np.ndarray]:
        """`data` (table columns, rows in arrival order) as it is written: rows dropped or given
        their key's old partition, a -D row to the old (partition, bucket) of a key that moves;
        and each output row's bucket."""
        if self._index is None:
            self._load()
        spec = self.spec
        if data.num_rows == 0:
            return data, np.zeros(0, np.int32)
        keys = list(zip(*[data.column(k).to_pylist() for k in spec.primary_keys]))
        partitions = list(zip(*[data.column(k).to_pylist() for k in spec.partition_keys]))
        known = self._lookup(data)
        rows, where, buckets, deletes = [], [], [], []

        def emit(i, partition, bucket, delete=False):
            rows.append(i)
            where.append(partition)
            buckets.append(bucket)
            deletes.append(delete)

        for i, (key, partition) in enumerate(zip(keys, partitions)):
            loc = self._moved.get(key) or known.get(i)
            if loc is None:  # a new key
                bucket = self._counts.assign(partition)
                self._moved[key] = (partition, bucket)
                emit(i, partition, bucket)
            elif loc[0] == partition:
                emit(i, partition, loc[1])
            elif self.action == MOVE:
                emit(i, loc[0], loc[1], delete=True)
                self._counts.decrement(*loc)
                bucket = self._counts.assign(partition)
                self._moved[key] = (partition, bucket)
                emit(i, partition, bucket)
            elif self.action == USE_OLD:
                emit(i, loc[0], loc[1])
            # SKIP_NEW: the key's first row stays; this one is ignored
        out = data.take(pa.array(rows, pa.int64()))
        for j, k in enumerate(spec.partition_keys):
            index = out.schema.get_field_index(k)
            field = out.schema.field(index)
            out = out.set_column(index, field, pa.array([p[j] for p in where], field.type))
        if any(deletes):
            index = out.schema.get_field_index(kind_column)
            field = out.schema.field(index)
            kinds = pc.if_else(pa.array(deletes), pa.scalar(DELETE_KIND, field.type), out.column(kind_column))
            out = out.set_column(index, field, kinds)
        return out, np.array(buckets, np.int32)


def keys_in_several_writers(file_io, paths_by_writer: dict, spec: KeyedSpec, limit: int = 3) -> list[tuple]:
    """Keys whose rows more than one writer (task) wrote into the data files `paths_by_writer`
    ({writer: [path]}), at most `limit`: their tasks assigned them without seeing each other's rows."""
    keys = list(spec.primary_keys)
    parts = []
    for writer, paths in paths_by_writer.items():
        for path in paths:
            with file_io.new_input_stream(path) as source:
                part = pq.ParquetFile(source).read(columns=keys).select(keys)
            parts.append(part.append_column("_writer", pa.array(np.full(part.num_rows, writer, np.int64))))
    if len(paths_by_writer) < 2 or not parts:
        return []
    data = pa.concat_tables(parts, promote_options="permissive")
    writers = data.group_by(keys, use_threads=False).aggregate([("_writer", "count_distinct")])
    shared = writers.filter(pc.greater(writers.column("_writer_count_distinct"), 1))
    return [tuple(row[k] for k in keys) for row in shared.slice(0, limit).to_pylist()]
