"""The crash harness's child on the cluster: one driver, a streaming query on each write path.

    python -m tests.cluster.stream_driver --master spark://... --env KEY=VALUE ... \
        --source SRCDIR --fast-table PATH --fast-checkpoint DIR \
        --native-table s3://... --native-checkpoint DIR --option fs.s3.endpoint=... ...

Both queries read the same replayable source (`tests.crash.driver.build_stream`:
one Parquet file per micro-batch, a few writer tasks each) on the cluster: the
fast path (`lakesink.stream`) into a table in a shared directory (Spark's JVM
writes its files, and the pip pyspark has no S3 connector), the Spark-native path
(`writeStream.format("paimon")`) into a table on S3 with the storage options as
its only credentials. Exits 0 once both caught up; the harness SIGKILLs it at a
protocol point (whichever query reaches it) and starts it again.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tests.crash.driver import READY, guarded

SESSION_MARK = "lakesink-cluster-driver: session "


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.stream_driver")
    parser.add_argument("--master", required=True)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="set in this process's environment before Spark starts (the cluster's)")
    parser.add_argument("--source", required=True)
    parser.add_argument("--fast-table", required=True)
    parser.add_argument("--fast-checkpoint", required=True)
    parser.add_argument("--native-table", required=True)
    parser.add_argument("--native-checkpoint", required=True)
    parser.add_argument("--commit", choices=("sync", "pipelined"), default="sync")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="storage option of the native table (repeatable)")
    parser.add_argument("--timeout", type=float, default=600.0)
    return parser.parse_args(argv)


def run(args) -> int:
    # Spark's processes on this host that leave our process group stay in our session: the
    # harness's case kills the session after each run.
    print(f"{SESSION_MARK}{os.getsid(0)}", flush=True)
    for item in args.env:
        key, value = item.split("=", 1)
        os.environ[key] = value
    if os.environ.get("LAKESINK_CRASH_AT"):
        # Spark starts the native path's commit processes in process groups of their own: tell them ours.
        os.environ.setdefault("LAKESINK_CRASH_PGID", str(os.getpgid(0)))
    started = time.monotonic()
    import lakesink
    from tests.crash.driver import build_stream

    spark = lakesink.session("lakesink-cluster-stream", master=args.master)
    spark.sparkContext.setLogLevel("ERROR")
    print(READY, f"({time.monotonic() - started:.1f} s)", flush=True)
    source = argparse.Namespace(source=args.source, source_table=None, consumer_id=None, cdc=False,
                                extra_column=None, fail_first_attempt=0.0, fail_always_partition=None)
    fast = lakesink.stream(build_stream(spark, source), args.fast_table, checkpoint=args.fast_checkpoint,
                           trigger="availableNow", commit_mode=args.commit, partition_by=["grp"])
    writer = (build_stream(spark, source).writeStream.format("paimon")
              .option("checkpointLocation", args.native_checkpoint).option("partition", "grp")
              .option("commit.mode", args.commit))
    storage = dict(item.split("=", 1) for item in args.option)
    native = writer.options(**storage).trigger(availableNow=True).start(args.native_table)
    for name, query in (("fast", fast), ("native", native)):
        if not query.awaitTermination(args.timeout):
            print(f"lakesink-driver: {name} query not caught up after {args.timeout} s", file=sys.stderr)
            return 1
        if query.exception() is not None:
            print(f"lakesink-driver: {name} query failed: {query.exception()}", file=sys.stderr)
            return 1
    fast.lakesink_sink.close()
    if args.commit == "pipelined":
        lakesink.await_commits(args.native_checkpoint, options=storage)
    spark.stop()
    print(f"lakesink-driver: caught up ({time.monotonic() - started:.1f} s)", flush=True)
    return 0


def main(argv=None) -> int:
    return guarded(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
