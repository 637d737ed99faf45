"""Maintenance after each commit: one background run at a time per table, failures kept for the next commit."""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import threading
import time

from ... import storage
from ...errors import CorruptStateError, InvalidOptionError, MaintenanceError
from .. import iceberg
from ..table import tables
from . import catalog_sweep as catalog_staging
from .expiry import expire_snapshots
from .metadata import MaintenanceOptions, table_of
from .retention import create_automatic_tags, expire_consumers, expire_partitions, expire_tags_by_time

log = logging.getLogger(__name__)

FAILURE = storage.DocumentKind("lakesink.maintenance-failure", 1, "lakesink maintenance failure record",
                                "Delete it; the next commit then runs maintenance again.")


def _failure_path(path: str) -> str:
    return f"{path}/{tables.LAKESINK_DIR}/maintenance-failure.json"


def maintain(table_or_path, now: dt.datetime | None = None, limit: int | None = -1,
             fs_options: dict | None = None) -> dict:
    """One full maintenance run, synchronously: tags, partitions, snapshots, consumers, and the
    Iceberg metadata of tables that keep it."""
    table = table_of(table_or_path, fs_options)
    out = {"tags_created": create_automatic_tags(table, now),
           "tags_expired": expire_tags_by_time(table, now),
           "partitions_dropped": expire_partitions(table, now)}
    if out["partitions_dropped"]:
        table = tables.open_table(table.table_path, fs_options) or table
    now_ms = int(now.timestamp() * 1000) if now else None
    expiry = expire_snapshots(table, now_ms=now_ms, limit=limit)
    out.update(snapshots_expired=expiry.snapshots_expired, files_deleted=expiry.files_deleted)
    expire_consumers(table, now)
    if iceberg.enabled(table):
        # Derived state: repaired here after a crash, old versions gone with expired snapshots. Its
        # failure is reported, never recorded as a maintenance failure (that would stop commits).
        try:
            out["iceberg_snapshot"] = iceberg.refresh(tables.open_table(table.table_path, fs_options) or table)
        except Exception as exc:
            log.exception("Iceberg metadata of %s not refreshed", table.table_path)
            out["iceberg_error"] = f"{type(exc).__name__}: {exc}"
    return out


class Maintenance:
    """Background maintenance of one table in this process: one run at a time."""

    def __init__(self, path: str, fs_options: dict | None = None):
        self.path = path
        self.fs_options = fs_options
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = False
        self.runs = 0
        self._table = None  # the table as the last commit that triggered a run held it

    def trigger(self, table=None) -> None:
        """Start a run unless one is running (then one more runs after it). `table`: as the
        commit held it (its schema checked then; snapshots are read afresh): not opened again."""
        with self._lock:
            self._table = table
            if self._thread is not None and self._thread.is_alive():
                self._again = True
                return
            self._thread = threading.Thread(target=self._loop, name=f"lakesink-maintenance:{self.path}",
                                            daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            self._run_once()
            with self._lock:
                if not self._again:
                    return
                self._again = False

    def _run_once(self) -> None:
        try:
            with self._lock:
                table, self._table = self._table, None
            maintain(table if table is not None else self.path, fs_options=self.fs_options)
            self.runs += 1
        except Exception as exc:
            log.exception("maintenance of %s failed", self.path)
            record_failure(self.path, exc, self.fs_options)


_registry: dict[str, Maintenance] = {}


_registry_lock = threading.Lock()


def maintenance_for(path: str, fs_options: dict | None = None) -> Maintenance:
    path = storage.normalize(path)
    with _registry_lock:
        if path not in _registry:
            _registry[path] = Maintenance(path, fs_options)
        return _registry[path]


def after_commit(path: str, table, report=None, fs_options: dict | None = None) -> None:
    """Called by PaimonTarget after each successful commit: start background maintenance (and,
    for a table of a JDBC catalog on an object store, the catalog's sweep when due)."""
    try:
        if not MaintenanceOptions.of(table).enabled:
            return
    except InvalidOptionError as exc:
        record_failure(storage.normalize(path), exc, fs_options)
        return
    maintenance_for(path, fs_options).trigger(table)
    catalog_staging.after_commit(path, fs_options)  # the table's catalog: dead CTAS reservations, when due


def record_failure(path: str, exc: BaseException, fs_options: dict | None = None) -> None:
    file_io = storage.file_io(path, fs_options)
    try:
        FAILURE.write(file_io, _failure_path(path), at_ms=int(time.time() * 1000),
                      error=f"{type(exc).__name__}: {exc}")
    except Exception:
        log.exception("could not record the maintenance failure of %s", path)


def raise_failure(path: str, file_io) -> None:
    """Raise (once) a maintenance failure recorded for the table. Called before each commit."""
    failure = _failure_path(path)
    if not file_io.exists(failure):
        return
    try:
        data = FAILURE.read(file_io, failure)
        error = data.get("error", "unknown error") if data is not None else "unknown error"
    except OSError:
        error = "unreadable failure record"
    except CorruptStateError as exc:  # raised once all the same: the record's only use is this error
        error = f"unreadable failure record ({exc})"
    file_io.delete_quietly(failure)
    raise MaintenanceError(
        f"Table maintenance of {path} failed after an earlier commit: {error}. Nothing was committed "
        "now; fix the cause (e.g. the table option it names) and commit again, or run "
        f"`lakesink expire {path}` to see the error directly.")


@atexit.register
def _drain() -> None:
    # Let a run in progress finish at interpreter exit (it is crash-safe anyway).
    for maintenance in list(_registry.values()):
        maintenance.wait(timeout=30)
