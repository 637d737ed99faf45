"""What one Spark task does: its Arrow batches into a staging table of its own, in one transaction.

The staging table is named from the job token, the partition and the attempt
number, and registered (name, job, time) in the same transaction, so the
committer and `clean_staging` can find attempts that Spark never reports.
PostgreSQL: an UNLOGGED table filled by `COPY ... (FORMAT csv)`; SQLite:
`executemany` in chunks of `batchsize` rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ..protocol import crashpoints
from .target import StagedRows, staging_name
from .types import postgres_csv, sql_type, sqlite_rows


def staging_table_name(token: str, partition: int, attempt: int) -> str:
    return f"stg_{token}_p{partition}_a{attempt}"


def stage(job, batches: Iterable, partition: int, attempt: int, token: str) -> StagedRows:
    db = job.db
    batches = iter(batches)
    first = next((b for b in batches if b.num_rows), None)
    if first is None:  # an empty partition: nothing to stage, nothing to commit
        return StagedRows("", token, 0, partition, attempt)
    name = staging_table_name(token, partition, attempt)
    table = staging_name(db, name).sql
    columns = ", ".join(f"c{i} {sql_type(c, db.dialect)}" for i, c in enumerate(job.columns))
    registry = db.meta_table("staging").sql
    p = db.param
    rows = 0
    conn = db.connect()
    try:
        with db.transaction(conn) as cur:
            # A same-named table is a dead attempt's (a restarted query reuses its batch's token).
            cur.execute(f"DROP TABLE IF EXISTS {table}")
            unlogged = "UNLOGGED " if db.dialect == "postgres" else ""
            cur.execute(f"CREATE {unlogged}TABLE {table} ({columns})")
            cur.execute(f"DELETE FROM {registry} WHERE name = {p}", (name,))
            cur.execute(f"INSERT INTO {registry} (name, job, created_at) VALUES ({p}, {p}, {p})",
                        (name, token, time.time()))
            if db.dialect == "postgres":
                with cur.copy(f"COPY {table} FROM STDIN (FORMAT csv)") as copy:
                    for batch in _chunks(first, batches, job.batch_size):
                        copy.write(postgres_csv(batch, job.columns))
                        rows += batch.num_rows
            else:
                insert = f"INSERT INTO {table} VALUES ({', '.join([p] * len(job.columns))})"
                for batch in _chunks(first, batches, job.batch_size):
                    cur.executemany(insert, sqlite_rows(batch, job.columns))
                    rows += batch.num_rows
    finally:
        conn.close()
    crashpoints.reached("task-staged")  # the staging table is durable; the attempt may still die
    return StagedRows(name, token, rows, partition, attempt)


def _chunks(first, rest, size: int):
    for batch in _chain(first, rest):
        for offset in range(0, batch.num_rows, size):
            yield batch.slice(offset, size)


def _chain(first, rest):
    yield first
    yield from rest

