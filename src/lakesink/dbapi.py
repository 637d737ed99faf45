"""The answers of the DB-API drivers lakesink talks to (sqlite3, psycopg), read in one place: a
busy database, a duplicate key; and the one loop that runs a transaction again while the database
is busy. Used by the Paimon JDBC catalog's rows, reservations and commit lock and by the JDBC
connector: whoever retries a busy database retries it here.

Only SQLite answers "busy": it has one writer at a time, and a connection that finds the write
lock taken gets "database is locked" once its busy timeout ran out. PostgreSQL waits for row
locks itself and, at READ COMMITTED (the catalogs' level), raises no serialization failures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" / "database is busy": another connection is writing; try again."""
    text = str(exc).lower()
    return type(exc).__module__.startswith("sqlite3") and ("locked" in text or "busy" in text)


def duplicate(exc: BaseException) -> bool:
    """A primary-key violation (sqlite3.IntegrityError, psycopg's UniqueViolation): the row exists."""
    return any(cls.__name__ in ("IntegrityError", "UniqueViolation") for cls in type(exc).__mro__)


def rollback(connection) -> None:
    """Roll back the DB-API `connection`'s transaction; a broken connection rolls back on its own."""
    try:
        connection.rollback()
    except Exception:  # noqa: BLE001 - each driver has its own error classes
        pass


def retry_busy(action: Callable[[], T], *, attempts: int | None = 50, deadline: float | None = None,
               pause: Callable[[int], float] = lambda attempt: 0.02, undo: Callable[[], None] | None = None,
               also: Callable[[BaseException], bool] | None = None) -> T:
    """`action()` (one transaction, committed by it), again while the database answers busy (or
    `also(error)` holds): at most `attempts` times (None: no limit) and not after `deadline`
    (`time.monotonic()`); `undo()` (a rollback) after each failure, `pause(attempt)` seconds
    (attempt 0 first) before the next. Any other error, or the last one, is raised as it is."""
    attempt = 0
    while True:
        try:
            return action()
        except Exception as exc:
            if undo is not None:
                undo()
            again = busy(exc) or (also is not None and also(exc))
            if not again or (attempts is not None and attempt + 1 >= attempts) or \
                    (deadline is not None and time.monotonic() >= deadline):
                raise
        time.sleep(pause(attempt))
        attempt += 1
