"""A catalog's own staging after commits: what dead CREATE TABLE AS jobs left, swept when due.

(On demand, `Catalog.clean_staging` and `lakesink clean-staging --catalog ...` run
`catalog/cleanup.py`'s `clean_catalog`.)

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
import logging
import threading
import time

from ... import options as registry
from ... import storage
from ..catalog import reservations

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 600.0

_lock = threading.Lock()
_last: dict[tuple[str, str], float] = {}  # (uri, catalog-key) -> when its last sweep started (monotonic)
_threads: list[threading.Thread] = []


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
