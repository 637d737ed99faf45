"""The child program the JDBC crash and retry tests run (and kill): one write, run until done.

    python -m tests.jdbc.driver --url URL --table T --source DIR --path fast|format|batch|format-batch|ctas
        [--checkpoint CHK] [--option key=value ...] [--master local[2,3]]

Streams (`fast`: lakesink.jdbc.stream, `format`: writeStream.format("lakesink-jdbc")) read
the Parquet files of DIR one per micro-batch with an availableNow trigger; `batch` writes all
of them with lakesink.jdbc.write under a fixed commit identity. Exits 0 when done, 1 on a
failure (printed). The tests kill it with LAKESINK_CRASH_AT and start it again.
"""

from __future__ import annotations

import argparse
import os
import sys

WRITER_PARTITIONS = 3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.jdbc.driver")
    parser.add_argument("--url", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--path", choices=("fast", "format", "batch", "format-batch", "ctas"), required=True)
    parser.add_argument("--checkpoint")
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--master", default="local[2,3]")  # up to 3 attempts per task
    args = parser.parse_args(argv)
    options = dict(item.split("=", 1) for item in args.option)
    if os.environ.get("LAKESINK_CRASH_AT"):
        os.environ.setdefault("LAKESINK_CRASH_PGID", str(os.getpgid(0)))  # workers die with us
    import lakesink

    spark = lakesink.session("lakesink-jdbc-driver", master=args.master, conf={
        "spark.sql.shuffle.partitions": str(WRITER_PARTITIONS), "spark.sql.session.timeZone": "UTC"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if args.path == "batch":
            df = spark.read.parquet(args.source).repartition(WRITER_PARTITIONS, "id")
            report = lakesink.jdbc.write(df, args.url, args.table, commit_user="driver", commit_identifier=1,
                                         options=options)
            print(f"report: {report}", flush=True)
            return 0
        if args.path == "ctas":
            df = spark.read.parquet(args.source).repartition(WRITER_PARTITIONS, "id")
            report = lakesink.jdbc.create_table_as(df, args.url, args.table, options=options)
            print(f"report: {report}", flush=True)
            return 0
        if args.path == "format-batch":
            writer = (spark.read.parquet(args.source).repartition(WRITER_PARTITIONS, "id").write
                      .format("lakesink-jdbc").option("url", args.url).option("dbtable", args.table)
                      .option("commit.user", "driver").option("commit.identifier", "1"))
            for key, value in options.items():
                writer = writer.option(key, value)
            writer.mode("append").save()
            return 0
        df = (spark.readStream.schema("id long, name string").option("maxFilesPerTrigger", 1).parquet(args.source)
              .repartition(WRITER_PARTITIONS, "id"))
        if args.path == "fast":
            query = lakesink.jdbc.stream(df, args.url, args.table, checkpoint=args.checkpoint, trigger="availableNow",
                                         options=options)
        else:
            writer = (df.writeStream.format("lakesink-jdbc").option("url", args.url).option("dbtable", args.table)
                      .option("checkpointLocation", args.checkpoint))
            for key, value in options.items():
                writer = writer.option(key, value)
            query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
            return 1
        return 0
    except Exception as exc:  # noqa: BLE001 - the test reads the log
        print(f"driver failed: {exc!r}", file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
