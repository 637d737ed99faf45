"""A driver with Hadoop's S3A connector on its classpath, writing S3 tables on the fast path.

    python -m tests.spark.fastpath_s3_child --base s3://bucket/wh/db.db --fs '{"fs.s3.endpoint": ...}' \
        --conf spark.jars=... [--conf KEY=VALUE ...]

Its own process: the connector must be on the JVM's classpath from the start, and the
tests' shared session has none. Writes an append table once and a primary-key table
twice with `lakesink.write`, the endpoint and keys given only as the tables' options,
and prints one JSON line of the reports; the test reads the tables back with pypaimon.
"""

from __future__ import annotations

import argparse
import json
import sys

APPEND_ROWS = 400
KEYED_ROWS = 100


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--fs", required=True, help="the tables' storage options, as JSON")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    import lakesink

    fs = json.loads(args.fs)
    spark = lakesink.session("lakesink-s3a-child", conf=dict(item.split("=", 1) for item in args.conf))
    spark.sparkContext.setLogLevel("ERROR")
    reports = {}
    events = f"{args.base}/events"
    df = spark.range(0, APPEND_ROWS, 1, 2).selectExpr("id", "cast(id % 4 as string) as grp", "id * 2 as v")
    reports["events"] = lakesink.write(df, events, partition_by=["grp"], options=fs).snapshot_id
    users = f"{args.base}/users"
    for version, lo in (("v1", 0), ("v2", KEYED_ROWS // 2)):
        df = spark.range(lo, lo + KEYED_ROWS, 1, 2).selectExpr("id", f"'{version}' as name")
        report = lakesink.write(df, users, primary_key=["id"], options={**fs, "bucket": "2"})
        reports[f"users-{version}"] = report.snapshot_id
    spark.stop()
    print("lakesink-s3a-child:", json.dumps(reports), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
