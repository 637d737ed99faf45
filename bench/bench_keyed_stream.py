"""Streaming CDC into a primary-key table vs the same query into an append table.

Rate source at `rows_per_second`, 1-second trigger, 2 source partitions. Each row is
an upsert (`+U`) or, one in ten, a delete (`-D`) of one of `keys` keys; the keyed
table has 8 buckets and `rowkind.field=op`, the append table the same columns and no
key. Both write paths (`lakesink.stream`, `writeStream.format("paimon")`), sync
commits. The append and keyed queries run in alternating rounds of `seconds` each
(the machine's load drifts); figure: mean micro-batch duration (Spark's
triggerExecution) over all rounds, and keyed ÷ append per path (target ≤ 1.2), with
Spark's phases of the batch beside it (`addBatch`: the tasks and the sink's commit;
`commitOffsets`: Spark's commit log; the rest: offsets log, planning) to show where a keyed
batch spends its extra time.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile

import lakesink

from .bench_stream import _run_query

BUCKETS = 8
PHASES = ("addBatch", "commitOffsets", "walCommit")


def _phases(query) -> list[dict]:
    """Spark's durations of each batch that read rows (the first, which plans the table, left out)."""
    progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0][1:]
    return [{k: p["durationMs"].get(k, 0) for k in ("triggerExecution", *PHASES)} for p in progress]


def run(spark, seconds: float = 20, rounds: int = 4, rows_per_second: int = 20_000, keys: int = 100_000) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-keyed-stream-")
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "1000")

    def source():
        return (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second)
                .option("numPartitions", 2).load()
                .selectExpr(f"value % {keys} as id", "timestamp as ts", "cast(value % 1000 as int) as n",
                            "case when value % 10 = 0 then '-D' else '+U' end as op"))

    keyed = {"primary-key": "id", "bucket": str(BUCKETS), "rowkind.field": "op"}

    def fast(table: str, options: dict):
        return lambda: lakesink.stream(source(), f"{root}/wh/db.db/{table}", checkpoint=f"{root}/chk-{table}",
                                       trigger="1 second", options=options)

    def native(table: str, options: dict):
        def start():
            writer = source().writeStream.format("paimon").option("checkpointLocation", f"{root}/chk-{table}")
            for key, value in options.items():
                writer = writer.option(key, value)
            return writer.trigger(processingTime="1 second").start(f"{root}/wh/db.db/{table}")
        return start

    queries = {("lakesink.stream", "append"): fast("fast_append", {}),
               ("lakesink.stream", "keyed"): fast("fast_keyed", keyed),
               ("format(paimon)", "append"): native("native_append", {}),
               ("format(paimon)", "keyed"): native("native_keyed", keyed)}
    durations: dict[tuple, list[float]] = {k: [] for k in queries}
    per_round: dict[tuple, list[float]] = {k: [] for k in queries}  # each round's mean batch
    phases: dict[tuple, list[dict]] = {k: [] for k in queries}
    try:
        for key in queries:  # warm-up, not counted: a cold JVM slows whichever query runs first
            _run_query(queries[key], min(seconds, 8))
        for number in range(rounds):
            order = list(queries) if number % 2 == 0 else list(reversed(queries))
            for key in order:
                query, batch_ms = _run_query(queries[key], seconds)
                phases[key] += _phases(query)
                durations[key] += batch_ms[1:]  # the first batch of each start plans the table
                per_round[key].append(statistics.mean(batch_ms[1:] or [float("nan")]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {}
    print(f"\nstreaming CDC, rate {rows_per_second:,} rows/s over {keys:,} keys, 1 s trigger, "
          f"{rounds} rounds x {seconds:.0f} s per query")
    for path in ("lakesink.stream", "format(paimon)"):
        append, keyed_ms = (statistics.mean(durations[(path, kind)] or [float("nan")]) for kind in ("append", "keyed"))
        # The machine drifts between rounds: each round's keyed / append, and their median.
        ratios = [k / a for k, a in zip(per_round[(path, "keyed")], per_round[(path, "append")])]
        means = {kind: {k: statistics.mean([b[k] for b in phases[(path, kind)]] or [float("nan")])
                        for k in PHASES} for kind in ("append", "keyed")}
        result[path] = {"append_mean_ms": append, "keyed_mean_ms": keyed_ms, "keyed_vs_append": keyed_ms / append,
                        "phases_mean_ms": means, "round_ratios": ratios, "median_round_ratio": statistics.median(ratios),
                        "batches": {kind: len(durations[(path, kind)]) for kind in ("append", "keyed")}}
        print(f"  {path:<16} append {append:7.0f} ms   keyed {keyed_ms:7.0f} ms   keyed / append "
              f"{keyed_ms / append:5.2f}x   (target <= 1.2x); by round "
              f"{' '.join(f'{r:.2f}' for r in ratios)}, median {statistics.median(ratios):.2f}x")
        print("  " + " " * 16 + "   ".join(f"{k} {means['append'][k]:.0f} -> {means['keyed'][k]:.0f} ms"
                                           for k in PHASES))
    return result
