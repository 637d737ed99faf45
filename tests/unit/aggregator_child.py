"""A streaming driver without Spark, for crash tests of the aggregator: killed and restarted.

    python -m tests.unit.aggregator_child --table T --checkpoint C --batches 8 [--pipelined] [--in-place]

Each micro-batch b writes `--files` small Parquet files (what b's writer tasks
would write) into the sink's staging directory and commits them through
`StreamSink` with `aggregator.enabled=true`: the lakesink code under test is
the real one; only Spark's part (planning batches, the commit log) is played
here. Like Spark, the driver records `commits/<b>` after batch b's commit and
re-runs an unrecorded batch with the same rows after a restart. Batch b's rows
are ids b*1000 + i, in day partition b // 3. `--in-place`: `write.in-place=true`,
so the aggregator's rewrites write at their table paths (paimon.compaction.outputs).
"""

from __future__ import annotations

import argparse
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.int32()), ("payload", pa.string())])
OPTIONS = {"partition": "day", "aggregator.enabled": "true", "target-file-size": "12kb",
           "maintenance.enabled": "false"}


def batch_rows(batch: int, files: int, rows: int) -> list[pa.Table]:
    out = []
    for k in range(files):
        ids = [batch * 1000 + k * rows + j for j in range(rows)]
        out.append(pa.table({"id": pa.array(ids, pa.int64()), "day": pa.array([batch // 3] * rows, pa.int32()),
                             "payload": [f"row-{i}-" + "x" * (i % 17) for i in ids]}, schema=SCHEMA))
    return out


def run(args) -> int:
    from lakesink.options import WriteOptions
    from lakesink.paimon.write.batch import describe_files
    from lakesink.paimon.write.stream import StreamSink
    from lakesink.protocol import PipelinedCommitter

    options = dict(OPTIONS, **{"aggregator.enabled": str(not args.no_aggregator).lower()})
    if args.in_place:
        options["write.in-place"] = "true"
    sink = StreamSink(args.table, args.checkpoint, SCHEMA, WriteOptions.parse(options), "aggregator_child")
    sink.bind()
    sink.restore()
    log_dir = os.path.join(args.checkpoint, "commits")
    os.makedirs(log_dir, exist_ok=True)
    done = {int(n) for n in os.listdir(log_dir)}
    pipeline = PipelinedCommitter(sink.committer()) if args.pipelined else None
    for batch in range(args.batches):
        if batch in done:
            continue
        staging = sink.staging_dir(batch)
        sink.remove_staging(batch)
        os.makedirs(staging, exist_ok=True)
        paths = []
        for k, data in enumerate(batch_rows(batch, args.files, args.rows)):
            path = f"{staging}/part-{k}.parquet"
            pq.write_table(data, path)
            paths.append(path)
        files = describe_files(paths, sink.layout, sink.target.file_io)
        if pipeline is not None and not sink.committer().is_committed(batch):
            pipeline.submit(batch, files, None, {"lakesink.batch-id": str(batch)})
        else:
            sink.commit_batch(batch, files)
        open(os.path.join(log_dir, str(batch)), "w").close()
    if pipeline is not None:
        pipeline.close()
        for batch in range(args.batches):
            sink.remove_staging(batch)
    print("aggregator_child: caught up", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.unit.aggregator_child")
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--pipelined", action="store_true")
    parser.add_argument("--no-aggregator", action="store_true", help="small files only (to compact later)")
    parser.add_argument("--in-place", action="store_true", help="write.in-place=true: rewrites in place")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
