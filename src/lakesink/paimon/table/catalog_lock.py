"""The JDBC catalog lock: Apache Paimon's `paimon_distributed_locks`, from Python.

A table reached by name through a JDBC catalog with `lock.enabled` publishes
every snapshot (and schema file) while holding a row of the catalog database's
`paimon_distributed_locks` table, exactly as Paimon's `JdbcCatalogLock` does,
so Java Paimon writers of the same catalog and lakesink writers exclude each
other:

* the table: `lock_id VARCHAR(<lock-key-max-length>) PRIMARY KEY`,
  `acquired_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP`,
  `expire_time_seconds BIGINT DEFAULT 0` (Paimon's `JdbcUtils` names);
* the lock id: `<catalog-key>.<database>.<table>`;
* acquire: first delete the row if it has expired (now - acquired_at >
  expire_time_seconds), then INSERT it; a duplicate key means another writer
  holds it: sleep 100 ms, doubling up to `lock-check-max-sleep`, until
  `lock-acquire-timeout`;
* the row's expiry is the holder's `lock-acquire-timeout` in whole seconds (as
  Paimon writes it): a writer killed while holding the lock blocks the others
  at most that long;
* release: DELETE of the row.

The connection is a DB-API one opened by pypaimon's JDBC catalog code (sqlite3,
psycopg), one per process and database, used under a thread lock. The lock
travels with the table's storage options (`commit.catalog-lock`, set by the
catalog when it resolves a name), so commits in other processes (Spark's commit
process, the committer service) take it too.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ... import dbapi
from ...errors import CatalogLockTimeoutError, ConfigurationError, DatabaseConnectionError

log = logging.getLogger(__name__)

T = TypeVar("T")

# The storage option carrying the lock of a table resolved by name (declared in lakesink.options).
OPTION = "commit.catalog-lock"

TABLE = "paimon_distributed_locks"
FIRST_SLEEP_MS = 50  # Paimon's JdbcCatalogLock: 50 ms, doubled before each sleep

# Paimon's AbstractCatalog: the lock is on by default where the warehouse is an object store.
OBJECT_STORE_SCHEMES = ("s3", "emr", "oss", "wasb", "abfs", "gs", "cosn")

# How long "now - acquired_at > expire_time_seconds" reads in each database (Paimon's dialects).
_EXPIRED = {
    "sqlite": "strftime('%s', 'now') - strftime('%s', acquired_at) > expire_time_seconds",
    "postgresql": "EXTRACT(EPOCH FROM AGE(NOW(), acquired_at)) > expire_time_seconds",
}


def default_enabled(warehouse: str) -> bool:
    """Paimon's default for `lock.enabled`: on when the warehouse is on an object store."""
    scheme = warehouse.split("://", 1)[0].lower() if "://" in warehouse else ""
    return scheme.startswith(OBJECT_STORE_SCHEMES)


@dataclass(frozen=True)
class CatalogLock:
    """The lock of one table of one JDBC catalog (picklable; rides in the storage options)."""

    connection: tuple[tuple[str, str], ...]  # `uri` and the `jdbc.*` options: how to connect
    catalog_key: str
    database: str
    table: str
    acquire_timeout_ms: int
    check_max_sleep_ms: int
    key_max_length: int = 255

    @property
    def lock_id(self) -> str:
        return f"{self.catalog_key}.{self.database}.{self.table}"

    @property
    def uri(self) -> str:
        return dict(self.connection)["uri"]

    @property
    def dialect(self) -> str:
        return "sqlite" if self.uri.startswith("jdbc:sqlite:") else (
            "postgresql" if self.uri.startswith("jdbc:postgresql:") else self.uri.split(":")[1])

    # -- carried in the storage options ---------------------------------------
    def to_option(self) -> str:
        return json.dumps({"connection": dict(self.connection), "catalog-key": self.catalog_key,
                           "database": self.database, "table": self.table,
                           "lock-acquire-timeout-ms": self.acquire_timeout_ms,
                           "lock-check-max-sleep-ms": self.check_max_sleep_ms,
                           "lock-key-max-length": self.key_max_length}, sort_keys=True)

    @classmethod
    def from_option(cls, text: str) -> CatalogLock:
        try:
            data = json.loads(text)
            return cls(tuple(sorted(data["connection"].items())), data["catalog-key"], data["database"],
                       data["table"], int(data["lock-acquire-timeout-ms"]), int(data["lock-check-max-sleep-ms"]),
                       int(data.get("lock-key-max-length", 255)))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigurationError(
                f"Option {OPTION!r} is set by lakesink when a table is resolved by name through a JDBC "
                "catalog with lock.enabled; its value here is not one lakesink wrote. Remove it and write "
                "by name.", option=OPTION) from None

    def describe(self) -> str:
        return f"the catalog lock {self.lock_id!r} ({TABLE} in {self.uri})"

    # -- the protocol -----------------------------------------------------------
    def run(self, action: Callable[[], T]) -> T:
        """`action()` while holding the lock; `CatalogLockTimeoutError` (nothing run) if it stays held."""
        self.acquire()
        try:
            return action()
        finally:
            self.release()

    def acquire(self) -> None:
        self._wait(lambda db: db.try_insert(self), "acquire")

    def wait_until_free(self) -> None:
        """Wait, as `acquire` would, until nobody holds the lock (an expired holder's row is cleared),
        without taking it. Lets a commit fail with a clear error before it starts publishing."""
        self._wait(lambda db: not db.held(self), "wait for")

    def _wait(self, attempt: Callable[[_Database], bool], what: str) -> None:
        db = _database(self)
        started = time.monotonic()
        deadline = started + self.acquire_timeout_ms / 1000
        sleep_ms = FIRST_SLEEP_MS
        while True:
            db.clear_expired(self)
            if attempt(db):
                return
            now = time.monotonic()
            if now >= deadline:
                raise CatalogLockTimeoutError(
                    f"Could not {what} {self.describe()} within lock-acquire-timeout "
                    f"({self.acquire_timeout_ms / 1000:g} s): another writer of the table holds it "
                    f"(waited {now - started:.1f} s). Nothing was published. A writer killed while "
                    f"holding it blocks others until its row expires (its expire_time_seconds); look at "
                    f"SELECT * FROM {TABLE} WHERE lock_id = '{self.lock_id}', raise the catalog option "
                    "lock-acquire-timeout, or retry the write.", table=f"{self.database}.{self.table}")
            sleep_ms = min(sleep_ms * 2, max(self.check_max_sleep_ms, 1))
            time.sleep(min(sleep_ms / 1000, max(deadline - now, 0.001)))

    def release(self) -> None:
        """Delete the row. A failure is logged, not raised: the publication already happened, and the
        row expires after expire_time_seconds."""
        try:
            _database(self).delete(self)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not release %s (%s): it expires after %d s", self.describe(), exc,
                        self.acquire_timeout_ms // 1000)


# ------------------------------------------------------------------ the database side

class _Database:
    """One DB-API connection to a catalog database, used by one thread at a time."""

    def __init__(self, connection_options: Mapping[str, str]):
        from pypaimon.catalog.jdbc_catalog import _DbApiConnection
        self.options = dict(connection_options)
        self.mutex = threading.Lock()
        self.table_ready = False
        try:
            self.conn = _DbApiConnection(self.options)
        except Exception as exc:  # noqa: BLE001 - each driver has its own error classes
            raise DatabaseConnectionError(f"Cannot reach the catalog database {self.options.get('uri')} for "
                                          f"its commit lock: {first_line(exc)}. Nothing was published.") from exc

    def _run(self, lock: CatalogLock, sql: str, args: tuple = (), fetch: bool = False):
        """One statement in its own transaction. SQLite's busy/locked answers are retried here."""
        deadline = time.monotonic() + max(lock.acquire_timeout_ms / 1000, 5.0)

        def statement():
            result = self.conn.fetch_one(sql, args) if fetch else self.conn.execute(sql, args)
            self.conn.connection.commit()
            return result

        with self.mutex:
            self._ensure_table(lock)
            return dbapi.retry_busy(statement, attempts=None, deadline=deadline, pause=lambda attempt: 0.01,
                                    undo=self._rollback)

    def _ensure_table(self, lock: CatalogLock) -> None:
        # Paimon's JdbcCatalog creates it when it opens with the lock enabled; lakesink on first use.
        if self.table_ready:
            return
        if lock.dialect not in _EXPIRED:
            raise ConfigurationError(
                f"lakesink takes the JDBC catalog lock in SQLite and PostgreSQL catalogs only, not in "
                f"{lock.uri}: set the catalog option lock.enabled=false (and make sure the storage "
                "publishes atomically, see docs/storage.md).", option="lock.enabled")
        create = (f"CREATE TABLE IF NOT EXISTS {TABLE} (lock_id VARCHAR({lock.key_max_length}) NOT NULL, "
                  "acquired_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL, "
                  "expire_time_seconds BIGINT DEFAULT 0 NOT NULL, PRIMARY KEY (lock_id))")

        def create_table():
            self.conn.execute(create)
            self.conn.connection.commit()

        try:
            # PostgreSQL: two concurrent CREATE ... IF NOT EXISTS may collide on the catalog's own
            # unique index; SQLite: busy. Either way look again.
            dbapi.retry_busy(create_table, undo=self._rollback, also=dbapi.duplicate)
        except Exception as exc:  # noqa: BLE001
            raise DatabaseConnectionError(f"Cannot create {TABLE} in {lock.uri}: "
                                          f"{first_line(exc)}. Nothing was published.") from exc
        self.table_ready = True

    def _rollback(self) -> None:
        dbapi.rollback(self.conn.connection)

    def clear_expired(self, lock: CatalogLock) -> int:
        return self._checked(lock, f"DELETE FROM {TABLE} WHERE {_EXPIRED[lock.dialect]} AND lock_id = ?",
                             (lock.lock_id,))

    def try_insert(self, lock: CatalogLock) -> bool:
        try:
            self._run(lock, f"INSERT INTO {TABLE} (lock_id, expire_time_seconds) VALUES (?, ?)",
                      (lock.lock_id, lock.acquire_timeout_ms // 1000))
            return True
        except Exception as exc:  # noqa: BLE001
            if dbapi.duplicate(exc) or dbapi.busy(exc):
                return False  # held (or SQLite stayed busy): try again after a sleep
            raise self._failed(lock, exc) from exc

    def held(self, lock: CatalogLock) -> bool:
        return self._checked(lock, f"SELECT 1 FROM {TABLE} WHERE lock_id = ?", (lock.lock_id,), fetch=True) \
            is not None

    def delete(self, lock: CatalogLock) -> None:
        self._checked(lock, f"DELETE FROM {TABLE} WHERE lock_id = ?", (lock.lock_id,))

    def _checked(self, lock: CatalogLock, sql: str, args: tuple, fetch: bool = False):
        try:
            return self._run(lock, sql, args, fetch)
        except (ConfigurationError, DatabaseConnectionError):
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._failed(lock, exc) from exc

    @staticmethod
    def _failed(lock: CatalogLock, exc: BaseException) -> DatabaseConnectionError:
        return DatabaseConnectionError(f"The catalog database failed while taking {lock.describe()}: "
                                       f"{first_line(exc)}. Nothing was published.",
                                       table=f"{lock.database}.{lock.table}")


_databases: dict[tuple, _Database] = {}
_databases_lock = threading.Lock()
_databases_pid = os.getpid()


def _database(lock: CatalogLock) -> _Database:
    """The process's connection to the lock's database (a forked child opens its own)."""
    global _databases_pid
    with _databases_lock:
        if _databases_pid != os.getpid():
            _databases.clear()
            _databases_pid = os.getpid()
        db = _databases.get(lock.connection)
        if db is None:
            db = _databases[lock.connection] = _Database(dict(lock.connection))
        return db


def first_line(exc: BaseException) -> str:
    """An error for a message: its type and first line (a driver's error can run to pages)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
