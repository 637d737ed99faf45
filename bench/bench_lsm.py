"""Keyed CDC stream, compaction on vs off: sorted runs per bucket, files, full-scan time, batch time.

`batches` micro-batches of upserts (a tenth of them deletes) over `keys` keys into an 8-bucket
primary-key table, written by `lakesink.stream` (availableNow over a directory of Parquet files,
one file per micro-batch, `maxFilesPerTrigger=1`). The same batches go into two tables side by
side: one with lakesink's automatic compaction (Paimon's default trigger, 5 sorted runs), one
with `write-only=true` (no compaction). The stream runs in stages on one checkpoint per table
(the variant that runs first alternates; the JVM is warmed up first); after each stage
(`checkpoints`, counted in batches): sorted runs per bucket (mean, max), live files, and a full
merged scan with pypaimon (median of `scan_repeats`). Over the whole run: per micro-batch time
(Spark's triggerExecution, mean and p99) of both, and the time of the compaction round each
micro-batch runs inline after its commit (mean, p99, max).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time

import lakesink

BUCKETS = 8


def _write_batches(directory: str, first: int, last: int, rows: int, keys: int, seed: int = 11) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for b in range(first, last):
        rng = random.Random(seed * 1_000_003 + b)
        ids = rng.sample(range(keys), rows)
        ops = ["-D" if rng.random() < 0.1 else "+U" for _ in ids]
        path = f"{directory}/part-{b:05d}.parquet"
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"b{b}-{i}" for i in ids],
                                 "amount": pa.array([i * 0.5 + b for i in ids]), "op": ops}), path)
        os.utime(path, (1_000_000 + b, 1_000_000 + b))  # Spark's file order: modification time


def _stage(spark, source: str, path: str, checkpoint: str, options: dict) -> tuple[list[float], list[float]]:
    """Run the stream until it caught up with `source`: the triggerExecution ms of its batches,
    and the ms of each batch's compaction round (0 where none ran)."""
    df = (spark.readStream.schema("id long, v string, amount double, op string")
          .option("maxFilesPerTrigger", 1).parquet(source))
    query = lakesink.stream(df, path, checkpoint=checkpoint, trigger="availableNow", options=options)
    durations: dict[int, float] = {}
    while query.isActive:
        for p in query.recentProgress:
            if p.numInputRows:
                durations[p.batchId] = p.durationMs.get("triggerExecution", 0)
        time.sleep(0.5)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(query.exception())
    for p in query.recentProgress:
        if p.numInputRows:
            durations[p.batchId] = p.durationMs.get("triggerExecution", 0)
    rounds = [getattr(r.extra.get("aggregation"), "duration_ms", 0.0) for r in query.lakesink_sink.reports]
    return list(durations.values()), rounds


def _shape(path: str) -> dict:
    from lakesink.paimon.compaction.target import live_files
    from lakesink.paimon.table.tables import open_table

    levels: dict = {}
    files = live_files(open_table(path))
    for f in files:
        levels.setdefault((f.partition, f.bucket), []).append(f.meta.level)
    runs = [ls.count(0) + len(set(ls) - {0}) for ls in levels.values()]
    return {"runs_mean": statistics.mean(runs), "runs_max": max(runs), "files": len(files)}


def _scan(path: str, repeats: int) -> tuple[float, int]:
    from pypaimon.table.file_store_table import FileStoreTable

    times, rows = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        table = FileStoreTable.from_path(path)
        builder = table.new_read_builder()
        rows = builder.new_read().to_arrow(builder.new_scan().plan().splits()).num_rows
        times.append(time.perf_counter() - start)
    return statistics.median(times), rows


def run(spark, batches: int = 200, rows: int = 2_000, keys: int = 100_000,
        checkpoints: tuple = (50, 100, 200), scan_repeats: int = 3, stage_batches: int = 25) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-lsm-")
    source = f"{root}/source"
    os.makedirs(source)
    variants = {"compaction on": {}, "compaction off": {"write-only": "true"}}
    base = {"primary-key": "id", "bucket": str(BUCKETS), "rowkind.field": "op"}
    # Stages of at most `stage_batches`, the variants alternating who runs first: the machine's
    # load drifts, and this spreads it over both.
    stages = sorted({c for c in checkpoints if c < batches} | {batches}
                    | set(range(stage_batches, batches, stage_batches)))
    result: dict = {"batches": batches, "rows_per_batch": rows, "keys": keys, "stages": {}}
    durations: dict[str, list[float]] = {name: [] for name in variants}
    rounds: list[float] = []
    try:
        # Warm up the JVM and Python workers on a throwaway table (the first batches are slow).
        warm = f"{root}/warm"
        os.makedirs(warm)
        _write_batches(warm, 0, 3, rows, keys)
        _stage(spark, warm, f"{root}/wh/db.db/warm", f"{root}/chk-warm", base)
        done = 0
        for number, stage in enumerate(stages):
            _write_batches(source, done, stage, rows, keys)
            done = stage
            row = {}
            order = list(variants) if number % 2 == 0 else list(reversed(variants))  # alternate who runs first
            for name in order:
                slug = name.replace(" ", "_")
                path, chk = f"{root}/wh/db.db/{slug}", f"{root}/chk-{slug}"
                batch_ms, round_ms = _stage(spark, source, path, chk, {**base, **variants[name]})
                durations[name] += batch_ms
                if name == "compaction on":
                    rounds += round_ms
            if stage not in checkpoints and stage != batches:
                continue
            for name in variants:
                path = f"{root}/wh/db.db/{name.replace(' ', '_')}"
                scan_s, scan_rows = _scan(path, scan_repeats)
                row[name] = {**_shape(path), "scan_s": scan_s, "rows": scan_rows}
            assert row["compaction on"]["rows"] == row["compaction off"]["rows"]
            result["stages"][stage] = row
            print(f"\nafter {stage} micro-batches ({rows:,} upserts each over {keys:,} keys, {BUCKETS} buckets)")
            for name, r in row.items():
                print(f"  {name:<15} runs/bucket mean {r['runs_mean']:6.1f} max {r['runs_max']:4d}   "
                      f"files {r['files']:5d}   full scan {r['scan_s']:6.2f} s ({r['rows']:,} rows)")
        for name, values in durations.items():
            ordered = sorted(values)
            p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
            result[name] = {"batch_ms_mean": statistics.mean(values), "batch_ms_p99": p99, "batches": len(values)}
        ordered = sorted(rounds)
        result["compaction_round_ms"] = {"mean": statistics.mean(rounds), "p99": ordered[min(len(ordered) - 1,
                                         int(0.99 * len(ordered)))], "max": ordered[-1],
                                         "batches": len(rounds)}
        on, off = result["compaction on"], result["compaction off"]
        measured = sorted(result["stages"])
        first, last = result["stages"][measured[0]], result["stages"][measured[-1]]
        result["on_scan_last_over_first"] = last["compaction on"]["scan_s"] / first["compaction on"]["scan_s"]
        result["on_runs_last_over_first"] = last["compaction on"]["runs_mean"] / first["compaction on"]["runs_mean"]
        print(f"\n  micro-batch ms (mean / p99): compaction on {on['batch_ms_mean']:.0f} / {on['batch_ms_p99']:.0f}, "
              f"off {off['batch_ms_mean']:.0f} / {off['batch_ms_p99']:.0f}  "
              f"(overhead of compaction: {on['batch_ms_mean'] - off['batch_ms_mean']:+.0f} ms mean)")
        r = result["compaction_round_ms"]
        print(f"  compaction round after each micro-batch (inline, compaction on): mean {r['mean']:.0f} ms, "
              f"p99 {r['p99']:.0f} ms, max {r['max']:.0f} ms")
        print(f"  compaction on, last / first stage: scan {result['on_scan_last_over_first']:.2f}x, "
              f"runs per bucket {result['on_runs_last_over_first']:.2f}x (target <= 1.5x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return result
