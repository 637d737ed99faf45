"""Plan one write: check everything against the database before a task runs.

`JdbcJob.plan` refuses unsupported types, a schema that does not fit the
table, an upsert key without a unique index, an unreachable database or wrong
credentials — before any row is written and before lakesink creates its own
tables. The job is plain data: Spark pickles it into tasks and into its commit
process.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import ConfigurationError, SchemaMismatchError
from ..protocol import Committer, CommitReport, Overwrite, PendingStore
from .db import Database, TableName, quote
from .options import JdbcOptions
from .target import ANONYMOUS_PREFIX, JdbcTarget, StagedRows, ensure_metadata
from .types import Column, columns_of, postgres_accepts, sql_type, sqlite_accepts

BATCH_IDENTIFIER = 0


def new_token() -> str:
    return uuid.uuid4().hex[:16]


@dataclass
class JdbcJob:
    db: Database
    table: TableName
    columns: list[Column]
    target_columns: list[str]
    create_sql: str | None        # CREATE TABLE IF NOT EXISTS ..., run in the commit if the table is missing
    mode: str
    key: list[str]
    batch_size: int
    commit_user: str | None       # None while a stream is not bound yet
    identifier: int = BATCH_IDENTIFIER
    anonymous: bool = True
    token: str = field(default_factory=new_token)

    @classmethod
    def plan(cls, options: JdbcOptions, schema, streaming: bool = False) -> JdbcJob:
        options.check(streaming)
        columns = columns_of(schema)
        db = Database.from_options(options)
        table = db.table_name(options.table)
        names = {c.name for c in columns}
        missing_key = [k for k in options.key if k not in names]
        if missing_key:
            raise ConfigurationError(f"upsert.key column(s) {missing_key} are not in the DataFrame "
                                     f"(columns: {sorted(names)}).")
        conn = db.connect()
        try:
            with db.transaction(conn) as cur:
                existing = db.columns(cur, table)
                if existing is None:
                    _check_schema_exists(db, cur, table)
                    target_columns = [c.name for c in columns]
                    create_sql = create_table_sql(db, table, columns, options.column_types, options.key,
                                                  options.create_table_options, if_not_exists=True)
                else:
                    target_columns = _match(db, table, columns, existing)
                    create_sql = None
                    if options.key:
                        _check_key(db, cur, table, columns, target_columns, options.key)
                ensure_metadata(db, cur)
        finally:
            conn.close()
        key = [target_columns[[c.name for c in columns].index(k)] for k in options.key]
        anonymous = options.commit_user is None and not streaming
        user = options.commit_user or (f"{ANONYMOUS_PREFIX}{uuid.uuid4()}" if not streaming else None)
        identifier = options.commit_identifier if options.commit_identifier is not None else BATCH_IDENTIFIER
        return cls(db, table, columns, target_columns, create_sql, options.mode, key, options.batch_size,
                   user, identifier, anonymous)

    # -- driver side ------------------------------------------------------------------------
    def target(self) -> JdbcTarget:
        return JdbcTarget(self.db, self.table, [f"c{i}" for i in range(len(self.columns))], self.target_columns,
                          self.create_sql, "upsert" if self.mode == "upsert" else "append", self.key)

    def committer(self, target: JdbcTarget | None = None, pending: PendingStore | None = None) -> Committer:
        return Committer(target or self.target(), self.commit_user, pending)

    def overwrite(self) -> Overwrite | None:
        return Overwrite() if self.mode == "overwrite" else None

    def already_committed(self) -> bool:
        if self.anonymous:
            return False
        target = self.target()
        try:
            return self.committer(target).skips_as_replay(self.identifier, str(self.table))
        finally:
            target.close()

    def commit(self, staged: Sequence[StagedRows]) -> CommitReport:
        """Commit a batch job's attempts; then drop whatever else its attempts staged."""
        target = self.target()
        try:
            report = self.committer(target).commit(self.identifier, staged, self.overwrite())
            if not report.committed:  # skipped or landed by another attempt: ours were not consumed
                _quietly(target.discard_jobs, [self.token])
            return report
        except BaseException:
            _quietly(target.discard_jobs, [self.token])
            raise
        finally:
            target.close()

    def abort(self, staged: Sequence[StagedRows]) -> None:
        target = self.target()
        try:
            self.committer(target).abort(staged, None if self.anonymous else self.identifier)
        finally:
            _quietly(target.discard_jobs, [self.token])
            target.close()


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - leftovers are removed by the next commit or clean_staging
        pass


def create_table_sql(db: Database, table: TableName, columns: Sequence[Column], overrides: dict[str, str],
                     key: Sequence[str], extra: str, if_not_exists: bool) -> str:
    by_lower = {c.name.lower(): c for c in columns}
    unknown = [n for n in overrides if n.lower() not in by_lower]
    if unknown:
        raise ConfigurationError(f"createTableColumnTypes names column(s) {unknown} that the DataFrame does not "
                                 f"have (columns: {[c.name for c in columns]}).")
    types = {k.lower(): v for k, v in overrides.items()}
    if db.dialect == "sqlite":
        from .types import sqlite_accepts
        lossy = [f"{c.name} {types[c.name.lower()]}" for c in columns
                 if c.name.lower() in types and not sqlite_accepts(c, types[c.name.lower()])]
        if lossy:
            raise ConfigurationError(f"createTableColumnTypes {lossy}: SQLite's affinity for these types would change "
                                     "the values (e.g. NUMERIC rounds decimals to doubles). See docs/jdbc.md, Types.")
    defs = [f"{quote(c.name)} {types.get(c.name.lower(), sql_type(c, db.dialect))}"
            + ("" if c.nullable and c.name not in key else " NOT NULL") for c in columns]
    if key:
        defs.append(f"PRIMARY KEY ({', '.join(quote(k) for k in key)})")
    exists = "IF NOT EXISTS " if if_not_exists else ""
    return f"CREATE TABLE {exists}{table.sql} ({', '.join(defs)}) {extra}".rstrip()


def _check_schema_exists(db: Database, cur, table: TableName) -> None:
    if db.dialect != "postgres":
        return
    cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (table.schema,))
    if cur.fetchone() is None:
        raise ConfigurationError(f"Schema {table.schema!r} does not exist in {db.describe()}: create it first "
                                 f"(CREATE SCHEMA {quote(table.schema)}). Nothing was written.")


def _match(db: Database, table: TableName, columns: Sequence[Column],
           existing: list[tuple[str, str, bool, bool]]) -> list[str]:
    """The table's name for each DataFrame column; SchemaMismatchError listing every problem."""
    exact = {n: (n, t) for n, t, _nn, _d in existing}
    lower: dict[str, list[tuple[str, str]]] = {}
    for n, t, _nn, _d in existing:
        lower.setdefault(n.lower(), []).append((n, t))
    problems, names = [], []
    for c in columns:
        found = exact.get(c.name) or (lower.get(c.name.lower(), [None])[0]
                                      if len(lower.get(c.name.lower(), [])) == 1 else None)
        if found is None:
            problems.append(f"column {c.name!r} is not in the table")
            names.append(c.name)
            continue
        name, declared = found
        names.append(name)
        ok = postgres_accepts(c, declared) if db.dialect == "postgres" else sqlite_accepts(c, declared)
        if not ok:
            problems.append(f"column {c.name!r} ({c.kind}{_precision(c)}) cannot be stored exactly in {name} "
                            f"{declared or '(no type)'} (lakesink would use {sql_type(c, db.dialect)})")
    written = set(names)
    for n, t, not_null, has_default in existing:
        if n not in written and not_null and not has_default:
            problems.append(f"table column {n!r} ({t}) is NOT NULL without a default, and the DataFrame has no "
                            "such column")
    if problems:
        have = ", ".join(f"{n} {t}" for n, t, _nn, _d in existing)
        raise SchemaMismatchError(f"The DataFrame does not fit {table} in {db.describe()}: " + "; ".join(problems)
                                  + f". The table has: {have}. Nothing was written (replace_table_as changes "
                                    "a table's schema).")
    return names


def _precision(c: Column) -> str:
    return f"({c.precision},{c.scale})" if c.kind == "decimal" else ""


def _check_key(db: Database, cur, table: TableName, columns, target_columns, key: Sequence[str]) -> None:
    wanted = {target_columns[[c.name for c in columns].index(k)] for k in key}
    if wanted not in db.unique_keys(cur, table):
        raise ConfigurationError(
            f"upsert.key {list(key)} is not a primary key or unique index of {table}: INSERT ... ON CONFLICT "
            f"needs one (CREATE UNIQUE INDEX ON {table.sql} ({', '.join(quote(k) for k in sorted(wanted))})). "
            "Nothing was written.")
