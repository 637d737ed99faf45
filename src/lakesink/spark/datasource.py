"""The Spark-native path: `format("paimon")` through PySpark's Python Data Source API.

Spark pickles the writer into its tasks and into a fresh driver-side Python
process for `commit`/`abort` (Spark 4.x), so the writer carries only plain
state: the planned job (`BatchWrite` / `StreamSink`) and what tasks need.
Tasks write Parquet with pyarrow into the job's staging directory and return
the files' metadata; the driver commits them through the same protocol as the
fast path. Primary-key and fixed-bucket tables: each task routes, sorts and
merges its own rows (`spark.keyed_tasks`), on sequence numbers the driver planned
(`KeyedPlan`: per job; for streams per micro-batch, see `PaimonStreamWriter`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from ..errors import ConfigurationError, TableNotFoundError
from .. import options as registry
from ..options import WriteOptions
from ..protocol import crashpoints
from .arrow import spark_to_arrow
from .checkpoint import query_id
from .tasks import StagingWriter, TaskSpec, mark_job_staging, task_prefix

log = logging.getLogger(__name__)

PATH_NAME = "format('paimon')"


@dataclass
class PaimonCommitMessage(WriterCommitMessage):
    files: list = field(default_factory=list)  # StagedFile
    plan: object = None  # keyed tables: the KeyedPlan the task's sequence numbers continue from


def _target_file_size(options: WriteOptions) -> int:
    from pypaimon.common.memory_size import MemorySize
    raw = options.table_options.get("target-file-size")
    return MemorySize.parse(raw).get_bytes() if raw else TaskSpec.target_file_size


def _in_place_paths(target, in_place: bool):
    """The path factory tasks write data files in place with (option write.in-place), or None."""
    if not in_place:
        return None
    from ..paimon.commit.intents import planned_path_factory
    return planned_path_factory(target)


def _files(messages) -> list:
    return [f for m in messages if isinstance(m, PaimonCommitMessage) for f in m.files]


def _write_task(spec: TaskSpec, iterator) -> PaimonCommitMessage:
    writer = StagingWriter(spec, task_prefix())
    try:
        for batch in iterator:
            writer.write(batch)
        return PaimonCommitMessage(writer.finish())
    except BaseException:
        writer.abort()
        raise


def _write_keyed_task(spec, iterator) -> PaimonCommitMessage:
    from pyspark import TaskContext

    from .keyed_tasks import KeyedTaskWriter
    context = TaskContext.get()
    writer = KeyedTaskWriter(spec, context.partitionId() if context is not None else 0, task_prefix())
    try:
        for batch in iterator:
            writer.write(batch)
        return PaimonCommitMessage(writer.finish(), spec.plan)
    except BaseException:
        writer.abort()
        raise


NO_TABLE = (
    "No table: use .save(name_or_path) / .load(name_or_path) / .start(name_or_path), or .option('path', ...). "
    "Spark passes neither the table name nor a location to a Python data source for saveAsTable, "
    "writeStream.toTable or a catalog table (CREATE TABLE ... USING paimon): write "
    "df.write.format('paimon').save('shop.orders') or lakesink.write(df, 'shop.orders'), stream with "
    ".start('shop.orders') or lakesink.stream(...), and run SQL with lakesink.sql(spark, ...) "
    "(docs/catalogs.md) or over CREATE TEMPORARY VIEW v USING paimon OPTIONS (path '...'). In a Spark "
    "Declarative Pipeline (a streaming table or materialized view in format 'paimon'), write through "
    "dp.create_sink(name, format='paimon', options={'path': ...}) and @dp.append_flow(target=name) "
    "(docs/pipelines.md).")


class PaimonDataSource(DataSource):
    """`spark.read/write/readStream/writeStream.format("paimon")` over a Paimon table path or name.

    A name resolves through the catalog options `lakesink.register` baked into the class
    (Spark gives a Python data source no session conf).
    """

    catalog_options: dict | None = None

    @classmethod
    def name(cls) -> str:
        return "paimon"

    def _resolve(self, purpose: str = "read"):
        from ..paimon.catalog.catalog import open_catalog, resolve
        path = self.options.get("path")
        if not path:
            raise ConfigurationError(NO_TABLE)
        catalog = open_catalog(self.catalog_options) if self.catalog_options else None
        return resolve(path, catalog, purpose)

    def _path(self) -> str:
        return self._resolve().path

    def _options(self, resolved) -> dict:
        return resolved.with_fs_options(self.options)

    def schema(self):
        from ..paimon.table.tables import arrow_schema, open_table
        from .reader import read_branch
        resolved = self._resolve()
        branch = read_branch(registry.parse({k: v for k, v in self.options.items() if k.lower() == "branch"},
                                            ("read",)))
        table = open_table(resolved.path, registry.storage_options(self._options(resolved)) or None, branch)
        if table is None:
            raise TableNotFoundError(f"Table {resolved} does not exist.", table=str(resolved))
        schema = arrow_schema(table)
        if registry.parse({k: v for k, v in self.options.items() if k.lower() == "read.readchangelog"},
                          ("stream-read",)).get("read.readChangeLog"):
            from ..paimon.read.changes import ROW_KIND
            import pyarrow as pa
            schema = schema.insert(0, pa.field(ROW_KIND, pa.string(), nullable=False))
        if registry.parse({k: v for k, v in self.options.items() if k.lower() == "read.system-columns"},
                          ("read",)).get("read.system-columns"):
            from .reader import with_system_columns
            schema = with_system_columns(table, schema)
        from .reader import spark_schema
        return spark_schema(table, schema)  # (TIME columns: Spark's TIME where it has one)

    def writer(self, schema, overwrite: bool):
        resolved = self._resolve("write")
        return PaimonBatchWriter(resolved.path, self._options(resolved), schema, overwrite, resolved.entry)

    def streamWriter(self, schema, overwrite: bool):
        resolved = self._resolve("write")
        return PaimonStreamWriter(resolved.path, self._options(resolved), schema, overwrite, resolved.entry)

    def reader(self, schema):
        from .reader import PaimonBatchReader
        resolved = self._resolve()
        return PaimonBatchReader(resolved.path, self._options(resolved), schema)

    def streamReader(self, schema):
        from .stream_reader import PaimonStreamReader
        resolved = self._resolve()
        return PaimonStreamReader(resolved.path, self._options(resolved), schema)


class LakesinkPaimonDataSource(PaimonDataSource):
    """The same data source under a name no other connector takes: `format("lakesink-paimon")`."""

    @classmethod
    def name(cls) -> str:
        return "lakesink-paimon"


class PaimonBatchWriter(DataSourceArrowWriter):
    def __init__(self, path: str, options: dict, schema, overwrite: bool, catalog_entry=None):
        from ..paimon.write.keyed_plan import wants_keyed
        from ..paimon.write.batch import BatchWrite
        opts = WriteOptions.parse(options)
        opts.catalog_entry = catalog_entry  # a new table by name: created (in its catalog) when planned
        mode = "overwrite" if overwrite else "append"
        self.keyed_spec = None  # primary-key and fixed-bucket tables: what keyed tasks need
        if wants_keyed(path, opts):
            self.job, self.keyed_spec = _plan_keyed_job(path, spark_to_arrow(schema), opts, mode)
        else:
            self.job = BatchWrite.plan(path, spark_to_arrow(schema), opts, mode, PATH_NAME)
        self.spec = TaskSpec(self.job.staging_dir, self.job.layout, self.job.compression,
                             _target_file_size(opts), opts.fs_options or None, create_dir=False,
                             paths=_in_place_paths(self.job.target, self.job.in_place))
        self.skip = self.job.already_committed()
        if not self.skip:
            mark_job_staging(self.job.target.file_io, self.job.staging_dir)

    def write(self, iterator):
        if self.skip:
            return PaimonCommitMessage([])
        if self.keyed_spec is not None:
            return _write_keyed_task(self.keyed_spec, iterator)
        return _write_task(self.spec, iterator)

    def commit(self, messages) -> None:
        crashpoints.reached("tasks-done")
        if self.keyed_spec is not None and self.keyed_spec.keyed.cross_partition:
            check_one_task_per_key(self.job.target, self.keyed_spec.keyed, messages)
        self.job.commit(_files(messages))

    def abort(self, messages) -> None:
        self.job.abort(_files(messages or []))


def check_one_task_per_key(target, keyed, messages) -> None:
    """A cross-partition table's rows of one key must reach one task: each task placed its keys
    from the table's keys and its own rows alone, so rows of one key in two tasks could leave it
    in two partitions (or order its versions wrongly). Refused before anything is committed."""
    from ..paimon.commit import intents
    from ..paimon.keyed.cross_partition import keys_in_several_writers
    factory = None
    by_task = {}
    for i, message in enumerate(messages or []):
        if not isinstance(message, PaimonCommitMessage):
            continue
        paths = []
        for f in message.files:
            if f.changelog:
                continue
            if f.staged_path:
                paths.append(f.staged_path)
            else:
                factory = factory or intents.planned_path_factory(target)
                paths.append(intents.data_file_path(factory, f.partition, f.bucket, f.meta.file_name))
        if paths:
            by_task[i] = paths
    shared = keys_in_several_writers(target.file_io, by_task, keyed) if len(by_task) > 1 else []
    if shared:
        key_columns = ", ".join(map(repr, keyed.primary_keys))
        raise ConfigurationError(
            f"format('paimon') into the cross-partition table {target.path}: rows of primary key {shared[0]} "
            f"reached more than one Spark task ({len(shared)}{'+' if len(shared) >= 3 else ''} such keys). Each "
            "task places a key from the table's keys and its own rows only, so the key could land in two "
            f"partitions. Repartition the input by the primary key first (df.repartition({key_columns})), or "
            "write with lakesink.write / lakesink.stream, which route every key through one assigner. "
            "Nothing was committed.", option="primary-key", table=target.path)


def _plan_keyed_job(path: str, schema, opts: WriteOptions, mode: str):
    """(BatchWrite, KeyedTaskSpec) of a batch write into a primary-key or fixed-bucket table: as
    `lakesink.write` plans it (spark.keyed_write), sequence numbers read from the latest snapshot."""
    from ..paimon.write.keyed_plan import compacts_automatically, prepare_keyed_target
    from ..paimon.write.batch import BatchWrite
    from .keyed_tasks import KeyedPlan, KeyedTaskSpec, buffer_bytes, check_keyed_layout, dynamic_plan

    target, layout, keyed, next_sequence = prepare_keyed_target(path, schema, opts)
    check_keyed_layout(layout, keyed)
    job = BatchWrite.plan(path, schema, opts, mode, PATH_NAME, prepare=lambda *_: (target, layout))
    # Buckets whose sorted runs pass the trigger are compacted after the commit (unless
    # write-only), by the same coordinator as on the fast path (on the driver: no Spark there).
    job.aggregate = job.aggregate or compacts_automatically(target, opts)
    spec = KeyedTaskSpec(job.staging_dir, layout, keyed, KeyedPlan(next_sequence, target.bucket_check_from,
                                                             dynamic=dynamic_plan(
                                                                 target, keyed, 0 if job.overwrite is not None
                                                                 else target.bucket_check_from)),
                         job.compression, buffer_bytes(target, opts), opts.fs_options or None, create_dir=False,
                         paths=_in_place_paths(target, job.in_place), writer_user=job.commit_user)
    return job, spec


class PaimonStreamWriter(DataSourceStreamArrowWriter):
    """Spark builds this writer in the driver to plan each micro-batch's tasks (pickled into
    them), and again, from the pickled data source, for each batch's commit/abort, in a
    Python worker process Spark may reuse or end after the batch.

    Sync: `commit()` commits the batch. Pipelined: `commit()` accepts the batch
    durably and hands it to the checkpoint's background committer process
    (`spark.committer_service`), which commits it while the next batch runs.
    Sync into a primary-key table: the compaction round after the batch runs in
    the same kind of process (role `compaction`), while the next batch runs, where
    Paimon lets rounds trail commits (`compacts_in_background`).
    """

    def __init__(self, path: str, options: dict, schema, overwrite: bool, catalog_entry=None):
        from ..paimon.write.stream import StreamSink
        opts = WriteOptions.parse(options)
        opts.catalog_entry = catalog_entry
        if overwrite:
            raise ConfigurationError(
                "Output mode 'complete' is not supported by the paimon sink: use outputMode('append').")
        self.pipelined = opts.commit_mode == "pipelined"
        arrow_schema = spark_to_arrow(schema)
        checkpoint = opts.checkpoint_location or options.get("checkpointlocation")
        self.sink = StreamSink(path, checkpoint, arrow_schema, opts, PATH_NAME,
                               query_id(checkpoint, opts.fs_options))
        self.keyed_spec = None  # primary-key and fixed-bucket tables: planned per micro-batch
        if self.sink.keyed is not None:
            from .keyed_tasks import KeyedTaskSpec, buffer_bytes, check_keyed_layout
            check_keyed_layout(self.sink.layout, self.sink.keyed)
            self.keyed_spec = KeyedTaskSpec("", self.sink.layout, self.sink.keyed, None, self.sink.compression,
                                            buffer_bytes(self.sink.target, opts), opts.fs_options or None,
                                            paths=_in_place_paths(self.sink.target, self.sink.in_place))
        self.spec = TaskSpec("", self.sink.layout, self.sink.compression, _target_file_size(opts),
                             opts.fs_options or None, paths=_in_place_paths(self.sink.target, self.sink.in_place))
        self.rounds_spec = None  # sync, keyed: the compaction service's spec
        if self.pipelined:
            from .committer_service import spec_for
            self.service_spec = spec_for(path, self.sink.checkpoint, arrow_schema, options)
            if self.sink.commit_user is not None:
                self._hand_over()  # a restarted query: pending batches are committed now, in order
        else:
            from ..paimon.compaction.wiring import compacts_in_background
            if self.sink.compacts and compacts_in_background(self.sink.target.table()):
                from ..protocol.pipelined import COMPACTION
                from .committer_service import spec_for
                self.sink.rounds_elsewhere = True
                self.rounds_spec = spec_for(path, self.sink.checkpoint, arrow_schema, options, COMPACTION)
            self.sink.restore()

    def _hand_over(self) -> None:
        from .committer_service import ensure_running
        ensure_running(self.service_spec)

    # -- keyed tables: one plan per micro-batch -------------------------------------------------
    # Spark builds this writer in the driver for every micro-batch, after the previous batch's
    # commit() returned (committed, or accepted when pipelined), and pickles it into the batch's
    # tasks; commit/abort run on a writer built afresh in another process, never pickled. So the
    # plan is made when the writer is pickled: the batch's sequence numbers continue above the
    # table's latest snapshot and above every batch still pending, as the fast path plans them
    # (paimon.write.keyed_plan.plan_batch), and the tasks carry it back in their commit messages.
    def __getstate__(self):
        if self.keyed_spec is not None and self.keyed_spec.plan is None:
            from dataclasses import replace
            self.keyed_spec = replace(self.keyed_spec, plan=self._plan_batch())
        return dict(self.__dict__)

    def _plan_batch(self):
        from .keyed_tasks import KeyedPlan, dynamic_plan
        from ..paimon.write.keyed_plan import plan_batch
        accounted = self._accounted()
        pending = self.sink.pending_files()  # before the snapshot: a batch landing meanwhile is in one
        bases = plan_batch(self.sink.target, None, pending)
        check_from = self.sink.target.bucket_check_from
        return KeyedPlan(bases, check_from, accounted, self.sink.target.uniform_buckets,
                         dynamic=dynamic_plan(self.sink.target, self.sink.keyed, check_from))

    def _accounted(self) -> int | None:
        """The highest batch id of this checkpoint committed or pending (None: none)."""
        from ..protocol import PendingStore
        if self.sink.commit_user is None:
            return None
        pending = PendingStore(self.sink.store).identifiers()  # first: one committing meanwhile is in the other
        last = self.sink.target.last_committed(self.sink.commit_user)
        return max([i for i in [last, *pending] if i is not None], default=None)

    def _check_plan(self, messages, batch_id: int) -> None:
        """The batch's plan is this batch's: nothing of this checkpoint was committed or accepted
        since it was made (else Spark reused a writer planned before the previous batch landed,
        and the batches' sequence numbers could overlap). The commit then checks other writers'
        files in its buckets from the snapshot the plan was made on, as the fast path does."""
        plans = [m.plan for m in messages or [] if isinstance(m, PaimonCommitMessage) and m.plan is not None]
        if not plans:
            return  # no task wrote anything
        plan = plans[0]
        now = self._accounted()
        if plan.accounted != now:
            from ..errors import CommitFailedError
            raise CommitFailedError(
                f"format('paimon'): micro-batch {batch_id} into the keyed table {self.sink.target.path} was "
                f"planned when batch {plan.accounted} was the last one committed or accepted, and batch {now} "
                "is now: its sequence numbers may not order it above the batches in between. Spark built "
                "the writer before the previous batch's commit, which this writer needs; stream into keyed "
                "tables with lakesink.stream(...) on this Spark version. Nothing of this batch was committed.",
                table=self.sink.target.path, identifier=batch_id)
        self.sink.target.plan_check_from(batch_id, plan.check_from, plan.uniform_buckets)

    def write(self, iterator):
        from dataclasses import replace

        from pyspark import TaskContext
        batch_id = int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))
        if self.keyed_spec is not None:
            return _write_keyed_task(replace(self.keyed_spec, staging_dir=self.sink.staging_dir(batch_id),
                                             writer_user=self.sink.commit_user), iterator)
        spec = replace(self.spec, staging_dir=self.sink.staging_dir(batch_id))
        return _write_task(spec, iterator)

    def commit(self, messages, batchId: int) -> None:
        crashpoints.reached("tasks-done")
        if self.keyed_spec is not None:
            self._check_plan(messages, batchId)
            if self.keyed_spec.keyed.cross_partition:
                check_one_task_per_key(self.sink.target, self.keyed_spec.keyed, messages)
        if self.pipelined:
            self.sink.accept_batch(batchId, _files(messages))
            self._hand_over()
        else:
            self.sink.commit_batch(batchId, _files(messages))
            if self.rounds_spec is not None:
                self._wake_rounds()

    def _wake_rounds(self) -> None:
        """Hand the round after the batch to the compaction service; run it here if no service
        can start (e.g. no writable runtime directory): the batch landed, the round must not
        fail it, and skipping rounds would let sorted runs pile up."""
        from .committer_service import ensure_running
        try:
            ensure_running(self.rounds_spec)
        except OSError as exc:
            log.warning("%s: no compaction service (%s); compacting in the commit", self.sink.checkpoint, exc)
            self.sink.compaction_rounds().catch_up_round()

    def abort(self, messages, batchId: int) -> None:
        self.sink.abort_batch(batchId, _files(messages or []))
