"""Staged tables: create (or replace) a table all-or-nothing, as Flink's `SupportsStaging`.

A sink opts in by implementing `SupportsStaging`. The engine's job status hook
(`run_staged`) calls `begin()` before the job starts, `commit()` once it
finished, and `abort()` when it failed, was cancelled, interrupted
(KeyboardInterrupt) or terminated (SIGTERM). Until `commit()`, readers and
catalogs see nothing; after `abort()` nothing is left.
"""

from __future__ import annotations

import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class StagedTable(ABC):
    # How the job writes `staging_path`: "append" into a new table, or "overwrite" when the staged
    # table is the existing table itself (a REPLACE that can only be one OVERWRITE snapshot).
    write_mode = "append"

    @abstractmethod
    def begin(self) -> None:
        """Reserve the staging location; fail early if the table may not be created."""

    @abstractmethod
    def commit(self) -> None:
        """Publish table and data in one atomic step."""

    @abstractmethod
    def abort(self) -> None:
        """Remove everything staged. Idempotent."""

    @property
    def skipped(self) -> bool:
        """True when begin() decided there is nothing to do (e.g. IF NOT EXISTS on an existing table)."""
        return False


class SupportsStaging(ABC):
    @abstractmethod
    def stage_create(self, if_not_exists: bool = False) -> StagedTable:
        ...

    @abstractmethod
    def stage_replace(self) -> StagedTable:
        ...


class Terminated(BaseException):
    """Raised in the driver's main thread when SIGTERM arrives during a staged job."""


def run_staged(staged: StagedTable, job: Callable[[], T]) -> T | None:
    """The job status hook: begin → job → commit, or abort on any failure or cancellation."""
    restore = _raise_on_sigterm()
    try:
        staged.begin()
        if staged.skipped:
            return None
        result = job()
        staged.commit()
        return result
    except BaseException:
        staged.abort()
        raise
    finally:
        restore()


def _raise_on_sigterm() -> Callable[[], None]:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise Terminated(f"received signal {signum}: aborting the staged table")

    previous = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)
