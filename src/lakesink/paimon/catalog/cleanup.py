"""What interrupted CREATE TABLE AS jobs leave, and its removal: one implementation per target.

* `clean_database(directory, older_than, dry_run)`: the staged tables
  (`.<table>.lakesink-staging-<token>/` with `STAGED.json`) under a database directory
  (`lakesink.clean_staging`, and `lakesink clean-staging` of a table or database).
* `clean_catalog(catalog, older_than, dry_run)`: every database of a catalog
  (`Catalog.clean_staging`, `lakesink clean-staging --catalog ...`): through a JDBC catalog
  on an object store, the dead name reservations and their locations' files
  (`reservations.sweep`); elsewhere the staged tables of each database, and (JDBC) tables moved
  to their location whose catalog row never committed.
* `clean_name(catalog, database, table, older_than, dry_run)`: the reservation of one name.

A staged table is abandoned when its job's process on this host is gone or it started longer
than `older_than` ago; a reservation when its process on this host is gone or its job has not
beaten for `older_than`. Each returns every entry it found, with what was done and why.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from dataclasses import dataclass

from ... import storage
from ...protocol.staging import STAGING_AGE
from . import reservations
from .names import TableName
from .staged_table import MARKER as STAGED_MARKER
from .staged_table import STAGING_INFIX, abandoned, local_dir, read_marker, staged_tables


@dataclass(frozen=True)
class StagingEntry:
    path: str
    kind: str          # batch-job | stream-batch | compaction | staged-table | reserved-table | unknown
    modified_at: dt.datetime | None
    remove: bool       # removed (or, in a dry run, would be)
    reason: str


def clean_database(directory: str, older_than: dt.timedelta = STAGING_AGE, dry_run: bool = False,
                   table_name: str | None = None, now: float | None = None) -> list[StagingEntry]:
    """The staged tables under a (local) database directory (of `table_name` only, if given),
    those of dead jobs removed unless `dry_run`. Never a published table: only directories named
    `.<table>.lakesink-staging-*` holding a STAGED.json marker are looked at."""
    out = []
    for full, marker in staged_tables(directory, table_name):
        remove, reason = abandoned(marker, older_than, now)
        created = marker.get("created_at")
        when = dt.datetime.fromtimestamp(float(created), dt.timezone.utc) if created else None
        out.append(StagingEntry(full, "staged-table", when, remove, f"CREATE TABLE AS of {marker.get('target')}: "
                                f"{reason}"))
        if remove and not dry_run:
            shutil.rmtree(full, ignore_errors=True)
    return out


def clean_catalog(catalog, older_than: dt.timedelta = STAGING_AGE, dry_run: bool = False,
                  now: float | None = None) -> list[StagingEntry]:
    """What interrupted CREATE TABLE AS jobs left in `catalog` (a lakesink Catalog), removed unless
    `dry_run`. A marker left in a table that did enter the catalog is removed too (not listed)."""
    if reservations.applies(catalog.config):  # object store: CREATE TABLE AS reserved names
        return [_entry(s) for s in reservations.sweep(catalog, older_than.total_seconds(), dry_run)]
    if not storage.is_local(catalog.warehouse):
        return []  # a filesystem catalog on an object store stages nothing (no atomic CTAS there)
    now = time.time() if now is None else now
    out: list[StagingEntry] = []
    for database in catalog.list_databases():
        directory = local_dir(catalog.database_path(database))
        out += clean_database(directory, older_than, dry_run, now=now)
        if catalog.is_jdbc and os.path.isdir(directory):
            out += _unregistered(catalog, database, directory, older_than, dry_run, now)
    return out


def _unregistered(catalog, database: str, directory: str, older_than: dt.timedelta, dry_run: bool,
                  now: float) -> list[StagingEntry]:
    """JDBC: tables an interrupted CREATE TABLE AS moved to their location (the marker inside)
    whose catalog row never committed."""
    out = []
    for entry in sorted(os.listdir(directory)):
        full = os.path.join(directory, entry)
        if entry.startswith(".") or STAGING_INFIX in entry or not os.path.isdir(full):
            continue
        marker = read_marker(full)
        if marker is None:
            continue
        if catalog.is_registered(TableName(database, entry)):
            if not dry_run:
                unlink_quietly(os.path.join(full, STAGED_MARKER))  # published: the marker has done its work
            continue
        remove, reason = abandoned(marker, older_than, now)
        out.append(StagingEntry(full, "staged-table", None, remove, "an interrupted CREATE TABLE AS moved it to "
                                f"its location, but its catalog row never committed: {reason}"))
        if remove and not dry_run:
            shutil.rmtree(full, ignore_errors=True)
    return out


def clean_name(catalog, database: str, table: str, older_than: dt.timedelta = STAGING_AGE,
               dry_run: bool = False) -> list[StagingEntry]:
    """The reservation of one name, when a dead CREATE TABLE AS holds it (through a JDBC catalog on
    an object store; elsewhere a name has no reservation: nothing)."""
    if not reservations.applies(catalog.config):
        return []
    return [_entry(s) for s in reservations.sweep(catalog, older_than.total_seconds(), dry_run,
                                                  only=(database, table))]


def _entry(swept: reservations.Swept) -> StagingEntry:
    held = swept.reservation
    beat = dt.datetime.fromtimestamp(held.heartbeat_at_ms / 1000, dt.timezone.utc) if held.heartbeat_at_ms else None
    return StagingEntry(swept.location, "reserved-table", beat, swept.removed,
                        f"CREATE TABLE AS of {held.database}.{held.table}: {swept.reason}")


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
