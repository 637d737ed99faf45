"""A catalog's own staging: what dead CREATE TABLE AS jobs left, for the CLI and after commits.

* `clean_catalog(catalog, older_than, dry_run)`: what `Catalog.clean_staging`
  removes in every database of the catalog, as `StagingEntry`s with what was
  done and why (`lakesink clean-staging --catalog ...` without a TABLE). Through
  a JDBC catalog on an object store that is the dead name reservations
  (catalog/reservations.py) and their locations' files; on a local warehouse the
  staged tables of CREATE TABLE AS jobs whose process is gone.
* `after_commit(path, fs_options)`: called by the maintenance after each commit.
  When the table belongs to a JDBC catalog whose warehouse is on an object
  store, sweep that catalog's dead reservations (`reservations.sweep` with
  `reservations.EXPIRY_S`: the owner's process on this host is gone, or no
  heartbeat for an hour; a running job beats every 30 s) in a background
  thread, at most once per `SWEEP_EVERY_S` per catalog and process. A commit
  costs nothing more than a dictionary lookup when no sweep is due; a due sweep
  is one SELECT of `lakesink_staged_tables`, plus the removal of what it finds.

The committed table's catalog is the one this process resolved its name in
(`reservations.noted`), else the one its JDBC catalog lock names (the lock
travels with the table's storage options into Spark's commit process and the
streaming committer, which resolve no names): connection and `catalog-key` from
the lock, warehouse from the table's path minus `/<database>.db/<table>`.
A failed sweep is logged and never fails or delays a commit; the next one
after the interval tries again.
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import threading
import time

from ... import options as registry
from ... import storage
from ..catalog import reservations
from .staging import StagingEntry, _staged_tables

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 600.0

_lock = threading.Lock()
_last: dict[tuple[str, str], float] = {}  # (uri, catalog-key) -> when its last sweep started (monotonic)
_threads: list[threading.Thread] = []


# ---------------------------------------------------------------- the whole catalog, on demand

def clean_catalog(catalog, older_than: dt.timedelta = dt.timedelta(days=1), dry_run: bool = False,
                  beat: dt.timedelta = dt.timedelta(seconds=reservations.EXPIRY_S)) -> list[StagingEntry]:
    """Remove (unless `dry_run`) what interrupted CREATE TABLE AS jobs left in `catalog` (a lakesink
    Catalog): `Catalog.clean_staging`, with every entry found and why it was removed or kept.
    `beat`: a reservation without a heartbeat for longer is abandoned; `older_than`: a staged table
    (local warehouse, no heartbeat) started longer ago is."""
    if reservations.applies(catalog.config):
        return [_entry(s) for s in reservations.sweep(catalog, beat.total_seconds(), dry_run)]
    seconds = older_than.total_seconds()
    if not storage.is_local(catalog.warehouse):
        return []  # a filesystem catalog on an object store stages nothing (no atomic CTAS there)
    from ..catalog.staged_table import local_dir
    now = time.time()
    found: list[StagingEntry] = []
    for database in catalog.list_databases():
        found += _staged_tables(local_dir(catalog.database_path(database)), None, older_than, now)
    removed = set(catalog.clean_staging(seconds, dry_run))
    out = [StagingEntry(e.path, e.kind, e.modified_at, e.path in removed, e.reason) for e in found]
    listed = {e.path for e in found}
    # JDBC: a table moved to its location whose catalog row never committed (marker inside it)
    out += [StagingEntry(path, "staged-table", None, True, "an interrupted CREATE TABLE AS moved it to its "
                         "location, but its catalog row never committed")
            for path in sorted(removed - listed)]
    return out


def clean_name(catalog, database: str, table: str, beat: dt.timedelta,
               dry_run: bool = False) -> list[StagingEntry]:
    """The same for one name: its reservation, when a dead CREATE TABLE AS holds it (through a JDBC
    catalog on an object store; elsewhere a name has no reservation: nothing)."""
    if not reservations.applies(catalog.config):
        return []
    return [_entry(s) for s in reservations.sweep(catalog, beat.total_seconds(), dry_run,
                                                  only=(database, table))]


def _entry(swept: reservations.Swept) -> StagingEntry:
    held = swept.reservation
    beat = dt.datetime.fromtimestamp(held.heartbeat_at_ms / 1000, dt.timezone.utc) if held.heartbeat_at_ms else None
    return StagingEntry(swept.location, "reserved-table", beat, swept.removed,
                        f"CREATE TABLE AS of {held.database}.{held.table}: {swept.reason}")


# ---------------------------------------------------------------- after commits

def after_commit(path: str, fs_options: dict | None) -> None:
    """Start a sweep of the committed table's catalog's dead reservations, if one is due."""
    try:
        config = catalog_of(path, fs_options)
    except Exception as exc:  # noqa: BLE001 - never fail a commit for the catalog's sweep
        log.debug("no catalog sweep after the commit to %s: %s", path, exc)
        return
    if config is None:
        return
    opts = config.options
    key = (opts["uri"], opts.get("catalog-key", registry.option("catalog-key").default))
    now = time.monotonic()
    with _lock:
        last = _last.get(key)
        if last is not None and now - last < SWEEP_EVERY_S:
            return
        _last[key] = now
        thread = threading.Thread(target=_sweep, args=(config,), name="lakesink-ctas-sweep", daemon=True)
        _threads[:] = [t for t in _threads if t.is_alive()] + [thread]
        thread.start()


def catalog_of(path: str, fs_options: dict | None):
    """The CatalogConfig of a JDBC catalog on an object store holding the table at `path`, or None."""
    path = storage.normalize(path)
    config = reservations.noted(path)
    if config is not None:
        return config
    from ..table import catalog_lock
    text = (fs_options or {}).get(catalog_lock.OPTION)
    if not text:
        return None
    from ..catalog.config import CatalogConfig
    lock = catalog_lock.CatalogLock.from_option(text)
    suffix = f"/{lock.database}.db/{lock.table}"
    if not path.endswith(suffix):
        return None
    raw = {"metastore": "jdbc", **dict(lock.connection), "catalog-key": lock.catalog_key,
           "warehouse": path[:-len(suffix)]}
    raw.update({k: v for k, v in fs_options.items() if k != catalog_lock.OPTION and registry.is_storage_option(k)})
    config = CatalogConfig.parse(raw)
    return config if reservations.applies(config) else None


def _sweep(config) -> None:
    try:
        from ..catalog.catalog import open_catalog
        removed = reservations.clean(open_catalog(config), reservations.EXPIRY_S)
        if removed:
            log.info("removed what dead CREATE TABLE AS jobs left in the %s: %s", config.describe(),
                     ", ".join(removed))
    except Exception as exc:  # noqa: BLE001 - logged; the next sweep after the interval tries again
        log.warning("sweeping dead CREATE TABLE AS reservations of the %s failed: %s", config.describe(), exc)


def wait(timeout: float | None = None) -> None:
    """Wait for the sweeps started so far (tests; interpreter exit)."""
    for thread in list(_threads):
        thread.join(timeout)


def forget() -> None:
    """Make the next commit of every catalog sweep at once (tests)."""
    with _lock:
        _last.clear()


@atexit.register
def _drain() -> None:
    wait(timeout=30)  # a sweep killed midway is finished by the next (its claim names a dead process)
