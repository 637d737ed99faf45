"""Streaming: rate source at 20,000 rows/s, 1-second trigger, each sink for `seconds`.

Side by side in one run: Spark's own Parquet file sink, lakesink's fast path
and `writeStream.format("paimon")`, each with sync and pipelined commits. Figures: mean
micro-batch duration (Spark's triggerExecution) and its ratio to the Parquet
sink, plus the sink's commit time per batch (p50, p99) where lakesink reports it.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

import lakesink


def _percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _run_query(start, seconds: float):
    query = start()
    time.sleep(seconds)
    query.stop()
    if query.exception() is not None:  # a failed query would leave its figures out silently
        raise RuntimeError(f"benchmark query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
    durations = [p["durationMs"]["triggerExecution"] for p in progress]
    return query, durations


def run(spark, seconds: float = 60, rows_per_second: int = 20_000) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-stream-")
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "1000")

    def source():
        return (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second)
                .option("numPartitions", 2).load()
                .selectExpr("value as id", "timestamp as ts", "cast(value % 100 as int) as k"))

    results = {}
    sinks = {
        "spark parquet sink": lambda: source().writeStream.format("parquet")
        .option("checkpointLocation", f"{root}/chk-pq").trigger(processingTime="1 second").start(f"{root}/pq"),
        "lakesink.stream sync": lambda: lakesink.stream(source(), f"{root}/wh/db.db/fast_sync",
                                                         checkpoint=f"{root}/chk-fs", trigger="1 second"),
        "lakesink.stream pipelined": lambda: lakesink.stream(source(), f"{root}/wh/db.db/fast_pipe",
                                                              checkpoint=f"{root}/chk-fp", trigger="1 second",
                                                              commit_mode="pipelined"),
        "format(paimon) sync": lambda: source().writeStream.format("paimon")
        .option("checkpointLocation", f"{root}/chk-n").trigger(processingTime="1 second")
        .start(f"{root}/wh/db.db/native"),
        "format(paimon) pipelined": lambda: source().writeStream.format("paimon")
        .option("checkpointLocation", f"{root}/chk-np").option("commit.mode", "pipelined")
        .trigger(processingTime="1 second").start(f"{root}/wh/db.db/native_pipe"),
    }
    try:
        for name, start in sinks.items():
            query, durations = _run_query(start, seconds)
            commit_ms = []
            if name.startswith("format(paimon)"):
                pipelined = name.endswith("pipelined")
                if pipelined:
                    lakesink.await_commits(f"{root}/chk-np")
                # Its commits run outside this process: take the durations the snapshots record.
                table_dir = f"{root}/wh/db.db/{'native_pipe' if pipelined else 'native'}"
                history = lakesink.history(table_dir).to_pydict()
                commit_ms = [d for d in history["commit_duration_ms"] if d is not None]
            handler = getattr(query, "lakesink_sink", None)
            if handler is not None:
                if handler.pipeline is not None:
                    handler.pipeline.close()
                commit_ms = [r.duration_ms for r in handler.reports if not r.skipped_replay]
            results[name] = {
                "batches": len(durations),
                "mean_batch_ms": statistics.mean(durations) if durations else float("nan"),
                "commit_p50_ms": _percentile(commit_ms, 0.5),
                "commit_p99_ms": _percentile(commit_ms, 0.99),
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = results["spark parquet sink"]["mean_batch_ms"]
    print(f"\nstreaming, rate {rows_per_second:,} rows/s, 1 s trigger, {seconds:.0f} s per sink")
    print(f"  {'sink':<28}{'batches':>8}{'mean batch ms':>15}{'vs parquet':>12}{'commit p50':>12}{'p99':>9}")
    for name, r in results.items():
        r["vs_parquet"] = r["mean_batch_ms"] / base
        print(f"  {name:<28}{r['batches']:>8}{r['mean_batch_ms']:>15.0f}{r['vs_parquet']:>11.2f}x"
              f"{r['commit_p50_ms']:>12.1f}{r['commit_p99_ms']:>9.1f}")
    print("  target: fast path <= 1.15x the Parquet sink (format(paimon) commit time: publication only, from history)")
    return results
