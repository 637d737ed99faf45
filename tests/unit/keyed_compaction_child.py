"""A streaming driver without Spark for crash tests of keyed compaction: killed and restarted.

    python -m tests.unit.keyed_compaction_child --table T --checkpoint C --batches 8 [--in-place]

The table is a primary-key table with `merge-engine=aggregation` summing `hits` per key, one
bucket (one rewrite per round: the crash harness counts hits of a point across threads racily),
`changelog-producer=lookup` (every compaction also writes changelog files) and a
compaction trigger of 2 sorted runs, so the sink compacts buckets after most micro-batches.
Each micro-batch b is written by the format("paimon") tasks' own keyed writer
(`spark.keyed_tasks.KeyedTaskWriter`, Spark's part played here) and committed through
`StreamSink`: the lakesink code under test is the real one. Batch b adds 1 to the hits of
keys (7b + 3j) % 40, j < 10: a batch applied twice, or a compaction that lost or doubled a
version, shows in the sums. Like Spark, the driver records `commits/<b>` after batch b's
commit and re-runs an unrecorded batch with the same rows after a restart.
`--in-place`: `write.in-place=true` (compaction outputs written at their table paths).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import pyarrow as pa

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("hits", pa.int64())])
OPTIONS = {"primary-key": "id", "bucket": "1", "merge-engine": "aggregation",
           "fields.hits.aggregate-function": "sum", "changelog-producer": "lookup",
           "num-sorted-run.compaction-trigger": "2", "maintenance.enabled": "false"}
KEYS, PER_BATCH = 40, 10


def batch_keys(batch: int) -> list[int]:
    return sorted({(7 * batch + 3 * j) % KEYS for j in range(PER_BATCH)})


def expected_hits(batches: int) -> dict[int, int]:
    return dict(Counter(k for b in range(batches) for k in batch_keys(b)))


def run(args) -> int:
    from lakesink.options import WriteOptions
    from lakesink.paimon.write.keyed_plan import plan_batch
    from lakesink.paimon.write.stream import StreamSink
    from lakesink.spark.keyed_tasks import KeyedPlan, KeyedTaskSpec, KeyedTaskWriter

    options = dict(OPTIONS, **({"write.in-place": "true"} if args.in_place else {}))
    sink = StreamSink(args.table, args.checkpoint, SCHEMA, WriteOptions.parse(options), "keyed_compaction_child")
    sink.bind()
    sink.restore()
    log_dir = os.path.join(args.checkpoint, "commits")
    os.makedirs(log_dir, exist_ok=True)
    done = {int(n) for n in os.listdir(log_dir)}
    for batch in range(args.batches):
        if batch in done:
            continue
        sink.remove_staging(batch)
        plan = KeyedPlan(plan_batch(sink.target, batch, ()), None)
        spec = KeyedTaskSpec(sink.staging_dir(batch), sink.layout, sink.keyed, plan)
        writer = KeyedTaskWriter(spec, 0, f"batch{batch}")
        keys = batch_keys(batch)
        writer.write(pa.table({"id": keys, "hits": [1] * len(keys)}, schema=SCHEMA))
        sink.commit_batch(batch, writer.finish())
        open(os.path.join(log_dir, str(batch)), "w").close()
    print("keyed_compaction_child: caught up", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.unit.keyed_compaction_child")
    parser.add_argument("--table", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--in-place", action="store_true", help="write.in-place=true: compaction in place")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
