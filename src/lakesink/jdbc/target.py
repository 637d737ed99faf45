"""A database table as a `protocol.CommitTarget`: staging tables in, one transaction out.

Committables are staging tables (`StagedRows`), one per successful task
attempt. A commit is one database transaction that

1. advances the commit user's row in lakesink's progress table to the
   identifier (only forwards: a row already at or past it ends the transaction
   with nothing written, which is how concurrent replays lose);
2. creates the target if it is missing, empties it for an overwrite;
3. copies each staging table into the target, checking the row count each
   attempt reported (an UNLOGGED staging table emptied by a server crash is
   caught here, never committed as "no rows");
4. drops the job's staging tables: the committed ones and any that failed or
   speculative attempts of the same job left behind.

So the rows, the progress row and the clean-up land together or not at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from ..errors import AlreadyCommittedError, CommitFailedError, DuplicateKeyError
from ..protocol import CommitReport, CommitTarget, Overwrite, crashpoints
from .db import Database, TableName, quote

log = logging.getLogger(__name__)

ANONYMOUS_PREFIX = "lakesink-anon-"
ANONYMOUS_KEEP_S = 86_400.0  # anonymous progress rows only answer "did my commit land?" right after it


@dataclass(frozen=True)
class StagedRows:
    """One task attempt's rows, in a staging table of their own."""

    table: str        # unqualified name; lives in the staging schema (PostgreSQL) or beside the target
    job: str          # the job / micro-batch token: every attempt of it shares this
    rows: int
    partition: int
    attempt: int


def ensure_metadata(db: Database, cur) -> None:
    """Create lakesink's progress and staging-registry tables if missing."""
    progress, staging = db.meta_table("progress").sql, db.meta_table("staging").sql
    if db.dialect == "postgres":
        # Serialise concurrent first writers: CREATE ... IF NOT EXISTS races on the catalog.
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('lakesink-metadata'))")
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(db.staging_schema)}")
        idtype, text, real = "bigint", "text", "double precision"
    else:
        idtype, text, real = "INTEGER", "TEXT", "REAL"
    cur.execute(f"CREATE TABLE IF NOT EXISTS {progress} (target {text} NOT NULL, commit_user {text} NOT NULL, "
                f"last_identifier {idtype} NOT NULL, committed_at {real} NOT NULL, row_count {idtype} NOT NULL, "
                "PRIMARY KEY (target, commit_user))")
    cur.execute(f"CREATE TABLE IF NOT EXISTS {staging} (name {text} PRIMARY KEY, job {text} NOT NULL, "
                f"created_at {real} NOT NULL)")


def staging_name(db: Database, name: str) -> TableName:
    """Where a registered staging table lives: the staging schema, or a `_lakesink_` prefix (SQLite)."""
    if db.dialect == "postgres":
        return TableName(db.staging_schema, name)
    return TableName(None, f"_lakesink_{name}")


def drop_staging(db: Database, cur, names: Iterable[str] = (), jobs: Iterable[str] = ()) -> int:
    """Drop staging tables by name and every one registered under `jobs`; forget them."""
    registry = db.meta_table("staging").sql
    p = db.param
    names = set(names)
    for job in set(jobs):
        cur.execute(f"SELECT name FROM {registry} WHERE job = {p}", (job,))
        names.update(r[0] for r in cur.fetchall())
    for name in sorted(names):
        cur.execute(f"DROP TABLE IF EXISTS {staging_name(db, name).sql}")
        cur.execute(f"DELETE FROM {registry} WHERE name = {p}", (name,))
    return len(names)


class JdbcTarget(CommitTarget[StagedRows]):
    def __init__(self, db: Database, table: TableName, staging_columns: Sequence[str],
                 target_columns: Sequence[str], create_sql: str | None = None,
                 mode: str = "append", key: Sequence[str] = ()):
        self.db = db
        self.table = table
        self.staging_columns = list(staging_columns)  # c0, c1, ... in the DataFrame's order
        self.target_columns = list(target_columns)    # the target's spelling of the same columns
        self.create_sql = create_sql                  # CREATE TABLE IF NOT EXISTS ..., for a missing target
        self.mode = mode
        self.key = list(key)
        self._conn = None

    # -- connection --------------------------------------------------------------------------
    def connection(self):
        if self._conn is None or getattr(self._conn, "closed", False) or getattr(self._conn, "broken", False):
            self._conn = self.db.connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _meta_exists(self, cur) -> bool:
        progress = self.db.meta_table("progress")
        if self.db.dialect == "postgres":
            cur.execute("SELECT to_regclass(%s) IS NOT NULL", (progress.sql,))
        else:
            cur.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (progress.name,))
        return bool(cur.fetchone()[0])

    # -- CommitTarget ------------------------------------------------------------------------
    def last_committed(self, commit_user: str) -> int | None:
        try:
            cur = self.connection().cursor()
            if not self._meta_exists(cur):
                return None
            p = self.db.param
            cur.execute(f"SELECT last_identifier FROM {self.db.meta_table('progress').sql} "
                        f"WHERE target = {p} AND commit_user = {p}", (self.describe(), commit_user))
            row = cur.fetchone()
            return None if row is None else int(row[0])
        except Exception:
            self.close()  # a broken connection must not be reused by the caller's next try
            raise

    def commit(self, commit_user: str, identifier: int, committables: Sequence[StagedRows],
               overwrite: Overwrite | None = None, properties: dict[str, str] | None = None) -> CommitReport:
        staged = sorted((c for c in committables if c.table), key=lambda c: (c.partition, c.attempt))
        expected = sum(c.rows for c in staged)
        conn = self.connection()
        db, p = self.db, self.db.param
        now = time.time()
        try:
            with db.transaction(conn) as cur:
                cur.execute(
                    f"INSERT INTO {db.meta_table('progress').sql} AS pr (target, commit_user, last_identifier, "
                    f"committed_at, row_count) VALUES ({p}, {p}, {p}, {p}, {p}) "
                    "ON CONFLICT (target, commit_user) DO UPDATE SET last_identifier = excluded.last_identifier, "
                    "committed_at = excluded.committed_at, row_count = excluded.row_count "
                    "WHERE pr.last_identifier < excluded.last_identifier RETURNING last_identifier",
                    (self.describe(), commit_user, identifier, now, expected))
                if cur.fetchone() is None:
                    raise AlreadyCommittedError(f"identifier {identifier} of {commit_user} is already in {self.table}")
                if self.create_sql:
                    cur.execute(self.create_sql)
                if overwrite is not None:
                    cur.execute(f"TRUNCATE {self.table.sql}" if db.dialect == "postgres"
                                else f"DELETE FROM {self.table.sql}")
                if self.mode == "upsert":
                    moved = self._upsert(cur, staged)
                else:
                    moved = self._append(cur, staged)
                if moved is not None and moved != expected:
                    raise CommitFailedError(
                        f"Staging tables of {self.table} hold {moved} rows, the tasks wrote {expected}: a staging "
                        "table lost rows (e.g. the server restarted). Nothing was committed; run the job again.")
                drop_staging(db, cur, [c.table for c in staged], {c.job for c in committables})
                if commit_user.startswith(ANONYMOUS_PREFIX):
                    cur.execute(f"DELETE FROM {db.meta_table('progress').sql} WHERE commit_user LIKE {p} "
                                f"AND committed_at < {p}", (ANONYMOUS_PREFIX + "%", now - ANONYMOUS_KEEP_S))
                xid = None
                if db.dialect == "postgres":
                    cur.execute("SELECT pg_current_xact_id()::text::bigint")
                    xid = cur.fetchone()[0]
                crashpoints.reached("before-snapshot")
        except Exception:
            if db.dialect == "postgres" and (conn.closed or conn.broken):
                self.close()
            raise
        crashpoints.reached("after-snapshot")
        kind = "OVERWRITE" if overwrite is not None else self.mode.upper()
        return CommitReport(commit_user, identifier, snapshot_id=xid if xid is not None else identifier,
                            commit_kind=kind, files_added=len(staged), rows_added=expected,
                            extra={"table": str(self.table)})

    def _append(self, cur, staged: Sequence[StagedRows]) -> int:
        into = ", ".join(quote(c) for c in self.target_columns)
        select = ", ".join(self.staging_columns)
        moved = 0
        for c in staged:
            cur.execute(f"INSERT INTO {self.table.sql} ({into}) SELECT {select} "
                        f"FROM {staging_name(self.db, c.table).sql}")
            moved += cur.rowcount
        return moved

    def _upsert(self, cur, staged: Sequence[StagedRows]) -> int | None:
        if not staged:
            return 0
        select = ", ".join(self.staging_columns)
        source = " UNION ALL ".join(f"SELECT {select} FROM {staging_name(self.db, c.table).sql}" for c in staged)
        by_name = dict(zip(self.target_columns, self.staging_columns))
        key_src = [by_name[k] for k in self.key]
        # One key twice would be applied in an arbitrary order (SQLite) or fail obscurely (PostgreSQL).
        cur.execute(f"SELECT {', '.join(key_src)}, count(*) FROM ({source}) s GROUP BY {', '.join(key_src)} "
                    "HAVING count(*) > 1 LIMIT 1")
        dup = cur.fetchone()
        if dup is not None:
            raise DuplicateKeyError(
                f"The rows to upsert into {self.table} hold key {dict(zip(self.key, dup[:-1]))} {dup[-1]} times: "
                "deduplicate them first (e.g. dropDuplicates or a window by key). Nothing was committed.")
        cur.execute(f"SELECT 1 FROM ({source}) s WHERE {' OR '.join(f'{k} IS NULL' for k in key_src)} LIMIT 1")
        if cur.fetchone() is not None:
            raise DuplicateKeyError(f"Rows to upsert into {self.table} have a null key ({', '.join(self.key)}): "
                                    "a null never matches, so the row would be added again on every run. "
                                    "Nothing was committed.")
        into = ", ".join(quote(c) for c in self.target_columns)
        rest = [c for c in self.target_columns if c not in self.key]
        action = ("DO UPDATE SET " + ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in rest)) if rest \
            else "DO NOTHING"
        # SQLite needs a WHERE to tell ON CONFLICT from a join's ON.
        cur.execute(f"INSERT INTO {self.table.sql} ({into}) SELECT * FROM ({source}) s WHERE true "
                    f"ON CONFLICT ({', '.join(quote(k) for k in self.key)}) {action}")
        return cur.rowcount if rest else None

    def discard(self, committables: Sequence[StagedRows], include_placed: bool = True) -> int:
        names = [c.table for c in committables if c.table]
        if not names:
            return 0
        conn = self.connection()
        with self.db.transaction(conn) as cur:
            return drop_staging(self.db, cur, names)

    def discard_jobs(self, jobs: Iterable[str]) -> int:
        """Drop every staging table of these jobs (failed, speculative or all attempts)."""
        conn = self.connection()
        with self.db.transaction(conn) as cur:
            if not self._meta_exists(cur):
                return 0
            return drop_staging(self.db, cur, (), jobs)

    def missing_files(self, committables: Sequence[StagedRows]) -> list[str]:
        cur = self.connection().cursor()
        missing = []
        for c in committables:
            if not c.table:
                continue
            name = staging_name(self.db, c.table)
            if self.db.dialect == "postgres":
                cur.execute("SELECT to_regclass(%s) IS NULL", (name.sql,))
            else:
                cur.execute("SELECT count(*) = 0 FROM sqlite_master WHERE type = 'table' AND name = ?", (name.name,))
            if cur.fetchone()[0]:
                missing.append(str(name))
        return missing

    def encode(self, committable: StagedRows) -> dict:
        return asdict(committable)

    def decode(self, data: dict) -> StagedRows:
        return StagedRows(str(data["table"]), str(data["job"]), int(data["rows"]), int(data["partition"]),
                          int(data["attempt"]))

    def describe(self) -> str:
        return f"{self.db.describe()}/{self.table}"
