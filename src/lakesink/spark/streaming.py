"""The streaming fast path: `foreachBatch`, Spark's JVM writing each micro-batch's Parquet.

Per micro-batch N (identifier N):  restore (once, before the first batch) →
Spark writes Parquet into `staging/<query>-bN` → footers → commit (sync) or
durable accept + background commit (pipelined). `foreachBatch` returns only
after the batch is committed or durably accepted, so Spark records batch N in
its commit log only after that.

Primary-key and fixed-bucket tables: a micro-batch is shuffled to its buckets and
written by Spark (spark.keyed), or, small ones (`write.keyed-shuffle`), by one task
merging the whole batch with pyarrow (spark.keyed_tasks): a small batch's time is
then one stage, not a shuffle, a second stage and a file per bucket through
Hadoop's file system.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import replace

from ..errors import ConfigurationError, StreamStopped
from ..options import WriteOptions
from ..paimon.compaction.wiring import wait_for_rounds
from ..paimon.write.keyed_plan import plan_batch
from ..paimon.write.batch import describe_files
from ..paimon.write.stream import StreamSink
from ..protocol import PipelinedCommitter, crashpoints
from .arrow import spark_to_arrow
from .catalog import resolve_for
from .checkpoint import await_batch_end, query_id
from .fastpath import write_staged
from .checks import translate_error
from .dynamic_bucket import default_assigners
from .keyed_tasks import KeyedPlan, KeyedTaskSpec, buffer_bytes, check_keyed_layout, dynamic_plan, write_in_one_task
from .keyed_write import write_keyed_files
from .output import list_parquet_files
from .rewrite import distributed

log = logging.getLogger(__name__)
PATH_NAME = "lakesink.stream (fast path)"


class _BatchJob:
    """Adapter giving `write_staged` the per-batch staging directory."""

    def __init__(self, sink: StreamSink, batch_id: int):
        self.layout = sink.layout
        self.target = sink.target
        self.compression = sink.compression
        self.staging_dir = sink.staging_dir(batch_id)


class FastStreamSink:
    """The `foreachBatch` function: runs in the driver's Python process, once per micro-batch."""

    def __init__(self, sink: StreamSink, pipelined: bool):
        self.sink = sink
        # This driver outlives its batches: rounds trail commits, once the batch is over (as the
        # compaction service's: docs/compaction.md, "Rounds in the background").
        sink.background_compaction = True
        sink.round_gate = functools.partial(await_batch_end, sink.checkpoint)
        self.pipelined = pipelined
        self.reports = []
        self.pipeline: PipelinedCommitter | None = None
        # Keyed tables: how the previous micro-batch of this run went (write.keyed-shuffle=auto).
        self.last_rows: int | None = None   # rows it wrote (None: none yet)
        self.task_spec = _task_spec(sink) if sink.keyed is not None else None

    def _start(self) -> None:
        # A new checkpoint gets its query id (hence the commit user) only once the
        # query runs: bind at the first micro-batch, before anything is written.
        if self.sink.commit_user is None:
            self.sink.bind()
        if self.pipelined and self.pipeline is None:
            # The same commit step as the format("paimon") committer process: everything
            # pending, in batch order, staging removed (see protocol.pipelined).
            self.pipeline = PipelinedCommitter(self.sink.committer(), self.reports.append,
                                               commit_pending=self.sink.restore_holding_lock)

    def __call__(self, batch_df, batch_id: int) -> None:
        self._start()
        job = _BatchJob(self.sink, batch_id)
        files = []
        try:
            self.sink.remove_staging(batch_id)  # leftovers of an attempt that died
            if self.sink.keyed is not None:
                # Sequence numbers continue above the table's latest snapshot and, pipelined, above
                # the batches still being committed (read first: one that lands meanwhile is then
                # in the snapshot). The commit checks other writers' files in these buckets from
                # that snapshot, skipping this query's own earlier batches (PaimonTarget.commit).
                pending = self.sink.pending_files() if self.pipeline is not None else ()
                plan = plan_batch(self.sink.target, batch_id, pending)
                check_from = self.sink.target.check_from(batch_id)
                if self.shuffles():
                    files = write_keyed_files(batch_df, self.sink.target, self.sink.layout, self.sink.keyed,
                                              plan, job.staging_dir, job.compression, check_from,
                                              commit_user=self.sink.commit_user)
                else:
                    dynamic = dynamic_plan(self.sink.target, self.sink.keyed, check_from,
                                           default_assigners(batch_df.sparkSession))
                    spec = replace(self.task_spec, staging_dir=job.staging_dir,
                                   plan=KeyedPlan(plan, None, dynamic=dynamic, exact=True),
                                   writer_user=self.sink.commit_user)
                    files = write_in_one_task(batch_df, spec)
                    crashpoints.reached("tasks-done")
                self.last_rows = sum(f.meta.row_count for f in files if not f.changelog)
            else:
                write_staged(batch_df, job)
                files = describe_files(list_parquet_files(job.staging_dir, self.sink.target.fs_options),
                                       self.sink.layout, self.sink.target.file_io)
                crashpoints.reached("tasks-done")
        except BaseException as exc:
            self.sink.abort_batch(batch_id, files)
            translated = translate_error(exc, self.sink.target.path)
            if translated is not None:
                raise translated from None
            raise
        if self.pipeline is not None and not self.sink.committer().is_committed(batch_id):
            self.pipeline.submit(batch_id, files, None, {"lakesink.batch-id": str(batch_id)})
        else:  # sync, or a replay of a batch that already landed (skipped, files removed)
            self.reports.append(self.sink.commit_batch(batch_id, files))

    def shuffles(self) -> bool:
        """Whether this keyed micro-batch is shuffled to its buckets (else written by one task):
        `write.keyed-shuffle`; `auto` shuffles the first micro-batch of a run (it may be a
        backlog) and those after one that wrote `min-rows` rows or more."""
        mode = self.sink.options.keyed_shuffle
        if self.task_spec is None or mode == "true":
            return True
        if mode == "false":
            return False
        return self.last_rows is None or self.last_rows >= self.sink.options.keyed_shuffle_min_rows

    def close(self) -> None:
        """Wait for background commits (pipelined), then for background compaction; raises the
        first commit that failed."""
        if self.pipeline is not None:
            self.pipeline.close()
        wait_for_rounds(self.sink.checkpoint)


# Spark's JVM exceptions that mean "the query is being stopped" (StreamExecution.IO_EXCEPTION_NAMES).
INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                 "java.nio.channels.ClosedByInterruptException")


def stopped_by_interrupt(exc: BaseException, batch_id: int) -> StreamStopped | None:
    """`exc`, a JVM call of this batch interrupted by query.stop(), as a short StreamStopped (else None).

    Spark recognises a stop inside foreachBatch by matching the Python traceback against
    `py4j.protocol.Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)<interruption>`,
    a regex that recurses once per character: on the ~10 KB traceback of an interrupted Spark
    job it overflows the stream thread's stack, which then dies printing a StackOverflowError
    instead of stopping quietly. This message keeps the part Spark looks for and a few words.
    """
    from py4j.protocol import Py4JJavaError
    if not isinstance(exc, Py4JJavaError):
        return None
    try:
        text = str(exc)  # asks the JVM for its stack trace
    except Exception:  # noqa: BLE001 - the gateway is gone: Spark reports that itself
        return None
    head, _, trace = text.partition("\n")
    thrown = [line.removeprefix(": ").removeprefix("Caused by: ").split(":", 1)[0].strip()
              for line in trace.splitlines() if line.startswith((": ", "Caused by: "))]
    thrown = next((name for name in thrown if name in INTERRUPTIONS), None)
    if thrown is None:
        return None
    call = head.removeprefix("An error occurred while calling").strip().rstrip(".")
    return StreamStopped(f"micro-batch {batch_id} stopped with its query (nothing of it was committed): "
                         f"py4j.protocol.Py4JJavaError: An error occurred while calling {call}: {thrown}")


def _task_spec(sink: StreamSink) -> KeyedTaskSpec | None:
    """What the one-task write of a micro-batch needs (None: `write.keyed-shuffle=true`, or a table only
    the shuffle writes: nanosecond timestamps, which `auto` then always shuffles)."""
    from ..errors import UnsupportedTableError
    mode = sink.options.keyed_shuffle
    if mode == "true":
        return None
    try:
        check_keyed_layout(sink.layout, sink.keyed, "write.keyed-shuffle=false")
    except UnsupportedTableError as exc:
        if mode == "false":
            raise UnsupportedTableError(f"{exc} Set write.keyed-shuffle to auto or true: Spark's shuffle "
                                        "writes it.", table=sink.target.path) from None
        return None
    return KeyedTaskSpec("", sink.layout, sink.keyed, None, sink.compression, buffer_bytes(sink.target, sink.options),
                         sink.options.fs_options or None)


def stream(df, path: str, checkpoint: str, trigger: str | None = None, *,
           options: Mapping[str, object] | None = None, commit_mode: str = "sync",
           query_name: str | None = None, partition_by=None):
    """Start a streaming query writing `df` into the Paimon table at `path`, exactly once.

    >>> q = lakesink.stream(df, "/data/wh/db.db/orders", checkpoint="/data/chk/orders",
    ...                     trigger="10 seconds")                                  # doctest: +SKIP

    `commit_mode="pipelined"` commits each micro-batch in the background while the
    next one runs; its committables are durable first, so a crash loses nothing.
    Returns the `StreamingQuery`.
    """
    if not df.isStreaming:
        raise ConfigurationError("lakesink.stream needs a streaming DataFrame (spark.readStream...); "
                                 "use lakesink.write for a batch DataFrame.")
    resolved = resolve_for(df.sparkSession, path, "write")  # a path, or a name through the catalog
    path = resolved.path
    merged = resolved.with_fs_options(options)
    merged.setdefault("commit.mode", commit_mode)
    if partition_by:
        merged["partition"] = ",".join(partition_by)
    opts = WriteOptions.parse(merged)
    opts.catalog_entry = resolved.entry
    trigger_args = parse_trigger(trigger) if trigger is not None else None  # checked before anything is written
    sink = StreamSink(path, checkpoint, spark_to_arrow(df.schema), opts, PATH_NAME,
                      query_id(checkpoint, opts.fs_options))
    sink.rewriter = distributed(df.sparkSession)
    sink.restore()
    handler = FastStreamSink(sink, pipelined=opts.commit_mode == "pipelined")
    return start_foreach_batch(df, handler, checkpoint, trigger_args, query_name)


def start_foreach_batch(df, handler, checkpoint: str, trigger_args: dict | None, query_name: str | None):
    """Start `df` into `handler` (a foreachBatch function); `query.lakesink_sink` is the handler
    (its reports; `close()` waits for pipelined commits)."""
    def run(batch_df, batch_id: int) -> None:
        try:
            handler(batch_df, batch_id)
        except Exception as exc:
            stopped = stopped_by_interrupt(exc, batch_id)
            if stopped is not None:
                raise stopped from None
            raise

    writer = df.writeStream.foreachBatch(run).option("checkpointLocation", checkpoint).outputMode("append")
    if query_name:
        writer = writer.queryName(query_name)
    if trigger_args is not None:
        writer = writer.trigger(**trigger_args)
    query = writer.start()
    query.lakesink_sink = handler
    return query


def parse_trigger(trigger) -> dict:
    if isinstance(trigger, dict):
        if "continuous" in trigger:
            raise ConfigurationError("Continuous triggers are not supported: exactly-once commits need "
                                     "micro-batches. Use processingTime or availableNow.")
        return trigger
    text = str(trigger).strip()
    if text.lower() in ("availablenow", "available_now", "available-now"):
        return {"availableNow": True}
    if text.lower() == "once":
        return {"once": True}
    if text.lower().startswith("continuous"):
        raise ConfigurationError("Continuous triggers are not supported: exactly-once commits need "
                                 "micro-batches. Use processingTime or availableNow.")
    return {"processingTime": text}
