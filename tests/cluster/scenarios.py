"""What the cluster driver runs for the tests (`tests.cluster.driver`): each a function of the session.

Results are plain JSON. The rows are made by Spark from a range of ids, so the
tests know them without shipping data: `expected_rows(start, stop)`. Functions
that run in Spark tasks are defined inside the scenarios (Spark ships them by
value): the executors import lakesink and nothing of the tests.
"""

from __future__ import annotations

COLUMNS = ("id", "name", "grp")


def expected_rows(start: int, stop: int) -> list[tuple]:
    return [(i, f"row-{i}", i % 3) for i in range(start, stop)]


def rows(spark, start: int, stop: int, partitions: int = 2, delay_ms: int = 0):
    """ids start..stop-1 with a name and a group; `delay_ms` makes Spark's JVM take that long per row."""
    df = spark.range(start, stop, 1, partitions)
    if not delay_ms:
        return df.selectExpr("id", "concat('row-', id) as name", "cast(id % 3 as int) as grp")
    # Slow in the JVM, not in Python: the writer's own tasks are what a kill hits. The name
    # uses the pause's (empty) result, so the optimiser cannot drop the sleeping column.
    df = df.selectExpr("id", f"reflect('java.lang.Thread', 'sleep', cast({int(delay_ms)} as bigint)) as pause")
    return df.selectExpr("id", "concat('row-', id, coalesce(substring(pause, 1, 0), '')) as name",
                         "cast(id % 3 as int) as grp")


def _native_writer(df, mode: str, partition_by, options):
    writer = df.write.format("paimon").mode(mode)
    if partition_by:
        writer = writer.option("partition", ",".join(partition_by))
    return writer.options(**(options or {}))


def _report(report) -> dict | None:
    if report is None:
        return None
    return {"snapshot_id": report.snapshot_id, "rows_added": report.rows_added,
            "files_added": getattr(report, "files_added", None), "skipped_replay": report.skipped_replay}


def write(spark, path: str, via: str, start: int, stop: int, partitions: int = 2, mode: str = "append",
          partition_by: list | None = None, options: dict | None = None, delay_ms: int = 0,
          batch_rows: int | None = None):
    """One batch write on the fast path (`lakesink.write`) or the Spark-native one (`format("paimon")`).

    `batch_rows`: rows per Arrow batch handed to Python (small: a native task writes as it goes)."""
    import lakesink

    df = rows(spark, start, stop, partitions, delay_ms)
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    if batch_rows:
        spark.conf.set(key, str(batch_rows))
    try:
        if via == "fast":
            return _report(lakesink.write(df, path, mode, partition_by=partition_by, options=options))
        _native_writer(df, mode, partition_by, options).save(path)
        return None
    finally:
        if batch_rows:
            spark.conf.unset(key)


def create_table_as(spark, path: str, via: str, start: int, stop: int, partition_by: list | None = None,
                    options: dict | None = None):
    import lakesink

    return _report(lakesink.create_table_as(rows(spark, start, stop), path, partition_by=partition_by,
                                            options=options, via=via))


def compact(spark, path: str, options: dict | None = None, target_size: str | None = None):
    import lakesink

    report = lakesink.compact(spark, path, target_size=target_size, progress=False, options=options)
    return _report(report)


def read(spark, path: str, how: str, filter: str | None = None, options: dict | None = None,
         pushdown: bool = False):
    """Rows of a read through `lakesink.read` or `spark.read.format("paimon")` (`pushdown`: with
    Spark's filters pushed into it), with what it read: the Spark partitions of the scan (one per
    pypaimon split) and the files Spark's own Parquet reader was given."""
    import lakesink

    key = "spark.sql.python.filterPushdown.enabled"
    if how == "lakesink":
        df = lakesink.read(spark, path, filter=filter, options=options)
    else:
        reader = spark.read.format("paimon").options(**(options or {}))
        if pushdown:
            spark.conf.set(key, "true")
            reader = reader.option("filter-pushdown", "true")
        df = reader.load(path)
        if filter:
            df = df.where(filter)
    try:
        got = sorted(tuple(r) for r in df.select(*COLUMNS).collect())
        return {"rows": got, "partitions": df.rdd.getNumPartitions(), "input_files": len(df.inputFiles())}
    finally:
        if pushdown:
            spark.conf.unset(key)


def executors(spark, tasks: int = 8):
    """Who runs the tasks: pid, working directory, interpreter and credential variables of each."""

    def describe(_):
        import os
        import sys

        import lakesink
        yield {"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "python": sys.executable,
               "lakesink": lakesink.__file__,
               "aws": sorted(k for k in os.environ if k.startswith("AWS_") and ("KEY" in k or "TOKEN" in k))}

    import time

    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # the driver's entry counts too
    deadline = time.monotonic() + 120
    while status().size() - 1 < 2 and time.monotonic() < deadline:  # e.g. a killed one's replacement
        time.sleep(0.5)
    seen = spark.sparkContext.parallelize(range(tasks), tasks).mapPartitions(describe).collect()
    return {"tasks": seen, "executors": status().size() - 1}
