"""What a Spark task of the Spark-native path does for a primary-key or fixed-bucket table.

A Python data source cannot repartition its input: every task gets some rows, any keys,
any buckets. So each task routes, sorts and merges its own rows, as Paimon's writer does
with its write buffer, and writes level-0 key-value files (docs/keyed.md, "format("paimon")"):

    Arrow batches ─ null keys and row kinds checked (rowkind.field), ignore-delete applied
                  ─ bucket = Paimon's bucket function of the bucket key (paimon.files.keyhash)
                  ─ buffered up to `write-buffer-size`, then flushed:
                      per (partition, bucket): sort by (key, sequence.field, input order) and
                      merge each key's versions (paimon.keyed.merge_engines.merge: the last version, the first,
                      or partial-update / aggregation as Paimon's write buffer merges them)
                  ─ one key-value file per (partition, bucket) and flush: a sorted run at level 0
                    (+ with changelog-producer=input one changelog file of the flush's input rows)

Sequence numbers: every row of one flush's file has the same number,

    base(partition, bucket) + (Spark partition id << SEQUENCE_SHIFT) + flush number

`base` is the bucket's next free number, planned on one snapshot by the driver. A key occurs
once per file, so only files need distinct numbers: files of one task grow with their flush,
files of a higher-numbered input partition lie above, and every file lies above what the
bucket held. Paimon's readers and compaction merge a key's versions by (`sequence.field`,
sequence number): the later flush wins, then the higher partition. A write advances a bucket
by at most (highest writing partition + 1) << SEQUENCE_SHIFT: int64 lasts ~2^39 partition-writes.
Fixed-bucket append tables keep plain Parquet files, rows in input order.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import storage
from ..errors import ConfigurationError, NullValueError
from ..paimon.commit import intents
from ..paimon.table import parquet_layout
from ..paimon.files.datafiles import StagedFile, TableLayout, describe_parquet, with_encoding
from ..paimon.keyed.layout import (KEY_PREFIX, RETRACT_KINDS, ROW_KINDS, SEQUENCE, VALUE_KIND, KeyedSpec, kv_schema,
                                   row_kind_refusal, with_key_value_meta)
from ..paimon.keyed.rules import POSTPONE_BUCKET
from ..paimon.keyed.lsm_policy import LsmOptions
from ..paimon.keyed.postpone import file_name as postpone_file_name
from ..paimon.keyed.merge_engines import merge_run
from .arrow import conform, distinct_values, split_by_partition
from ..paimon.files.keyhash import bucket_ids, key_hashes
from .tasks import ROW_GROUP_ROWS, check_job_alive, check_not_null

SEQUENCE_SHIFT = 24          # flushes per task and write: up to 2^24
DEFAULT_BUFFER_BYTES = 64 * 1024 * 1024
_BUCKET, _ORDER, _KIND = "__lakesink_bucket", "__lakesink_order", "__lakesink_kind"


@dataclass(frozen=True)
class KeyedPlan:
    """Where a write's sequence numbers start, planned on one snapshot (picklable)."""

    bases: dict                   # {(partition tuple, bucket): first free sequence number}
    check_from: int | None        # the snapshot they were planned on (the commit checks from there)
    # Streams: the highest batch id committed or pending when the batch was planned; its commit
    # finds the same, or the plan is older than the previous batch (PaimonStreamWriter.commit).
    accounted: int | None = None
    uniform_buckets: int | None = None  # every file of that snapshot had this bucket count
    # Dynamic-bucket tables: the assignment (paimon.keyed.dynamic) over the `check_from` snapshot's
    # index; `exact`: one task sees every row (its assigners count keys as Paimon's do), else every
    # task assigns alike without seeing the others' rows (PlannedAssignment).
    dynamic: object = None
    exact: bool = False

    def base(self, partition: tuple, bucket: int) -> int:
        return self.bases.get((tuple(partition), bucket), 0)


@dataclass(frozen=True)
class KeyedTaskSpec:
    """Everything a keyed task needs; pickled into every task by Spark."""

    staging_dir: str
    layout: TableLayout
    keyed: KeyedSpec
    plan: KeyedPlan | None        # None until planned (streams: per micro-batch)
    compression: str = "snappy"
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    fs_options: dict | None = None
    create_dir: bool = True       # batch jobs: the driver made the staging directory (see TaskSpec)
    paths: object = None          # in place: the table's path factory (see TaskSpec)
    order_column: str | None = None  # a column holding each row's input order (else: as it comes)
    writer_user: str | None = None   # postpone-bucket tables: the commit user its file names carry


@dataclass
class KeyedTaskWriter:
    """One task's rows → level-0 key-value files (or fixed-bucket append files) in staging."""

    spec: KeyedTaskSpec
    partition_id: int
    prefix: str
    _buffer: list = field(default_factory=list)
    _buffered_bytes: int = 0
    _order: int = 0               # input rows seen: each row's position in the task's input
    _flushes: int = 0
    _paths: list = field(default_factory=list)
    _files: list = field(default_factory=list)
    _names: dict = field(default_factory=dict)  # in place: (partition, bucket, kind) -> this flush's names

    def __post_init__(self):
        self.keyed = self.spec.keyed
        self.schema = self.spec.layout.arrow_schema()
        self.file_io = storage.file_io(self.spec.staging_dir, self.spec.fs_options)
        self.lsm = LsmOptions(trigger=0, num_levels=0, target_size=0, write_only=False,
                              ignore_delete=self.keyed.ignore_delete, merge_engine=self.keyed.merge_engine,
                              compression=self.spec.compression)
        # Per task, not per file: a flush writes a file per bucket.
        self.kv_schema = kv_schema(self.spec.layout, self.keyed) if self.keyed.has_primary_key else None
        self._parquet_options: dict = {}
        self.intent = (intents.Intent(self.file_io, self.spec.staging_dir, self.prefix)
                       if self.spec.paths is not None else None)
        if self.spec.create_dir and (self.intent is None or storage.is_local(self.spec.staging_dir)):
            self.file_io.check_or_mkdirs(self.spec.staging_dir)  # object stores need no directories

    # -- input ---------------------------------------------------------------------------
    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        data = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if data.num_rows == 0:
            return
        keyed = self.keyed
        # Every input row, retractions too: primary keys, then the table's other NOT NULL columns.
        check_not_null(data, [*keyed.primary_keys, *self.spec.layout.not_null], keyed.primary_keys)
        if self.spec.order_column is not None:
            order = data.column(self.spec.order_column)
            data = data.drop_columns([self.spec.order_column])
        else:
            order = pa.array(np.arange(self._order, self._order + data.num_rows, dtype=np.int64))
            self._order += data.num_rows
        # Kinds before conform: rowkind.field may name a column the table does not store.
        kinds = self._kinds(data) if keyed.has_primary_key else None
        data = conform(data, self.schema).append_column(_ORDER, order)
        if keyed.has_primary_key:
            data = data.append_column(_KIND, kinds)
            if keyed.rowkind_field:
                retract = pc.is_in(kinds, pa.array(RETRACT_KINDS, pa.int8()))
                if keyed.ignore_delete:
                    data = data.filter(pc.invert(retract))  # as Paimon's writer: never seen
                elif not keyed.retractable and pc.any(retract).as_py():
                    raise ConfigurationError(keyed.retraction_refusal())
            if data.num_rows == 0:
                return
        if keyed.postpone:  # bucket=-2: no bucket yet (lakesink.compact assigns them)
            buckets = np.full(data.num_rows, POSTPONE_BUCKET, np.int32)
        elif keyed.cross_partition:  # rows routed by where their key lives (may add -D rows, drop rows)
            data, buckets = self._cross_partition(data)
            if data.num_rows == 0:
                return
        elif keyed.dynamic is not None:
            buckets = self._dynamic_buckets(data)
        else:
            buckets = bucket_ids(data, list(keyed.bucket_keys), self.spec.layout.fields, keyed.num_buckets)
        data = data.append_column(_BUCKET, pa.array(buckets, pa.int32()))
        self._buffer.append(data)
        self._buffered_bytes += data.nbytes
        if self._buffered_bytes >= self.spec.buffer_bytes:
            self._flush()

    def _dynamic_buckets(self, data: pa.Table) -> np.ndarray:
        """Each row's bucket in a dynamic-bucket table: from the hash index, or assigned."""
        from ..paimon.keyed.dynamic import Assigners, PlannedAssignment
        if getattr(self, "_assignment", None) is None:
            plan = self.spec.plan
            self._assignment = (Assigners if plan.exact else PlannedAssignment)(plan.dynamic)
        hashes = key_hashes(data, list(self.keyed.trimmed_keys), self.spec.layout.fields)
        keys = list(self.spec.layout.partition_keys)
        partitions = (list(zip(*[data.column(k).to_pylist() for k in keys])) if keys
                      else [()] * data.num_rows)
        return self._assignment.assign(partitions, hashes)

    def _cross_partition(self, data: pa.Table) -> tuple[pa.Table, np.ndarray]:
        """A cross-partition table's rows as written, and their buckets: Paimon's global index
        assigner over the planned snapshot's keys, in this task's arrival order."""
        from ..paimon.keyed.cross_partition import TaskAssigner
        if getattr(self, "_assignment", None) is None:
            self._assignment = TaskAssigner(self.spec.plan.dynamic, self.keyed, self.schema)
        return self._assignment.route(data, _KIND)

    def _kinds(self, data: pa.Table) -> pa.Array:
        """`_VALUE_KIND` of each row: +I, or the code of its `rowkind.field` text."""
        field_name = self.keyed.rowkind_field
        if field_name is None:
            return pa.array(np.zeros(data.num_rows, np.int8))
        texts = data.column(field_name)
        if not pa.types.is_string(texts.type):
            texts = texts.cast(pa.string())
        index = pc.index_in(texts, value_set=pa.array(list(ROW_KINDS)))
        if index.null_count:
            bad = pc.filter(texts, pc.is_null(index)).to_pylist()[0]
            raise ConfigurationError(row_kind_refusal(field_name, bad))
        codes = np.array(list(ROW_KINDS.values()), np.int8)
        return pa.array(codes[index.to_numpy(zero_copy_only=False)])

    # -- flush: one sorted run per (partition, bucket) -------------------------------------
    def _flush(self) -> None:
        if not self._buffer:
            return
        data = pa.concat_tables(self._buffer)
        self._buffer, self._buffered_bytes = [], 0
        flush = self._flushes
        self._flushes += 1
        if flush >= 1 << SEQUENCE_SHIFT:
            raise ConfigurationError(f"a task flushed its write buffer more than 2^{SEQUENCE_SHIFT} times in one "
                                     "write; raise write-buffer-size or repartition the input.")
        partition_keys = list(self.spec.layout.partition_keys)
        groups = None if self.keyed.has_primary_key else list(_groups(data, partition_keys))
        if self.intent is not None:  # the flush's files named before any is written: one PUT per flush
            pairs = [pb for pb, _ in groups] if groups is not None else _group_keys(data, partition_keys)
            self._names = {(p, b, kind): self._file_name(kind, flush) for p, b in pairs
                           for kind in self._kinds_written()}
            self.intent.declare(intents.data_file_path(self.spec.paths, p, b, name)
                                for (p, b, _), name in self._names.items())
        if not self.spec.create_dir:
            check_job_alive(self.file_io, self.spec.staging_dir, written=self._intent_paths())
        if groups is None:
            for partition, rows in split_by_partition(data, partition_keys):
                self._write_runs(rows, partition, flush)
            return
        for (partition, bucket), rows in groups:
            rows = rows.take(pc.sort_indices(rows, [(_ORDER, "ascending")])).select(self.schema.names)
            self._write_file(rows, self.schema, partition, bucket, flush, "data")

    def _kinds_written(self) -> tuple[str, ...]:
        if self.keyed.has_primary_key and self.keyed.changelog_producer == "input":
            return ("data", "changelog")
        return ("data",)

    def _file_name(self, kind: str, flush: int) -> str:
        if self.keyed.postpone:  # one writer per task, as Paimon's postpone writer names its files
            if not hasattr(self, "_writer_token"):
                self._writer_token = str(uuid.uuid4())
            return postpone_file_name(self.spec.writer_user, self.partition_id, flush, self._writer_token)
        # Named so that name order is write order (partition id, flush): readers that read a
        # snapshot's files of one bucket in name order (the changelog) see the later ones last.
        return f"{kind}-{self.partition_id:08x}-{flush:06x}-{uuid.uuid4().hex[:20]}-0.parquet"

    def _intent_paths(self) -> list[str]:
        return [self.intent.path] if self.intent is not None else []

    def _write_runs(self, rows: pa.Table, partition: tuple, flush: int) -> None:
        """One partition's rows of a flush → a sorted run per bucket. The rows merge once, all
        buckets together (a key lies in one bucket), then split by bucket: a merge per bucket
        cost as much again in per-call overhead on a micro-batch's few rows per bucket."""
        keyed = self.keyed
        schema = self.kv_schema
        # Input order is each version's sequence number while merging; the files get the flush's.
        columns = {KEY_PREFIX + k: rows.column(k) for k in keyed.trimmed_keys}
        columns[SEQUENCE] = rows.column(_ORDER)
        columns[VALUE_KIND] = rows.column(_KIND)
        columns.update({name: rows.column(name) for name in self.schema.names})
        kv = pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema)
        kv = kv.append_column(_BUCKET, rows.column(_BUCKET))
        merged = merge_run(kv, keyed, self.lsm, key_determined=(_BUCKET,))
        changes = None
        if keyed.changelog_producer == "input":  # every input row as it came, sorted by key then order
            order = ([(KEY_PREFIX + k, "ascending") for k in keyed.trimmed_keys]
                     + [(c, "ascending") for c in keyed.sequence_fields] + [(SEQUENCE, "ascending")])
            changes = dict(_by_bucket(kv.take(pc.sort_indices(kv, sort_keys=order, null_placement="at_start"))))
        for bucket, run in _by_bucket(merged):
            sequence = self.spec.plan.base(partition, bucket) + (self.partition_id << SEQUENCE_SHIFT) + flush
            self._write_file(_with_sequence(run.select(schema.names), sequence), schema, partition, bucket,
                             flush, "data")
            if changes is not None:
                self._write_file(_with_sequence(changes[bucket].select(schema.names), sequence), schema, partition,
                                 bucket, flush, "changelog")

    def _write_file(self, rows: pa.Table, schema: pa.Schema, partition: tuple, bucket: int, flush: int,
                    kind: str) -> None:
        if self.intent is not None:
            name = self._names[(partition, bucket, kind)]
            path = intents.data_file_path(self.spec.paths, partition, bucket, name)
            stream = storage.new_output(self.file_io, path)
        else:
            name = self._file_name(kind, flush)
            path = f"{self.spec.staging_dir}/{self.prefix}-{uuid.uuid4().hex}.parquet"
            stream = self.file_io.new_output_stream(path)
        self._paths.append(path)
        try:
            if schema not in self._parquet_options:
                self._parquet_options[schema] = parquet_layout.writer_options(schema)
            writer = pq.ParquetWriter(stream, schema, compression=self.spec.compression,
                                      **self._parquet_options[schema])
            try:
                writer.write_table(rows, row_group_size=ROW_GROUP_ROWS)
            finally:
                writer.close()
            size = stream.tell()
        finally:
            stream.close()
        if not self.spec.create_dir:  # a batch job aborted meanwhile: what this task wrote goes
            check_job_alive(self.file_io, self.spec.staging_dir, written=self._paths + self._intent_paths())
        metadata = getattr(getattr(writer, "writer", None), "metadata", None)  # the footer written
        if metadata is None:
            with self.file_io.new_input_stream(path) as source:
                metadata = pq.read_metadata(source)
        staged = describe_parquet(path, self.spec.layout, self.file_io, partition=partition, metadata=metadata,
                                  file_size=size)
        staged.bucket = bucket
        staged.changelog = kind == "changelog"
        staged.meta = dataclasses.replace(staged.meta, file_name=name)
        if self.intent is not None:
            staged.staged_path = None  # already at its table path
        if self.keyed.has_primary_key:
            staged = _key_value_meta(staged, rows, self.spec.layout, self.keyed, metadata)
        self._files.append(with_encoding(staged, self.spec.layout))

    # -- end -----------------------------------------------------------------------------
    def finish(self) -> list[StagedFile]:
        self._flush()
        return list(self._files)

    def abort(self) -> None:
        for path in self._paths + self._intent_paths():
            self.file_io.delete_quietly(path)


def _groups(data: pa.Table, partition_keys: list[str]):
    """(partition tuple, bucket) → that group's rows (input order kept), for one flush."""
    for values, rows in split_by_partition(data, [*partition_keys, _BUCKET]):
        yield (values[:-1], values[-1]), rows


def _group_keys(data: pa.Table, partition_keys: list[str]) -> list[tuple]:
    """The (partition tuple, bucket) pairs one flush writes."""
    return [(values[:-1], values[-1]) for values in distinct_values(data, [*partition_keys, _BUCKET])]


def _by_bucket(rows: pa.Table):
    """(bucket, its rows in their order) of rows carrying a bucket column."""
    buckets = rows.column(_BUCKET)
    order = pc.sort_indices(buckets)  # stable: each bucket's rows keep their (key) order
    ordered = buckets.take(order).to_numpy()
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else []
    ends = list(starts[1:]) + [len(ordered)]
    for start, end in zip(starts, ends):
        yield int(ordered[start]), rows.take(order.slice(start, end - start))


def _with_sequence(rows: pa.Table, sequence: int) -> pa.Table:
    index = rows.schema.get_field_index(SEQUENCE)
    return rows.set_column(index, rows.schema.field(index), pa.array(np.full(rows.num_rows, sequence, np.int64)))


def _key_value_meta(staged: StagedFile, rows: pa.Table, layout: TableLayout, spec: KeyedSpec,
                    metadata) -> StagedFile:
    """What a key-value file's metadata holds besides a plain file's, from the rows written
    (as `paimon.keyed.layout.describe_keyed` reads it back from a file Spark wrote)."""
    keys = [KEY_PREFIX + k for k in spec.trimmed_keys]
    first = [rows.column(k)[0].as_py() for k in keys]
    last = [rows.column(k)[rows.num_rows - 1].as_py() for k in keys]
    float_keys = {}
    for k in spec.trimmed_keys:
        column = rows.column(KEY_PREFIX + k)
        if pa.types.is_floating(column.type):
            low_high = pc.min_max(column)
            float_keys[k] = (low_high["min"].as_py(), low_high["max"].as_py(), column.null_count)
    deletes = (int(pc.sum(pc.is_in(rows.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))).as_py() or 0)
               if spec.rowkind_field else 0)
    return with_key_value_meta(staged, metadata, layout, spec, first, last, float_keys, deletes)


def dynamic_plan(target, keyed: KeyedSpec, check_from: int | None, assigners: int | None = None):
    """The bucket assignment of a write into a dynamic-bucket table planned on `check_from`
    (None for other tables). Assigners: `dynamic-bucket.assigner-parallelism` (capped by
    `initial-buckets`), else `assigners`, else this host's cores."""
    if keyed.dynamic is None:
        return None
    import os
    from ..paimon.keyed import dynamic
    return dynamic.plan(target, keyed, check_from, assigners or os.cpu_count() or 2)


def check_keyed_layout(layout: TableLayout, keyed: KeyedSpec, writer: str = "format('paimon')") -> None:
    """Refuse, before any task runs, what tasks could not write: bucket-key types the bucket
    function cannot serialize (as the fast path refuses them) and nanosecond columns."""
    from ..errors import UnsupportedTableError
    from .bucket import key_type
    fields = {f.name: f for f in layout.fields}
    for name in keyed.bucket_keys:
        key_type(fields[name].type)
    problem = parquet_layout.nanosecond_layout_problem(layout.arrow_schema())
    if problem is not None:
        raise UnsupportedTableError(f"{writer} cannot write this table: {problem}.")


def buffer_bytes(target, options) -> int:
    """`write-buffer-size` of the table (or of the write that creates it)."""
    from .. import options as registry
    table = target.table()
    raw = dict(table.table_schema.options) if table is not None else dict(options.table_options)
    return registry.table_value(raw, "write-buffer-size")


# -- lakesink.stream: a small micro-batch written by one task, no shuffle ---------------------

_RESULT = pa.schema([("files", pa.binary())])
_TASK_ERROR = re.compile(r"(?:lakesink\.errors\.)?(ConfigurationError|NullValueError): ([^\n]*)")
INPUT_ORDER = "__lakesink_input_order"


def write_in_one_task(df, spec: KeyedTaskSpec) -> list[StagedFile]:
    """One task reads every partition of `df` and routes, sorts and merges its rows into
    key-value files in `spec.staging_dir`, as Paimon's writer does with its write buffer: no
    shuffle, no second stage, one sorted run per bucket (per flush), as a shuffle would give.

    Rows of one key merge in input order, which is (input partition, position) as on the
    shuffled path: taken below the coalesce, where each row still knows its partition, since a
    coalesce may read partitions out of order. A task's refusal (a null key, an unknown row
    kind) comes back as its ConfigurationError."""
    import pickle

    spec = dataclasses.replace(spec, order_column=INPUT_ORDER)

    def task(batches):
        from .tasks import task_prefix
        writer = KeyedTaskWriter(spec, 0, task_prefix())
        try:
            for batch in batches:
                writer.write(batch)
            files = writer.finish()
        except BaseException:
            writer.abort()
            raise
        # In flight only, from the task to its driver, as Spark's own task results travel.
        yield pa.RecordBatch.from_pydict({"files": [pickle.dumps(files)]}, schema=_RESULT)

    ordered = df.selectExpr("*", f"monotonically_increasing_id() AS {INPUT_ORDER}").coalesce(1)
    try:
        rows = ordered.mapInArrow(task, "files binary").collect()
    except Exception as exc:  # noqa: BLE001 - Spark wraps the task's error in its own
        refusal = _TASK_ERROR.search(str(exc))
        if refusal is None:
            raise
        if refusal.group(1) == "NullValueError":
            raise NullValueError.from_text(refusal.group(2)) or NullValueError(refusal.group(2)) from None
        raise ConfigurationError(refusal.group(2)) from None
    return [f for row in rows for f in pickle.loads(row["files"])]
