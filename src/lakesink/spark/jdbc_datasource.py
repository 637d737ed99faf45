"""`df.write.format("lakesink-jdbc")` / `writeStream.format("lakesink-jdbc")` through Spark's Python Data Source API.

The writer is planned on the driver (all checks happen there), pickled into
tasks, which stage their rows, and into a fresh driver-side process for
`commit`/`abort`. Spark hands `commit` the messages of the attempts it chose;
the commit drops every other staging table of the job.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from ..errors import ConfigurationError
from ..protocol import crashpoints
from ..jdbc.job import JdbcJob
from .checkpoint import query_id
from ..jdbc.options import JdbcOptions
from ..jdbc.target import StagedRows
from ..jdbc.tasks import stage

NAME = "lakesink-jdbc"


@dataclass
class JdbcCommitMessage(WriterCommitMessage):
    staged: StagedRows


def _staged(messages) -> list[StagedRows]:
    return [m.staged for m in messages or [] if isinstance(m, JdbcCommitMessage)]


def _task_ids() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId(), ctx.attemptNumber()


class JdbcDataSource(DataSource):
    """Writes only: reading a database through lakesink is not offered (use Spark's JDBC reader)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema, overwrite: bool):
        return JdbcBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema, overwrite: bool):
        if overwrite:
            raise ConfigurationError(f"Output mode 'complete' is not supported by {NAME}: use outputMode('append') "
                                     "(or write.mode=upsert with upsert.key for keyed results).")
        return JdbcStreamWriter(dict(self.options), schema)


class JdbcBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: dict, schema, overwrite: bool):
        opts = JdbcOptions.parse(options)
        if overwrite:
            if opts.mode == "upsert":
                raise ConfigurationError("write.mode=upsert cannot be combined with mode('overwrite').")
            opts.mode = "overwrite"
        self.job = JdbcJob.plan(opts, schema)
        self.skip = self.job.already_committed()

    def write(self, iterator):
        if self.skip:
            return JdbcCommitMessage(StagedRows("", self.job.token, 0, 0, 0))
        partition, attempt = _task_ids()
        return JdbcCommitMessage(stage(self.job, iterator, partition, attempt, self.job.token))

    def commit(self, messages) -> None:
        if self.skip:
            return
        crashpoints.reached("tasks-done")
        self.job.commit(_staged(messages))

    def abort(self, messages) -> None:
        self.job.abort(_staged(messages))


class JdbcStreamWriter(DataSourceStreamArrowWriter):
    """Built on the driver for each micro-batch (restoring what a dead driver accepted first),
    pickled into tasks, and again into a fresh process for commit/abort."""

    def __init__(self, options: dict, schema):
        from ..jdbc.stream_sink import JdbcStreamSink

        opts = JdbcOptions.parse(options)
        self.sink = JdbcStreamSink(opts, schema, query_id=query_id(opts.checkpoint))
        self.sink.bind()  # before pickling into tasks: they name staging tables from the commit user
        self.sink.restore()

    def write(self, iterator):
        from pyspark import TaskContext

        batch_id = int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))
        partition, attempt = _task_ids()
        return JdbcCommitMessage(stage(self.sink.job, iterator, partition, attempt, self.sink.token(batch_id)))

    def commit(self, messages, batchId: int) -> None:
        crashpoints.reached("tasks-done")
        if self.sink.is_committed(batchId):
            self.sink.skip_replay(batchId)
            return
        self.sink.commit_batch(batchId, _staged(messages))

    def abort(self, messages, batchId: int) -> None:
        self.sink.abort_batch(batchId, _staged(messages))
