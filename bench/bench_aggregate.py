"""Small files: micro-batches and repeated batch jobs into day-partitioned tables, aggregator off vs on.

Scenario 1, streaming: 1,000 micro-batches, side by side.

Each micro-batch is what 4 writer tasks × 1,000 rows leave behind: 4 small
Parquet files in the batch's staging directory. The Spark part of a streaming
query (planning, tasks, its commit log) is the same with or without the
aggregator, so it is left out: the benchmark writes the files with pyarrow and
drives lakesink's real streaming commit core (`StreamSink.commit_batch`), once
per table, interleaved batch by batch so machine noise hits both alike.

Reported: live files ÷ ideal (table bytes ÷ target-file-size; target ≤ 1.5
with the aggregator on), full-scan time with pypaimon (off ÷ on), and the
per-batch commit time with and without aggregation (the overhead).

Scenario 2, repeated batch jobs (issue #19's case): 200 small `lakesink.write`
jobs, each what 4 writer tasks leave in 2 day partitions (8 files), into a
table with `target-file-size` 512 KB, aggregator off vs on. The jobs run
lakesink's real batch commit (`BatchWrite.commit`, with its aggregation round)
on files written by pyarrow. Reported: live files ÷ ideal, where ideal is what
the table's bytes need, partition by partition (Σ ⌈partition bytes ÷ target⌉;
target ≤ 1.5 with the aggregator on), and the time per job.
"""

from __future__ import annotations

import datetime as dt
import shutil
import statistics
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us")), ("day", pa.date32()),
                    ("customer", pa.int32()), ("amount", pa.float64()), ("note", pa.string())])
TASKS, ROWS = 4, 1000
BATCHES_PER_DAY = 100
TARGET = "4mb"


def _task_rows(batch: int, task: int) -> pa.Table:
    first = (batch * TASKS + task) * ROWS
    ids = pa.array(range(first, first + ROWS), pa.int64())
    day = dt.date(2026, 1, 1) + dt.timedelta(days=batch // BATCHES_PER_DAY)
    start = dt.datetime.combine(day, dt.time()) + dt.timedelta(seconds=(batch % BATCHES_PER_DAY) * 864)
    return pa.table({"id": ids, "ts": [start + dt.timedelta(milliseconds=i) for i in range(ROWS)],
                     "day": pa.array([day] * ROWS, pa.date32()),
                     "customer": pa.array([(first + i) % 5000 for i in range(ROWS)], pa.int32()),
                     "amount": [((first + i) * 7 % 10000) / 100 for i in range(ROWS)],
                     "note": [f"order-{first + i}" for i in range(ROWS)]}, schema=SCHEMA)


def _sink(root: str, name: str, aggregate: bool):
    from lakesink.options import WriteOptions
    from lakesink.paimon.write.stream import StreamSink
    options = WriteOptions.parse({"partition": "day", "target-file-size": TARGET, "maintenance.enabled": "false",
                                  "aggregator.enabled": str(aggregate).lower(), "commit.user": f"bench-{name}"})
    sink = StreamSink(f"{root}/wh/db.db/{name}", f"{root}/chk-{name}", SCHEMA, options, "bench")
    sink.bind()
    return sink


def _commit(sink, batch: int, data: list[pa.Table]) -> float:
    from lakesink.paimon.write.batch import describe_files
    staging = sink.staging_dir(batch)
    sink.target.file_io.check_or_mkdirs(staging)
    paths = []
    for task, rows in enumerate(data):
        path = f"{staging}/part-{task}.parquet"
        pq.write_table(rows, path)
        paths.append(path)
    files = describe_files(paths, sink.layout, sink.target.file_io)
    started = time.perf_counter()
    sink.commit_batch(batch, files)
    return time.perf_counter() - started


def _scan_seconds(path: str, repeats: int = 3) -> float:
    from pypaimon.table.file_store_table import FileStoreTable
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        table = FileStoreTable.from_path(path)
        builder = table.new_read_builder()
        rows = builder.new_read().to_arrow(builder.new_scan().plan().splits()).num_rows
        times.append(time.perf_counter() - started)
    return statistics.median(times), rows


def _files(path: str):
    from lakesink.paimon.compaction.target import live_files
    from lakesink.paimon.compaction.append_aggregator import target_file_size
    from lakesink.paimon.table.tables import open_table
    table = open_table(path)
    files = live_files(table)
    return len(files), sum(f.file_size for f in files), target_file_size(table)


JOB_TASKS, JOB_DAYS, JOB_ROWS = 4, 2, 1000   # per job: 4 tasks x 2 day partitions, 1,000 rows per file
JOB_TARGET = "512kb"


def _job_files(job: int, staging: str) -> list[str]:
    paths = []
    for task in range(JOB_TASKS):
        for day in range(JOB_DAYS):
            rows = _task_rows(job * JOB_TASKS * JOB_DAYS + task * JOB_DAYS + day, 0)
            rows = rows.set_column(2, "day", pa.array([dt.date(2026, 1, 1 + day)] * rows.num_rows, pa.date32()))
            path = f"{staging}/part-{task}-{day}.parquet"
            pq.write_table(rows.slice(0, JOB_ROWS), path)
            paths.append(path)
    return paths


def _batch_job(path: str, job: int, aggregate: bool) -> float:
    from lakesink.options import WriteOptions
    from lakesink.paimon.write.batch import BatchWrite
    options = WriteOptions.parse({"partition": "day", "target-file-size": JOB_TARGET,
                                  "maintenance.enabled": "false", "aggregator.enabled": str(aggregate).lower()})
    started = time.perf_counter()
    write = BatchWrite.plan(path, SCHEMA, options, "append", "bench", "static")
    write.target.file_io.check_or_mkdirs(write.staging_dir)
    files = write.describe_staged(_job_files(job, write.staging_dir))
    report = write.commit(files)
    if "aggregation_error" in report.extra:
        raise RuntimeError(report.extra["aggregation_error"])
    return time.perf_counter() - started


def _ideal_files(path: str) -> tuple[int, int, int]:
    """(live files, ideal files: Σ per partition ⌈bytes ÷ target⌉, table bytes)."""
    import math
    from lakesink.paimon.compaction.target import live_files
    from lakesink.paimon.compaction.append_aggregator import target_file_size
    from lakesink.paimon.table.tables import open_table
    table = open_table(path)
    per_partition: dict = {}
    files = live_files(table)
    for f in files:
        per_partition[f.partition] = per_partition.get(f.partition, 0) + f.file_size
    target = target_file_size(table)
    return len(files), sum(math.ceil(b / target) for b in per_partition.values()), sum(per_partition.values())


def run_jobs(jobs: int = 200) -> dict:
    """Scenario 2: repeated small batch jobs, aggregator off vs on, interleaved job by job."""
    root = tempfile.mkdtemp(prefix="lakesink-bench-jobs-")
    try:
        paths = {name: f"{root}/wh/db.db/jobs_{name}" for name in ("off", "on")}
        seconds: dict[str, list[float]] = {"off": [], "on": []}
        for job in range(jobs):
            for name in (("off", "on") if job % 2 == 0 else ("on", "off")):
                seconds[name].append(_batch_job(paths[name], job, name == "on"))
        result = {"jobs": jobs, "files_per_job": JOB_TASKS * JOB_DAYS, "rows_per_file": JOB_ROWS,
                  "target_file_size": JOB_TARGET}
        for name, path in paths.items():
            count, ideal, size = _ideal_files(path)
            scan, rows = _scan_seconds(path, repeats=1)
            assert rows == jobs * JOB_TASKS * JOB_DAYS * JOB_ROWS, f"{name}: {rows} rows"
            result[name] = {"live_files": count, "ideal_files": ideal, "table_bytes": size,
                            "files_vs_ideal": count / ideal, "scan_s": scan,
                            "job_ms_median": statistics.median(seconds[name]) * 1000}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    off, on = result["off"], result["on"]
    print(f"\nrepeated batch jobs: {jobs} jobs x {JOB_TASKS} tasks x {JOB_DAYS} day partitions, "
          f"{JOB_ROWS} rows per file, target-file-size {JOB_TARGET}")
    print(f"  {'':<24}{'aggregator off':>16}{'aggregator on':>16}")
    for label, key, fmt in (("live files", "live_files", "{:>16,}"), ("ideal files", "ideal_files", "{:>16,}"),
                            ("live / ideal", "files_vs_ideal", "{:>16.2f}"), ("full scan s", "scan_s", "{:>16.3f}"),
                            ("job ms (median)", "job_ms_median", "{:>16.1f}")):
        print(f"  {label:<24}" + fmt.format(off[key]) + fmt.format(on[key]))
    print(f"  live / ideal with aggregator {on['files_vs_ideal']:.2f}   (target <= 1.5)")
    return result


def run(batches: int = 1000, jobs: int = 200) -> dict:
    """Both scenarios; `jobs=0` or `batches=0` leaves one out."""
    result = {}
    if batches:
        result["stream"] = run_stream(batches)
    if jobs:
        result["batch_jobs"] = run_jobs(jobs)
    return result


def run_stream(batches: int = 1000) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-aggregate-")
    try:
        sinks = {"off": _sink(root, "off", False), "on": _sink(root, "on", True)}
        commit_s: dict[str, list[float]] = {"off": [], "on": []}
        for batch in range(batches):
            data = [_task_rows(batch, t) for t in range(TASKS)]
            order = ("off", "on") if batch % 2 == 0 else ("on", "off")
            for name in order:
                commit_s[name].append(_commit(sinks[name], batch, data))
        result = {"batches": batches, "tasks": TASKS, "rows_per_task": ROWS, "target_file_size": TARGET}
        for name, sink in sinks.items():
            count, size, target = _files(sink.target.path)
            scan, rows = _scan_seconds(sink.target.path)
            assert rows == batches * TASKS * ROWS, f"{name}: {rows} rows"
            result[name] = {"live_files": count, "table_bytes": size, "ideal_files": size / target,
                            "files_vs_ideal": count / max(size / target, 1.0), "scan_s": scan,
                            "commit_ms_median": statistics.median(commit_s[name]) * 1000,
                            "commit_ms_mean": statistics.mean(commit_s[name]) * 1000}
        off, on = result["off"], result["on"]
        result["scan_off_vs_on"] = off["scan_s"] / on["scan_s"]
        result["overhead_ms_per_batch_mean"] = on["commit_ms_mean"] - off["commit_ms_mean"]
        result["overhead_ms_per_batch_median"] = on["commit_ms_median"] - off["commit_ms_median"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nsmall files: {batches} micro-batches x {TASKS} tasks x {ROWS} rows, day partitions, "
          f"target-file-size {TARGET}")
    print(f"  {'':<24}{'aggregator off':>16}{'aggregator on':>16}")
    for label, key, fmt in (("live files", "live_files", "{:>16,}"), ("ideal files", "ideal_files", "{:>16.1f}"),
                            ("live / ideal", "files_vs_ideal", "{:>16.2f}"), ("full scan s", "scan_s", "{:>16.3f}"),
                            ("commit ms (median)", "commit_ms_median", "{:>16.1f}"),
                            ("commit ms (mean)", "commit_ms_mean", "{:>16.1f}")):
        print(f"  {label:<24}" + fmt.format(off[key]) + fmt.format(on[key]))
    print(f"  full scan off / on       {result['scan_off_vs_on']:.2f}x")
    print(f"  aggregation overhead     {result['overhead_ms_per_batch_mean']:+.1f} ms per batch (mean), "
          f"{result['overhead_ms_per_batch_median']:+.1f} ms (median)")
    print(f"  live / ideal with aggregator {on['files_vs_ideal']:.2f}   (target <= 1.5)")
    return result


if __name__ == "__main__":
    run()
