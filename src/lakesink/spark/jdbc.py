"""The Spark binding of the JDBC sink: tasks via `mapInArrow`, the commit in the caller's process.

`write` runs each partition's task with `mapInArrow`; a task stages its rows
and returns one small row describing its staging table. Spark delivers one
result per partition (the attempt that won), so exactly those staging tables
are committed; whatever failed or speculative attempts staged is dropped by
the commit (it drops every staging table registered under the job's token).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterable, Mapping

from ..errors import ConfigurationError
from ..protocol import CommitReport, crashpoints
from ..protocol.staging import STAGING_AGE, Terminated, run_staged, staging_age
from ..jdbc.db import Database
from .checkpoint import query_id
from .session import is_connect, wait_for_tasks
from ..jdbc.job import JdbcJob
from ..jdbc.options import JdbcOptions
from ..jdbc.staged import JdbcStagedTable
from ..jdbc.stream_sink import JdbcStreamSink
from ..jdbc.target import StagedRows, drop_staging
from ..jdbc.tasks import stage

log = logging.getLogger(__name__)
MESSAGE_DDL = "table string, job string, rows long, partition int, attempt int"


def _options(url: str, table: str, options: Mapping[str, object] | None, **given) -> JdbcOptions:
    merged: dict[str, object] = dict(options or {})
    merged.update({"url": url, "dbtable": table})
    merged.update({k: v for k, v in given.items() if v is not None})
    return JdbcOptions.parse(merged)


def run_tasks(df, job: JdbcJob, token: str, num_partitions: int | None = None) -> list[StagedRows]:
    """Stage every partition of `df`; one StagedRows per partition (empty ones have no table)."""
    import pyarrow as pa

    if num_partitions is not None and df.rdd.getNumPartitions() > num_partitions:
        df = df.coalesce(num_partitions)  # as Spark's JDBC writer does with numPartitions
    schema = pa.schema([("table", pa.string()), ("job", pa.string()), ("rows", pa.int64()),
                        ("partition", pa.int32()), ("attempt", pa.int32())])

    def task(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        s = stage(job, batches, ctx.partitionId(), ctx.attemptNumber(), token)
        yield pa.RecordBatch.from_pylist([{"table": s.table, "job": s.job, "rows": s.rows,
                                           "partition": s.partition, "attempt": s.attempt}], schema=schema)

    spark = df.sparkSession
    sc = None if is_connect(spark) else spark.sparkContext
    group = f"lakesink-jdbc-{token}"
    if sc is not None:
        sc.setJobGroup(group, "lakesink.jdbc: stage rows", interruptOnCancel=True)
    try:
        rows = df.mapInArrow(task, MESSAGE_DDL).collect()
    except BaseException:
        # A failed job's other tasks may still be staging: the abort must come after them, or a
        # late task registers a staging table after the abort dropped the job's tables.
        if sc is not None:
            sc.cancelJobGroup(group)
            wait_for_tasks(sc, group)
        raise
    finally:
        if sc is not None:
            sc.setLocalProperty("spark.jobGroup.id", None)
    return [StagedRows(r["table"], r["job"], r["rows"], r["partition"], r["attempt"]) for r in rows]


def write(df, url: str, table: str, mode: str = "append", *, key: Iterable[str] | None = None,
          commit_user: str | None = None, commit_identifier: int | None = None,
          options: Mapping[str, object] | None = None, num_partitions: int | None = None) -> CommitReport:
    """Write `df` into a PostgreSQL or SQLite table in one transaction; returns a CommitReport.

    >>> lakesink.jdbc.write(df, "postgresql://app@127.0.0.1:5432/shop", "public.orders")   # doctest: +SKIP
    >>> lakesink.jdbc.write(df, url, "public.users", mode="upsert", key=["id"])             # doctest: +SKIP

    `mode`: append, overwrite (all rows replaced, table definition kept) or upsert
    (INSERT ... ON CONFLICT on `key`). With `commit_user` and an increasing
    `commit_identifier`, re-running a job that already committed writes nothing.
    A missing table is created from the DataFrame's schema in the same transaction.
    """
    if df.isStreaming:
        raise ConfigurationError("lakesink.jdbc.write needs a batch DataFrame; use lakesink.jdbc.stream.")
    opts = _options(url, table, options, **{"write.mode": mode, "upsert.key": ",".join(key) if key else None,
                                           "commit.user": commit_user, "commit.identifier": commit_identifier})
    job = JdbcJob.plan(opts, df.schema)
    if job.already_committed():
        return CommitReport(job.commit_user, job.identifier, skipped_replay=True)
    staged: list[StagedRows] = []
    try:
        staged = run_tasks(df, job, job.token, num_partitions)
        crashpoints.reached("tasks-done")
    except BaseException:
        job.abort(staged)
        raise
    return job.commit(staged)


class ForeachBatchSink:
    """The `foreachBatch` function of `stream`: runs in the driver's Python process, once per micro-batch."""

    def __init__(self, sink: JdbcStreamSink):
        self.sink = sink
        self.reports: list[CommitReport] = []

    def __call__(self, batch_df, batch_id: int) -> None:
        sink = self.sink
        sink.bind()  # a new checkpoint has its query id only once the query runs
        if sink.is_committed(batch_id):  # a replay after a crash: its rows are in already
            self.reports.append(sink.skip_replay(batch_id))
            return
        staged: list[StagedRows] = []
        try:
            staged = run_tasks(batch_df, sink.job, sink.token(batch_id))
            crashpoints.reached("tasks-done")
        except BaseException:
            sink.abort_batch(batch_id, staged)
            raise
        self.reports.append(sink.commit_batch(batch_id, staged))


def stream(df, url: str, table: str, checkpoint: str, trigger: str | None = None, *,
           mode: str = "append", key: Iterable[str] | None = None, commit_user: str | None = None,
           options: Mapping[str, object] | None = None, query_name: str | None = None):
    """Start an exactly-once streaming query into a database table; returns the StreamingQuery.

    >>> q = lakesink.jdbc.stream(sdf, url, "public.orders", checkpoint="/chk/orders", trigger="5 seconds")  # doctest: +SKIP

    Each micro-batch commits in one transaction with its batch id; a replayed batch is skipped.
    `query.lakesink_sink.reports` holds one CommitReport per batch.
    """
    if not df.isStreaming:
        raise ConfigurationError("lakesink.jdbc.stream needs a streaming DataFrame; use lakesink.jdbc.write.")
    if mode not in ("append", "upsert"):
        raise ConfigurationError(f"mode={mode!r}: a stream appends or upserts (expected 'append' or 'upsert').")
    from .streaming import parse_trigger, start_foreach_batch

    opts = _options(url, table, options, **{"write.mode": mode, "upsert.key": ",".join(key) if key else None,
                                           "commit.user": commit_user, "checkpointLocation": checkpoint})
    trigger_args = parse_trigger(trigger) if trigger is not None else None
    sink = JdbcStreamSink(opts, df.schema, checkpoint, query_id(checkpoint))
    sink.restore()
    return start_foreach_batch(df, ForeachBatchSink(sink), checkpoint, trigger_args, query_name)


def create_table_as(df, url: str, table: str, *, options: Mapping[str, object] | None = None,
                    if_not_exists: bool = False) -> CommitReport | None:
    """Create `table` from `df`; it appears (in one transaction) only if the job succeeds.

    >>> lakesink.jdbc.create_table_as(df, url, "public.daily")    # doctest: +SKIP

    With `if_not_exists=True` an existing table is left alone (returns None).
    """
    return _staged(df, url, table, options, replace=False, if_not_exists=if_not_exists)


def replace_table_as(df, url: str, table: str, *, options: Mapping[str, object] | None = None) -> CommitReport | None:
    """Replace `table` (definition and rows) with `df` in one transaction, or change nothing."""
    return _staged(df, url, table, options, replace=True, if_not_exists=False)


def _staged(df, url, table, options, replace: bool, if_not_exists: bool):
    import threading

    staged = JdbcStagedTable(_options(url, table, options), df.schema, replace=replace, if_not_exists=if_not_exists)

    def job():
        try:
            staged_rows = run_tasks(df, staged.job, staged.token)
            crashpoints.reached("tasks-done")
            return staged.job.commit(staged_rows)
        except Terminated:
            # Stop tasks still writing staging tables; not from this thread, whose py4j
            # connection still waits for the interrupted call.
            canceller = threading.Thread(target=df.sparkSession.sparkContext.cancelAllJobs, daemon=True)
            canceller.start()
            canceller.join(timeout=60)
            raise

    return run_staged(staged, job)


def clean_staging(url: str, older_than: datetime.timedelta | float = STAGING_AGE, dry_run: bool = False,
                  options: Mapping[str, object] | None = None) -> list[str]:
    """Drop staging and hidden CTAS tables older than `older_than` (left by killed drivers; a
    `datetime.timedelta` or seconds, an hour by default); return their names."""
    older_than_s = staging_age(older_than).total_seconds()
    opts = JdbcOptions.parse({**dict(options or {}), "url": url})
    db = Database.from_options(opts)
    conn = db.connect()
    try:
        with db.transaction(conn) as cur:
            registry = db.meta_table("staging")
            if db.columns(cur, registry) is None:
                return []
            cur.execute(f"SELECT name FROM {registry.sql} WHERE created_at < {db.param} ORDER BY name",
                        (time.time() - older_than_s,))
            names = [r[0] for r in cur.fetchall()]
            if not dry_run:
                drop_staging(db, cur, names)
        return names
    finally:
        conn.close()
