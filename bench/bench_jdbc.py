"""JDBC sink: 1M rows into PostgreSQL vs psycopg COPY from one process, and commit cost per micro-batch.

* Floor: the same rows (already in Arrow, outside the timing) sent by one
  process with psycopg `COPY ... (FORMAT csv)` into a fresh table in one
  transaction: what a single-process loader pays.
* `lakesink.jdbc.write` and `format("lakesink-jdbc")`: Spark tasks COPY into
  UNLOGGED staging tables, the driver moves them into the target in one
  transaction (INSERT ... SELECT, progress row, drop staging).
* Spark's own JDBC writer is not measured: it needs the PostgreSQL JDBC driver
  jar, which this environment does not have (no Maven access).
* Streaming: `lakesink.jdbc.stream` over `batches` micro-batches of 2,000 rows;
  commit ms per batch (p50/p99) and the mean micro-batch vs a plain
  `foreachBatch` that COPYs each batch straight into the table (no exactly-once).

Runs are interleaved; each figure is a median.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
import uuid

import lakesink

URL = os.environ.get("LAKESINK_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _frame(spark, rows: int):
    return spark.range(rows, numPartitions=2).selectExpr(
        "id", "cast(id % 1000 as int) as customer", "cast(id * 7 % 100000 as decimal(12,2)) as amount",
        "concat('order-', cast(id as string)) as note", "cast(id as double) / 3 as score",
        "timestamp'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 86400) as ts")


def _copy_floor(table, columns, name: str) -> None:
    import psycopg

    from lakesink.jdbc.db import quote
    from lakesink.jdbc.types import postgres_csv, sql_type

    with psycopg.connect(URL) as conn, conn.cursor() as cur:  # one transaction
        defs = ", ".join(f"{quote(c.name)} {sql_type(c, 'postgres')}" for c in columns)
        cur.execute(f"CREATE TABLE {name} ({defs})")
        with cur.copy(f"COPY {name} FROM STDIN (FORMAT csv)") as copy:
            for batch in table.to_batches(max_chunksize=10_000):
                copy.write(postgres_csv(batch, columns))


def run(spark, rows: int = 1_000_000, repeats: int = 3, batches: int = 40) -> dict:
    import psycopg

    from lakesink.jdbc.types import columns_of

    try:
        psycopg.connect(URL, connect_timeout=3).close()
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the other suites still run
        print(f"[jdbc] skipped: no PostgreSQL at {URL} ({exc})")
        return {"skipped": str(exc)}
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(URL, autocommit=True)
    admin.execute(f"CREATE SCHEMA {schema}")
    options = {"staging.schema": f"{schema}_lk"}
    df = _frame(spark, rows).cache()
    df.count()
    arrow = df.toArrow()
    columns = columns_of(df.schema)
    times: dict[str, list[float]] = {"psycopg COPY (1 process)": [], "lakesink.jdbc.write": [],
                                     "format(lakesink-jdbc)": []}

    def timed(label, fn):
        start = time.perf_counter()
        fn()
        times[label].append(time.perf_counter() - start)

    try:
        for i in range(repeats + 1):  # round 0 warms up the JVM and Python workers
            timed("psycopg COPY (1 process)", lambda: _copy_floor(arrow, columns, f"{schema}.floor{i}"))
            timed("lakesink.jdbc.write", lambda: lakesink.jdbc.write(df, URL, f"{schema}.fast{i}", options=options))
            timed("format(lakesink-jdbc)", lambda: df.write.format("lakesink-jdbc").option("url", URL)
                  .option("dbtable", f"{schema}.native{i}").option("staging.schema", f"{schema}_lk")
                  .mode("append").save())
            for name in ("floor", "fast", "native"):
                admin.execute(f"DROP TABLE IF EXISTS {schema}.{name}{i}")
        stream = _stream(spark, schema, options, batches)
    finally:
        df.unpersist()
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.execute(f"DROP SCHEMA IF EXISTS {schema}_lk CASCADE")
        admin.close()
    med = {k: statistics.median(v[1:] if len(v) > 1 else v) for k, v in times.items()}
    floor = med["psycopg COPY (1 process)"]
    result = {"rows": rows, "repeats": repeats, "median_s": med,
              "write_vs_copy": med["lakesink.jdbc.write"] / floor,
              "format_vs_copy": med["format(lakesink-jdbc)"] / floor, "stream": stream}
    print(f"\nJDBC batch write into PostgreSQL, {rows:,} rows, median of {repeats} interleaved runs")
    for name, seconds in med.items():
        print(f"  {name:<26} {seconds:7.2f} s   {seconds / floor:5.2f}x COPY")
    print("  Spark's JDBC writer: not measured (needs the PostgreSQL JDBC driver jar, not available here)")
    print(f"\nJDBC streaming, {batches} micro-batches of 2,000 rows")
    print(f"  commit per micro-batch      p50 {stream['commit_ms_p50']:.1f} ms, p99 {stream['commit_ms_p99']:.1f} ms")
    print(f"  mean micro-batch            lakesink.jdbc.stream {stream['batch_ms_lakesink']:.0f} ms, "
          f"plain foreachBatch COPY {stream['batch_ms_plain']:.0f} ms ({stream['batch_ratio']:.2f}x)")
    return result


def _stream(spark, schema: str, options: dict, batches: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tempfile.mkdtemp(prefix="lakesink-bench-jdbc-")
    try:
        for k in range(batches):
            ids = list(range(k * 2000, (k + 1) * 2000))
            path = f"{root}/src/part-{k:05d}.parquet"
            os.makedirs(f"{root}/src", exist_ok=True)
            pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "note": [f"n{i}" for i in ids]}), path)
            os.utime(path, (1_000_000 + k, 1_000_000 + k))

        def source():
            return spark.readStream.schema("id long, note string").option("maxFilesPerTrigger", 1).parquet(f"{root}/src")

        query = lakesink.jdbc.stream(source(), URL, f"{schema}.events", checkpoint=f"{root}/chk1",
                                     trigger="availableNow", options=options)
        query.awaitTermination()
        commits = sorted(r.duration_ms for r in query.lakesink_sink.reports)
        ours = _batch_ms(query)
        query = (source().writeStream.foreachBatch(_plain_copy(schema)).option("checkpointLocation", f"{root}/chk2")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        plain = _batch_ms(query)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"batches": batches, "commit_ms_p50": statistics.median(commits),
            "commit_ms_p99": commits[min(len(commits) - 1, int(len(commits) * 0.99))],
            "batch_ms_lakesink": ours, "batch_ms_plain": plain, "batch_ratio": ours / plain}


def _batch_ms(query) -> float:
    durations = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]]
    return statistics.mean(durations[1:] if len(durations) > 1 else durations)  # first batch: worker start-up


def _plain_copy(schema: str):
    def write(batch_df, batch_id):
        import psycopg

        from lakesink.jdbc.types import columns_of, postgres_csv

        columns = columns_of(batch_df.schema)

        def task(batches):
            with psycopg.connect(URL) as conn, conn.cursor() as cur:
                cur.execute(f"CREATE TABLE IF NOT EXISTS {schema}.plain (id bigint, note text)")
                with cur.copy(f"COPY {schema}.plain FROM STDIN (FORMAT csv)") as copy:
                    for b in batches:
                        copy.write(postgres_csv(b, columns))
            yield from ()

        batch_df.mapInArrow(task, batch_df.schema).collect()
    return write
