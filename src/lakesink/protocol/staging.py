"""Staged tables: create (or replace) a table all-or-nothing, as Flink's `SupportsStaging`.

A sink opts in by implementing `SupportsStaging`. The engine's job status hook
(`run_staged`) calls `begin()` before the job starts, `commit()` once it
finished, and `abort()` when it failed, was cancelled, interrupted
(KeyboardInterrupt) or terminated (SIGTERM). Until `commit()`, readers and
catalogs see nothing; after `abort()` nothing is left.

What killed jobs leave is removed by a `clean_staging` of each target; all take
one `older_than` (`staging_age`: a timedelta, or seconds; `STAGING_AGE`, an hour,
by default).
"""

from __future__ import annotations

import datetime
import signal
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

from ..errors import ConfigurationError

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


# -- what killed jobs left: how old is old enough ---------------------------------------------

# The one default of every `clean_staging`: an hour. A job holding a catalog reservation beats
# every 30 s; staging of other jobs shows only its age, so give a longer `older_than` when writes
# run (or sit between files) for longer than that.
STAGING_AGE = datetime.timedelta(hours=1)


def staging_age(older_than: datetime.timedelta | float | int = STAGING_AGE,
                older_than_s: float | None = None) -> datetime.timedelta:
    """`older_than` of a `clean_staging` as a timedelta: a timedelta, or a number of seconds (how
    earlier versions took it). `older_than_s` is the former keyword, still read (deprecated)."""
    if older_than_s is not None:
        if older_than != STAGING_AGE:
            raise ConfigurationError("Give older_than or older_than_s (deprecated), not both.")
        warnings.warn("older_than_s is deprecated: give older_than, a datetime.timedelta (or seconds).",
                      DeprecationWarning, stacklevel=3)
        older_than = older_than_s
    if isinstance(older_than, datetime.timedelta):
        age = older_than
    elif isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
        age = datetime.timedelta(seconds=older_than)
    else:
        raise ConfigurationError(f"older_than must be a datetime.timedelta or a number of seconds, "
                                 f"not {older_than!r}.")
    if age < datetime.timedelta(0):
        raise ConfigurationError(f"older_than must not be negative: {older_than!r}.")
    return age
