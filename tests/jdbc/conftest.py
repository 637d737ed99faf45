"""Databases for the JDBC sink's tests: SQLite always, PostgreSQL when a server answers.

PostgreSQL: LAKESINK_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test). Each
test gets schemas of its own (target and staging), dropped afterwards. Without a server the
PostgreSQL cases are skipped with the reason shown (pytest -rs), never passed; with CI=true
they fail (tests/requirements.py).
"""

from __future__ import annotations

import os
import uuid

import pytest

from tests.requirements import unavailable

POSTGRES_URL = os.environ.get("LAKESINK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
_postgres_error: list[str] = []


def postgres_reason() -> str | None:
    """Why PostgreSQL tests cannot run here (None: they can). Asked once per test process."""
    if not _postgres_error:
        try:
            import psycopg
        except ImportError:
            _postgres_error.append("psycopg is not installed (pip install 'lakesink[postgres]')")
        else:
            try:
                psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
                _postgres_error.append("")
            except Exception as exc:  # noqa: BLE001 - any failure means: no server to test against
                _postgres_error.append(f"no PostgreSQL server at {POSTGRES_URL}: {str(exc).strip()[:200]}")
    return _postgres_error[0] or None


class TestDb:
    """One test's database: URL, options, table names, and a way to read rows back."""

    def __init__(self, dialect: str, url: str, schema: str | None, staging: str | None):
        self.dialect, self.url, self.schema, self.staging = dialect, url, schema, staging

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}" if self.schema else name

    @property
    def options(self) -> dict:
        return {"staging.schema": self.staging} if self.staging else {}

    def connect(self):
        if self.dialect == "postgres":
            import psycopg
            return psycopg.connect(self.url, autocommit=True)
        import sqlite3
        return sqlite3.connect(self.url[len("sqlite:///"):], isolation_level=None)

    def query(self, sql: str, params=()) -> list[tuple]:
        conn = self.connect()
        try:
            cur = conn.cursor()
            cur.execute(sql, params)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []
        finally:
            conn.close()

    def execute(self, sql: str) -> None:
        self.query(sql)

    def rows(self, name: str, order_by: str = "id") -> list[tuple]:
        q = '"'
        table = f'{q}{self.schema}{q}.{q}{name}{q}' if self.schema else f'{q}{name}{q}'
        return self.query(f"SELECT * FROM {table} ORDER BY {order_by}")

    def exists(self, name: str) -> bool:
        if self.dialect == "postgres":
            return self.query("SELECT to_regclass(%s) IS NOT NULL", (f'"{self.schema}"."{name}"',))[0][0]
        return bool(self.query("SELECT count(*) FROM sqlite_master WHERE name = ?", (name,))[0][0])

    def staging_tables(self) -> list[str]:
        """lakesink's staging tables still in the database (should be none after every job)."""
        if self.dialect == "postgres":
            return [r[0] for r in self.query("SELECT tablename FROM pg_tables WHERE schemaname = %s "
                                             "AND tablename NOT IN ('progress', 'staging')", (self.staging,))]
        return [r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                         "name LIKE '\\_lakesink\\_%' ESCAPE '\\' AND name NOT IN "
                                         "('_lakesink_progress', '_lakesink_staging')")]

    def registered(self) -> list[str]:
        table = f'"{self.staging}".staging' if self.dialect == "postgres" else "_lakesink_staging"
        try:
            return [r[0] for r in self.query(f"SELECT name FROM {table}")]
        except Exception:  # noqa: BLE001 - no registry yet
            return []


def _sqlite_db(tmp_path) -> TestDb:
    return TestDb("sqlite", f"sqlite:///{tmp_path}/shop.db", None, None)


def _postgres_db():
    reason = postgres_reason()
    if reason:
        unavailable(reason)
    suffix = uuid.uuid4().hex[:8]
    db = TestDb("postgres", POSTGRES_URL, f"t_{suffix}", f"lk_{suffix}")
    db.execute(f'CREATE SCHEMA "{db.schema}"')
    return db


def _drop(db: TestDb) -> None:
    if db.dialect == "postgres":
        db.execute(f'DROP SCHEMA IF EXISTS "{db.schema}" CASCADE')
        db.execute(f'DROP SCHEMA IF EXISTS "{db.staging}" CASCADE')


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path):
    test_db = _sqlite_db(tmp_path) if request.param == "sqlite" else _postgres_db()
    yield test_db
    _drop(test_db)


@pytest.fixture()
def pg(tmp_path):
    test_db = _postgres_db()
    yield test_db
    _drop(test_db)
