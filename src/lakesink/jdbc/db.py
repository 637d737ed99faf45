"""The two databases behind one small interface: connect, transactions, names, catalog look-ups.

A `Database` is plain data (URL, credentials, options) so Spark can pickle it
into tasks and into its commit process; connections are opened where used.
"""

from __future__ import annotations

import os
import re
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from .. import dbapi
from ..errors import ConfigurationError, DatabaseConnectionError
from .options import JdbcOptions

SQLITE_LOCK_WAIT_S = 300


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def split_name(name: str) -> list[tuple[str, bool]]:
    """`schema.table`, `"Mixed Case".t` -> [(part, was quoted), ...]."""
    text = name.strip()
    parts = re.findall(r'"((?:[^"]|"")*)"|([^."]+)', text)
    rebuilt = ".".join(f'"{q}"' if q else u for q, u in parts)
    if rebuilt != text:
        return []
    return [(q.replace('""', '"'), True) if q else (u.strip(), False) for q, u in parts]


@dataclass(frozen=True)
class TableName:
    schema: str | None
    name: str

    @property
    def sql(self) -> str:
        return f"{quote(self.schema)}.{quote(self.name)}" if self.schema else quote(self.name)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


@dataclass(frozen=True)
class Database:
    dialect: str            # "postgres" | "sqlite"
    target: str             # conninfo URI (postgres) or absolute file path (sqlite)
    user: str | None = None
    password: str | None = None
    connect_timeout: int = 10
    isolation_level: str = "READ_COMMITTED"
    staging_schema: str = "lakesink"

    @classmethod
    def from_options(cls, options: JdbcOptions) -> Database:
        url = options.url
        if url.startswith("jdbc:"):
            url = url[len("jdbc:"):]
        scheme = url.split(":", 1)[0].lower()
        if scheme in ("postgresql", "postgres"):
            return cls("postgres", url, options.user, options.password, options.connect_timeout,
                       options.isolation_level, options.staging_schema)
        if scheme == "sqlite":
            return cls("sqlite", _sqlite_path(url), None, None, options.connect_timeout, options.isolation_level)
        raise ConfigurationError(f"Option 'url' has unsupported scheme in {_redact(options.url)!r}: expected "
                                 "postgresql://... or sqlite:///... (optionally prefixed with 'jdbc:').")

    # -- connections ---------------------------------------------------------------------
    def describe(self) -> str:
        """The database without credentials, for messages and checkpoint bindings."""
        if self.dialect == "sqlite":
            return f"sqlite://{self.target}"
        parts = urlsplit(self.target)
        host = parts.hostname or "localhost"
        return f"postgresql://{host}:{parts.port or 5432}{parts.path}"

    def connect(self):
        if self.dialect == "sqlite":
            return self._connect_sqlite()
        try:
            import psycopg
        except ImportError as exc:
            raise ConfigurationError("Writing to PostgreSQL needs psycopg: pip install 'lakesink[postgres]'") from exc
        kwargs = {"autocommit": True}
        if "connect_timeout" not in self.target:
            kwargs["connect_timeout"] = self.connect_timeout
        if self.user is not None:
            kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password
        try:
            return psycopg.connect(self.target, **kwargs)
        except psycopg.OperationalError as exc:
            raise DatabaseConnectionError(
                f"Cannot connect to {self.describe()}: {str(exc).strip()}. Check the URL, that the server "
                "runs and accepts this user and password. Nothing was written.") from None
        except psycopg.ProgrammingError as exc:  # a malformed conninfo
            raise ConfigurationError(f"Option 'url' is not a valid PostgreSQL URL ({exc}).") from None

    def _connect_sqlite(self):
        if not os.path.isdir(os.path.dirname(self.target) or "."):
            raise DatabaseConnectionError(f"Cannot open {self.describe()}: directory "
                                          f"{os.path.dirname(self.target)} does not exist. Nothing was written.")
        # Tasks take SQLite's single write lock one after another, each for its whole staging
        # write: wait long enough for the others (a lock timeout would fail the task).
        wait = max(self.connect_timeout, SQLITE_LOCK_WAIT_S)
        try:
            conn = sqlite3.connect(self.target, timeout=wait, isolation_level=None)
            # WAL: readers keep reading while a task or the commit writes.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA busy_timeout={wait * 1000}")
        except sqlite3.Error as exc:
            raise DatabaseConnectionError(f"Cannot open {self.describe()}: {exc}. Nothing was written.") from None
        return conn

    @contextmanager
    def transaction(self, conn):
        """One transaction: committed on a clean exit, rolled back on any exception."""
        if self.dialect == "postgres":
            with conn.transaction():
                if self.isolation_level != "READ_COMMITTED":
                    conn.execute(f"SET TRANSACTION ISOLATION LEVEL {self.isolation_level.replace('_', ' ')}")
                yield conn.cursor()
            return
        # IMMEDIATE: take the write lock now, not at the first write (no deadlock on upgrade).
        dbapi.retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), attempts=3, pause=lambda attempt: 0.5)
        cur = conn.cursor()
        try:
            yield cur
        except BaseException:
            conn.rollback()
            raise
        conn.execute("COMMIT")

    @property
    def param(self) -> str:
        return "%s" if self.dialect == "postgres" else "?"

    # -- names -----------------------------------------------------------------------------
    def table_name(self, text: str) -> TableName:
        split = split_name(text)
        if not split or len(split) > 2 or any(not p for p, _ in split):
            raise ConfigurationError(f"Option 'dbtable' has invalid value {text!r}: expected table or schema.table.")
        if self.dialect == "postgres":
            # SQL folds unquoted names to lower case; quoted ones keep theirs.
            parts = [p if quoted else p.lower() for p, quoted in split]
            return TableName(parts[0] if len(parts) == 2 else "public", parts[-1])
        parts = [p for p, _ in split]
        if len(parts) == 2 and parts[0].lower() != "main":
            raise ConfigurationError(f"Option 'dbtable' has invalid value {text!r}: a SQLite table is named "
                                     "'table' or 'main.table' (attached databases are not supported).")
        return TableName(None, parts[-1])

    def meta_table(self, name: str) -> TableName:
        """lakesink's own tables: in the staging schema (PostgreSQL) or prefixed (SQLite)."""
        if self.dialect == "postgres":
            return TableName(self.staging_schema, name)
        return TableName(None, f"_lakesink_{name}")

    # -- catalog ---------------------------------------------------------------------------
    def columns(self, cur, table: TableName) -> list[tuple[str, str, bool, bool]] | None:
        """(name, type, not null, has default) per column, or None if the table does not exist."""
        if self.dialect == "postgres":
            cur.execute("SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(%s)", (table.sql,))
            row = cur.fetchone()
            if row is None:
                return None
            cur.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
                        "a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' FROM pg_attribute a "
                        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
                        "ORDER BY a.attnum", (table.sql,))
            return [(n, t, bool(nn), bool(d)) for n, t, nn, d in cur.fetchall()]
        cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", (table.name,))
        if cur.fetchone() is None:
            return None
        cur.execute(f"PRAGMA main.table_info({quote(table.name)})")
        # An INTEGER PRIMARY KEY is the rowid: filled in when missing.
        return [(n, t or "", bool(nn), d is not None or (pk == 1 and t.upper() == "INTEGER"))
                for _cid, n, t, nn, d, pk in cur.fetchall()]

    def unique_keys(self, cur, table: TableName) -> list[set[str]]:
        """Column sets of the table's unique indexes (what ON CONFLICT can name)."""
        if self.dialect == "postgres":
            cur.execute("SELECT ARRAY(SELECT a.attname FROM unnest(i.indkey) k JOIN pg_attribute a "
                        "ON a.attrelid = i.indrelid AND a.attnum = k) FROM pg_index i "
                        "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL",
                        (table.sql,))
            return [set(r[0]) for r in cur.fetchall()]
        keys = []
        cur.execute(f"PRAGMA main.table_info({quote(table.name)})")
        pk = [n for _cid, n, _t, _nn, _d, p in sorted(cur.fetchall(), key=lambda r: r[5]) if p]
        if pk:
            keys.append(set(pk))
        cur.execute(f"PRAGMA main.index_list({quote(table.name)})")
        for _seq, index, unique, _origin, partial in cur.fetchall():
            if unique and not partial:
                cur.execute(f"PRAGMA main.index_info({quote(index)})")
                keys.append({r[2] for r in cur.fetchall()})
        return keys


def _sqlite_path(url: str) -> str:
    # SQLAlchemy's convention: sqlite:///relative.db, sqlite:////absolute.db. Made absolute
    # on the driver, because executors may run in another working directory.
    rest = url[len("sqlite:"):]
    if not rest.startswith("//"):
        raise ConfigurationError(f"Option 'url' has invalid value {url!r}: expected sqlite:///relative/path.db "
                                 "or sqlite:////absolute/path.db.")
    path = rest[3:] if rest.startswith("///") else rest[2:]
    if not path or path == ":memory:":
        raise ConfigurationError("A SQLite URL needs a file: tasks and the committer each open the database, "
                                 "so an in-memory database cannot be written.")
    return os.path.abspath(path.split("?", 1)[0])


def _redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
