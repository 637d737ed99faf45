"""One retry loop for busy databases: a real SQLite write lock held by another connection."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from lakesink import dbapi


def _locked_database(tmp_path):
    """A database whose write lock another connection holds, and a second connection that waits 0 s."""
    path = str(tmp_path / "catalog.db")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)  # let go from a timer
    holder.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    holder.execute("BEGIN IMMEDIATE")
    waiter = sqlite3.connect(path, timeout=0, isolation_level=None)
    return holder, waiter


def test_a_busy_sqlite_is_retried_until_the_writer_lets_go(tmp_path):
    holder, waiter = _locked_database(tmp_path)
    with pytest.raises(sqlite3.OperationalError) as busy:
        waiter.execute("BEGIN IMMEDIATE")
    assert dbapi.busy(busy.value)  # SQLite's own answer: "database is locked"
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    undone = []

    def insert():
        waiter.execute("BEGIN IMMEDIATE")
        waiter.execute("INSERT INTO t VALUES (1)")
        waiter.execute("COMMIT")
        return "landed"

    assert dbapi.retry_busy(insert, attempts=100, pause=lambda attempt: 0.05, undo=lambda: undone.append(1)) == \
        "landed"
    assert undone  # it was busy at least once, and rolled back each time
    assert waiter.execute("SELECT k FROM t").fetchall() == [(1,)]


def test_the_last_busy_answer_is_raised_after_the_attempts_or_the_deadline(tmp_path):
    holder, waiter = _locked_database(tmp_path)
    calls = []

    def begin():
        calls.append(1)
        waiter.execute("BEGIN IMMEDIATE")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        dbapi.retry_busy(begin, attempts=3, pause=lambda attempt: 0.0)
    assert len(calls) == 3
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        dbapi.retry_busy(begin, attempts=None, deadline=time.monotonic() + 0.2, pause=lambda attempt: 0.01)
    assert 0.2 <= time.monotonic() - started < 2
    holder.execute("ROLLBACK")


def test_other_errors_are_raised_at_once_unless_named_retryable(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "c.db"), isolation_level=None)
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    calls = []

    def insert_again():
        calls.append(1)
        conn.execute("INSERT INTO t VALUES (1)")

    with pytest.raises(sqlite3.IntegrityError) as duplicate:
        dbapi.retry_busy(insert_again)
    assert len(calls) == 1 and dbapi.duplicate(duplicate.value) and not dbapi.busy(duplicate.value)
    with pytest.raises(sqlite3.IntegrityError):
        dbapi.retry_busy(insert_again, attempts=4, pause=lambda attempt: 0.0, also=dbapi.duplicate)
    assert len(calls) == 5
    # Not SQLite: a message saying "locked" is no busy database.
    assert not dbapi.busy(RuntimeError("database is locked"))
