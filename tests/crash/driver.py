"""The child program the crash harness kills: one streaming query, run until caught up.

    python -m tests.crash.driver --path TABLE --checkpoint CHK --source SRCDIR \
        --mode native|fast --commit sync|pipelined [--fail-first-attempt 0.5]
    python -m tests.crash.driver --path TABLE --checkpoint CHK --source-table TABLE_A \
        [--consumer-id ID] --mode ...
    python -m tests.crash.driver --path TABLE --checkpoint CHK --source SRCDIR --cdc \
        --extra-column score --merge --mode fast

It reads a replayable source (a directory of Parquet files, one file per
micro-batch; or, with `--source-table`, a Paimon table A through
`spark.readStream.format("paimon")` from its earliest snapshot: a chain
A -> query -> TABLE), writes it into the Paimon table at TABLE through the
chosen path, and exits 0 once it has caught up with the source. Anything else (a failed query,
an error at start) exits 1 with the error on stderr. The harness kills it with
SIGKILL (`protocol.crashpoints` or a timer) and starts it again on the same
checkpoint.

Task-failure injection: a `mapInArrow` step in front of the sink raises in the
first attempt of a deterministic fraction of tasks (Spark retries them), or in
every attempt of one partition (the batch fails past its retries and is aborted).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib

import pyarrow as pa

SOURCE_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("grp", pa.int32())])
# A change stream into a keyed table: `op` is each row's kind (+I, +U, -D); key (id, grp).
CDC_SCHEMA = SOURCE_SCHEMA.append(pa.field("op", pa.string()))
CDC_OPTIONS = {"primary-key": "id,grp", "bucket": "2", "rowkind.field": "op"}
WRITER_PARTITIONS = 3  # a few writer tasks per batch: several files to place, abort and retry
READY = "lakesink-driver: session ready"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.crash.driver")
    parser.add_argument("--path", required=True, help="Paimon table directory")
    parser.add_argument("--checkpoint", required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--source", help="directory of Parquet files with SOURCE_SCHEMA")
    source.add_argument("--source-table", help="Paimon append table with SOURCE_SCHEMA, streamed from earliest")
    parser.add_argument("--consumer-id", default=None, help="with --source-table: record progress in table A")
    parser.add_argument("--mode", choices=("native", "fast"), required=True)
    parser.add_argument("--commit", choices=("sync", "pipelined"), default="sync")
    parser.add_argument("--cdc", action="store_true", help="the source is a change stream (CDC_SCHEMA) "
                        "written into a primary-key table")
    parser.add_argument("--fail-first-attempt", type=float, default=0.0, metavar="FRACTION",
                        help="fraction of writer tasks whose first attempt raises")
    parser.add_argument("--fail-always-partition", type=int, default=None, metavar="P",
                        help="writer partition P raises in every attempt (its batch is aborted)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    parser.add_argument("--extra-column", default=None, metavar="NAME",
                        help="read the source with one more (double) column, e.g. one its newer files gained")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra writer option (repeatable), e.g. aggregator.enabled=true")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark conf of the driver's session (repeatable), e.g. spark.jars=...")
    parser.add_argument("--merge", action="store_true", help="with --cdc --extra-column score: MERGE each "
                        "micro-batch into the existing table in foreachBatch (adding its scores), the batch id "
                        "as the commit identifier")
    return parser.parse_args(argv)


def chosen_for_failure(partition_id: int, first_id: int, fraction: float) -> bool:
    """Deterministic in the data: a replay of the batch picks the same tasks."""
    return zlib.crc32(f"{partition_id}:{first_id}".encode()) % 1000 < fraction * 1000


def failure_injector(fraction: float, always_partition: int | None):
    def inject(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        pid, attempt = ctx.partitionId(), ctx.attemptNumber()
        for batch in batches:
            if batch.num_rows:
                first_id = batch.column(0)[0].as_py()
                if always_partition == pid:
                    time.sleep(1.0)  # let the batch's other tasks finish: the abort then has files to remove
                    raise RuntimeError(f"injected failure: partition {pid}, attempt {attempt}, every attempt")
                if attempt == 0 and chosen_for_failure(pid, first_id, fraction):
                    raise RuntimeError(f"injected failure: partition {pid}, first attempt")
            yield batch
    return inject


def build_stream(spark, args):
    from pyspark.sql.pandas.types import from_arrow_schema

    arrow_schema = CDC_SCHEMA if args.cdc else SOURCE_SCHEMA
    if args.extra_column:
        arrow_schema = arrow_schema.append(pa.field(args.extra_column, pa.float64()))
    schema = from_arrow_schema(arrow_schema)
    if args.source_table:
        reader = spark.readStream.format("paimon").option("scan.mode", "earliest")
        if args.consumer_id:
            reader = reader.option("consumer-id", args.consumer_id)
        df = reader.load(args.source_table)
    else:
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(args.source)
    df = df.repartition(WRITER_PARTITIONS, "id")
    if args.fail_first_attempt > 0 or args.fail_always_partition is not None:
        df = df.mapInArrow(failure_injector(args.fail_first_attempt, args.fail_always_partition), schema)
    return df


MERGE_USER = "crash-merge"


def merge_batch(spark, path: str):
    """foreachBatch: MERGE the batch into the table, adding scores (a batch applied twice shows),
    exactly once through the batch id as the statement's commit identifier."""
    import lakesink

    def merge(batch_df, batch_id):
        (lakesink.merge(spark, path, batch_df.drop("op"), on="t.id = s.id AND t.grp = s.grp",
                        commit_user=MERGE_USER, commit_identifier=batch_id)
         .when_matched_update(set={"score": "t.score + s.score", "name": "s.name"})
         .when_not_matched_insert_all()
         .execute())
    return merge


def run(args) -> int:
    import lakesink

    if os.environ.get("LAKESINK_CRASH_AT"):
        # Spark starts Python workers in process groups of their own: tell them ours.
        os.environ.setdefault("LAKESINK_CRASH_PGID", str(os.getpgid(0)))
    spark = lakesink.session("lakesink-crash-driver", master="local[2,3]", conf={
        "spark.sql.shuffle.partitions": str(WRITER_PARTITIONS),
        "spark.sql.session.timeZone": "UTC",
        **dict(item.split("=", 1) for item in args.conf),
    })
    spark.sparkContext.setLogLevel("ERROR")
    print(READY, flush=True)
    df = build_stream(spark, args)
    handler = None
    extra = {**(CDC_OPTIONS if args.cdc else {}), **dict(item.split("=", 1) for item in args.option)}
    if args.merge:
        query = (df.writeStream.foreachBatch(merge_batch(spark, args.path))
                 .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
    elif args.mode == "fast":
        query = lakesink.stream(df, args.path, checkpoint=args.checkpoint, trigger="availableNow",
                                commit_mode=args.commit, partition_by=["grp"], options=extra)
        handler = query.lakesink_sink
    else:
        writer = (df.writeStream.format("paimon").option("checkpointLocation", args.checkpoint)
                  .option("partition", "grp").option("commit.mode", args.commit))
        for key, value in extra.items():
            writer = writer.option(key, value)
        query = writer.trigger(availableNow=True).start(args.path)
    finished = query.awaitTermination(args.timeout)
    if not finished:
        query.stop()
        print(f"lakesink-driver: not caught up after {args.timeout} s", file=sys.stderr)
        return 1
    if query.exception() is not None:
        print(f"lakesink-driver: query failed: {query.exception()}", file=sys.stderr)
        return 1
    if handler is not None:
        handler.close()  # pipelined: commits still running in the background
    else:  # the native path's background processes: committer (pipelined), compaction (keyed)
        lakesink.await_commits(args.checkpoint)
    spark.stop()
    print("lakesink-driver: caught up", flush=True)
    return 0


def guarded(run_driver, args) -> int:
    """`run_driver(args)`'s exit code; an exception as its traceback and one line for the harness's log."""
    try:
        return run_driver(args)
    except Exception as exc:
        import traceback
        traceback.print_exc()
        print(f"lakesink-driver: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def main(argv=None) -> int:
    return guarded(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
