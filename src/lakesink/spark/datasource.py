"""The Spark-native path: `format("paimon")` through PySpark's Python Data Source API.

Spark pickles the writer into its tasks and into a fresh driver-side Python
process for `commit`/`abort` (Spark 4.x), so the writer carries only plain
state: the planned job (`BatchWrite` / `StreamSink`) and what tasks need.
Tasks write Parquet with pyarrow into the job's staging directory and return
the files' metadata; the driver commits them through the same protocol as the
fast path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from ..errors import ConfigurationError, UnsupportedTableError
from .. import options as registry
from ..options import WriteOptions
from ..protocol import crashpoints
from .arrow import spark_to_arrow
from .checkpoint import query_id
from .tasks import StagingWriter, TaskSpec, task_prefix

PATH_NAME = "format('paimon')"


@dataclass
class PaimonCommitMessage(WriterCommitMessage):
    files: list = field(default_factory=list)  # StagedFile


def _target_file_size(options: WriteOptions) -> int:
    from pypaimon.common.memory_size import MemorySize
    raw = options.table_options.get("target-file-size")
    return MemorySize.parse(raw).get_bytes() if raw else TaskSpec.target_file_size


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


NO_TABLE = (
    "No table: use .save(name_or_path) / .load(name_or_path) / .start(name_or_path), or .option('path', ...). "
    "Spark passes neither the table name nor a location to a Python data source for saveAsTable, "
    "writeStream.toTable or a catalog table (CREATE TABLE ... USING paimon): write "
    "df.write.format('paimon').save('shop.orders') or lakesink.write(df, 'shop.orders'), stream with "
    ".start('shop.orders') or lakesink.stream(...), and run SQL with lakesink.sql(spark, ...) "
    "(docs/catalogs.md) or over CREATE TEMPORARY VIEW v USING paimon OPTIONS (path '...').")


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
        from ..paimon.catalog import open_catalog, resolve
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
        from ..paimon.tables import arrow_schema, open_table
        resolved = self._resolve()
        table = open_table(resolved.path, registry.storage_options(self._options(resolved)) or None)
        if table is None:
            raise ConfigurationError(f"Table {resolved} does not exist.")
        schema = arrow_schema(table)
        if registry.parse({k: v for k, v in self.options.items() if k.lower() == "read.readchangelog"},
                          ("stream-read",)).get("read.readChangeLog"):
            from ..paimon.changes import ROW_KIND
            import pyarrow as pa
            schema = schema.insert(0, pa.field(ROW_KIND, pa.string(), nullable=False))
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
        from .reader import PaimonStreamReader
        resolved = self._resolve()
        return PaimonStreamReader(resolved.path, self._options(resolved), schema)


class LakesinkPaimonDataSource(PaimonDataSource):
    """The same data source under a name no other connector takes: `format("lakesink-paimon")`."""

    @classmethod
    def name(cls) -> str:
        return "lakesink-paimon"


class PaimonBatchWriter(DataSourceArrowWriter):
    def __init__(self, path: str, options: dict, schema, overwrite: bool, catalog_entry=None):
        from ..paimon.sink import BatchWrite
        opts = WriteOptions.parse(options)
        opts.catalog_entry = catalog_entry  # a new table by name: created (in its catalog) when planned
        self.job = BatchWrite.plan(path, spark_to_arrow(schema), opts,
                                   "overwrite" if overwrite else "append", PATH_NAME)
        self.spec = TaskSpec(self.job.staging_dir, self.job.layout, self.job.compression,
                             _target_file_size(opts), opts.fs_options or None, create_dir=False)
        self.skip = self.job.already_committed()
        if not self.skip:
            self.job.target.file_io.check_or_mkdirs(self.job.staging_dir)

    def write(self, iterator):
        if self.skip:
            return PaimonCommitMessage([])
        return _write_task(self.spec, iterator)

    def commit(self, messages) -> None:
        crashpoints.reached("tasks-done")
        self.job.commit(_files(messages))

    def abort(self, messages) -> None:
        self.job.abort(_files(messages or []))


class PaimonStreamWriter(DataSourceStreamArrowWriter):
    """Spark builds this writer once to plan the query's tasks and again, from the
    pickled data source, in a fresh Python process for each batch's commit/abort.

    Sync: `commit()` commits the batch. Pipelined: `commit()` accepts the batch
    durably and hands it to the checkpoint's background committer process
    (`spark.committer_service`), which commits it while the next batch runs.
    """

    def __init__(self, path: str, options: dict, schema, overwrite: bool, catalog_entry=None):
        from ..paimon.stream import StreamSink
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
        if self.sink.keyed is not None:
            raise UnsupportedTableError(
                f"{self.sink.target.path} is a primary-key or fixed-bucket table; format('paimon') cannot "
                "route rows to buckets (a Python data source cannot repartition its input). Stream into it "
                "with lakesink.stream(...), which writes keyed tables.", table=self.sink.target.path)
        self.spec = TaskSpec("", self.sink.layout, self.sink.compression, _target_file_size(opts),
                             opts.fs_options or None)
        if self.pipelined:
            from .committer_service import spec_for
            self.service_spec = spec_for(path, self.sink.checkpoint, arrow_schema, options)
            if self.sink.commit_user is not None:
                self._hand_over()  # a restarted query: pending batches are committed now, in order
        else:
            self.sink.restore()

    def _hand_over(self) -> None:
        from .committer_service import ensure_running
        ensure_running(self.service_spec)

    def write(self, iterator):
        from dataclasses import replace

        from pyspark import TaskContext
        batch_id = int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))
        spec = replace(self.spec, staging_dir=self.sink.staging_dir(batch_id))
        return _write_task(spec, iterator)

    def commit(self, messages, batchId: int) -> None:
        crashpoints.reached("tasks-done")
        if self.pipelined:
            self.sink.accept_batch(batchId, _files(messages))
            self._hand_over()
        else:
            self.sink.commit_batch(batchId, _files(messages))

    def abort(self, messages, batchId: int) -> None:
        self.sink.abort_batch(batchId, _files(messages or []))
