"""Name reservations in a JDBC catalog's database: CREATE TABLE AS in place on object stores.

Paimon's JDBC catalog derives a table's location from its name
(`<warehouse>/<db>.db/<table>`), and an object store cannot rename a staged
directory into it. So a CREATE TABLE AS through a JDBC catalog on an object
store writes the table where it will live, and keeps the *name* out of the
catalog until commit with a row of lakesink's own table in the catalog's
database (never in Paimon's tables, so no Paimon engine sees it):

    lakesink_staged_tables(catalog_key, database_name, table_name,  -- primary key
                           token, location, host, pid, created_at_ms, heartbeat_at_ms)

* **reserve**: one transaction INSERTs the row, then looks for the name in
  `paimon_tables`. The primary key lets one of concurrent creators through.
* **register guard**: lakesink's plain registration of a new table (a write by
  name creating it) INSERTs and DELETEs a row of the same key inside its own
  transaction: under PostgreSQL's READ COMMITTED the key conflict makes it wait
  for, and then see, a concurrent reservation (a SELECT alone would not).
* **heartbeat**: the reserving driver updates `heartbeat_at_ms` every
  `HEARTBEAT_S`; a row whose process on this host is gone, or whose heartbeat is
  older than the threshold, is abandoned.
* **claim**: whoever deletes a location's files first takes the row over with a
  compare-and-set on `token` and `heartbeat_at_ms` (a later CREATE TABLE AS,
  `clean_staging`, the sweep after commits), so two cleaners, or a cleaner and a
  new creator, never delete each other's files, and a beat that lands between a
  cleaner's look and its claim keeps the row its job's.
* **sweep** (`sweep`/`clean`): the catalog-wide removal of abandoned rows and
  their locations' files, by the rule above with `EXPIRY_S` (1 h) unless told:
  `Catalog.clean_staging()`, `lakesink clean-staging --catalog ...`, and the
  maintenance after commits to the catalog's tables (maintenance/catalog_sweep.py).

Times are the clients' clocks (milliseconds since the epoch): thresholds of
minutes to hours dwarf their skew.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from ... import dbapi, storage
from ...errors import DatabaseConnectionError, TableAlreadyExistsError, TableNotFoundError
from ...protocol.staging import STAGING_AGE
from .staged_table import _age_text, _alive

log = logging.getLogger(__name__)

TABLE = "lakesink_staged_tables"
HEARTBEAT_S = 30.0
# A reservation without a heartbeat for this long is abandoned (120 missed beats): the sweeps' default.
EXPIRY_S = STAGING_AGE.total_seconds()  # an hour: every clean_staging's default
_COLUMNS = "token, location, host, pid, created_at_ms, heartbeat_at_ms"
_KEY = "catalog_key = ? AND database_name = ? AND table_name = ?"


@dataclass(frozen=True)
class Reservation:
    database: str
    table: str
    token: str
    location: str
    host: str
    pid: int
    created_at_ms: int
    heartbeat_at_ms: int

    def abandoned(self, older_than_s: float, now: float | None = None) -> tuple[bool, str]:
        """Whether its job is over, and why (or why it may still run)."""
        now = time.time() if now is None else now
        quiet = now - self.heartbeat_at_ms / 1000
        if self.host == socket.gethostname() and not _alive(self.pid):
            return True, f"its job's process {self.pid} on this host is gone"
        if quiet > older_than_s:
            return True, f"no heartbeat for {_age_text(quiet)}, longer than {_age_text(older_than_s)}"
        return False, self.describe(now)

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        where = "this host" if self.host == socket.gethostname() else self.host
        return (f"a CREATE TABLE AS by process {self.pid} on {where}, started "
                f"{_age_text(now - self.created_at_ms / 1000)} ago, last heartbeat "
                f"{_age_text(now - self.heartbeat_at_ms / 1000)} ago")


def new_token() -> str:
    return uuid.uuid4().hex


def _now_ms() -> int:
    return int(time.time() * 1000)


def ensure_table(paimon) -> None:
    """Create the reservations table if missing (its own transaction)."""
    conn = paimon.connection
    if getattr(conn, "_lakesink_reservations", False):
        return
    create = (f"CREATE TABLE IF NOT EXISTS {TABLE} (catalog_key VARCHAR(255) NOT NULL, "
              "database_name VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, "
              "token VARCHAR(64) NOT NULL, location VARCHAR(4000) NOT NULL, host VARCHAR(255) NOT NULL, "
              "pid BIGINT NOT NULL, created_at_ms BIGINT NOT NULL, heartbeat_at_ms BIGINT NOT NULL, "
              "PRIMARY KEY (catalog_key, database_name, table_name))")

    def create_table():
        conn.execute(create)
        conn.connection.commit()

    try:
        # PostgreSQL: concurrent CREATE ... IF NOT EXISTS may collide on its catalog's unique index.
        dbapi.retry_busy(create_table, undo=lambda: dbapi.rollback(conn.connection), also=dbapi.duplicate)
    except Exception as exc:  # noqa: BLE001
        raise DatabaseConnectionError(f"Cannot create {TABLE} in the catalog database: "
                                      f"{type(exc).__name__}: {exc}".strip()) from exc
    conn._lakesink_reservations = True


def retrying(conn, action):
    """`action()` (one transaction, committed by it), again while SQLite answers busy."""
    return dbapi.retry_busy(action, attempts=100, pause=lambda attempt: min(0.02 * (attempt + 1), 0.25),
                            undo=lambda: dbapi.rollback(conn.connection))


def find(paimon, database: str, table: str) -> Reservation | None:
    """The name's reservation, if any (ends the read transaction)."""
    ensure_table(paimon)
    conn = paimon.connection
    try:
        row = conn.fetch_one(f"SELECT {_COLUMNS} FROM {TABLE} WHERE {_KEY}",
                             (paimon.catalog_key, database, table))
    finally:
        dbapi.rollback(conn.connection)
    return None if row is None else Reservation(database, table, *_typed(row))


def list_all(paimon) -> list[Reservation]:
    ensure_table(paimon)
    conn = paimon.connection
    try:
        rows = conn.fetch_all(f"SELECT database_name, table_name, {_COLUMNS} FROM {TABLE} WHERE catalog_key = ? "
                              "ORDER BY database_name, table_name", (paimon.catalog_key,))
    finally:
        dbapi.rollback(conn.connection)
    return [Reservation(r[0], r[1], *_typed(r[2:])) for r in rows]


def _typed(row) -> tuple:
    token, location, host, pid, created, heartbeat = row
    return str(token), str(location), str(host), int(pid), int(created), int(heartbeat)


def registered(paimon, database: str, table: str) -> bool:
    row = paimon.connection.fetch_one("SELECT 1 FROM paimon_tables WHERE " + _KEY,
                                      (paimon.catalog_key, database, table))
    return row is not None


def reserve(paimon, database: str, table: str, token: str, location: str) -> str:
    """Take the name. Returns "reserved", "registered" (the catalog holds the table: nothing done)
    or "taken" (another reservation holds it: nothing done)."""
    ensure_table(paimon)
    conn = paimon.connection
    now = _now_ms()

    def attempt():
        try:
            conn.execute(f"INSERT INTO {TABLE} (catalog_key, database_name, table_name, {_COLUMNS}) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (paimon.catalog_key, database, table, token, location, socket.gethostname(),
                          os.getpid(), now, now))
        except Exception as exc:  # noqa: BLE001
            if dbapi.duplicate(exc):
                dbapi.rollback(conn.connection)
                return "taken"
            raise
        # After the INSERT: a registration racing with us either committed (visible now) or waits
        # on our key (see the register guard).
        if registered(paimon, database, table):
            dbapi.rollback(conn.connection)
            return "registered"
        conn.connection.commit()
        return "reserved"

    return retrying(conn, attempt)


def claim(paimon, old: Reservation, token: str) -> bool:
    """Take `old` over (compare-and-set on its token and last heartbeat); False when someone else
    changed it first, or its job beat since `old` was read (then it is alive after all)."""
    conn = paimon.connection
    now = _now_ms()

    def attempt():
        count = conn.execute(f"UPDATE {TABLE} SET token = ?, host = ?, pid = ?, created_at_ms = ?, "
                             f"heartbeat_at_ms = ? WHERE {_KEY} AND token = ? AND heartbeat_at_ms = ?",
                             (token, socket.gethostname(), os.getpid(), now, now, paimon.catalog_key,
                              old.database, old.table, old.token, old.heartbeat_at_ms))
        conn.connection.commit()
        return count == 1

    return retrying(conn, attempt)


def delete(paimon, database: str, table: str, token: str) -> bool:
    """Delete the reservation if it is still `token`'s (its own transaction)."""
    conn = paimon.connection

    def attempt():
        count = delete_in_transaction(paimon, database, table, token)
        conn.connection.commit()
        return count == 1

    return retrying(conn, attempt)


def delete_in_transaction(paimon, database: str, table: str, token: str) -> int:
    return paimon.connection.execute(f"DELETE FROM {TABLE} WHERE {_KEY} AND token = ?",
                                     (paimon.catalog_key, database, table, token))


def guard_registration(paimon, database: str, table: str) -> Reservation | None:
    """Inside a registration's transaction, after its INSERT into `paimon_tables`: the reservation
    of the name, if one exists (the caller then rolls back). Must run with the table created."""
    token = "register-" + new_token()[:20]
    try:
        paimon.connection.execute(
            f"INSERT INTO {TABLE} (catalog_key, database_name, table_name, {_COLUMNS}) "
            "VALUES (?, ?, ?, ?, '', ?, ?, 0, 0)",
            (paimon.catalog_key, database, table, token, socket.gethostname(), os.getpid()))
    except Exception as exc:  # noqa: BLE001
        if not dbapi.duplicate(exc):
            raise
        dbapi.rollback(paimon.connection.connection)
        return find(paimon, database, table) or Reservation(database, table, "?", "", "?", -1, 0, 0)
    delete_in_transaction(paimon, database, table, token)
    return None


def refuse(held: Reservation, name: str, where: str, purpose: str) -> None:
    """Name resolution of a reserved name without a catalog row: no table to read, and none a write
    may create (it would write into the table being created). Other purposes see no table."""
    if purpose not in ("read", "write"):
        return
    hint = (" Its job looks dead: lakesink.catalog(spark).clean_staging() (or `lakesink clean-staging "
            "--catalog ...`, or the next commit to a table of this catalog) removes what it left."
            if held.abandoned(EXPIRY_S)[0] else " It enters the catalog when that job commits.")
    text = f"Table {name} is being created by {held.describe()}; it is not in the {where} yet.{hint} " \
           "Nothing was changed."
    if purpose == "read":
        raise TableNotFoundError(text, table=name)
    raise TableAlreadyExistsError(text, table=name)


def registration_guard(paimon, database: str, table: str, where: str):
    """For `catalog_rows.insert_entry(inside=...)`: refuse to register a name a CREATE TABLE AS holds."""
    ensure_table(paimon)

    def guard():
        if guard_registration(paimon, database, table) is not None:
            raise TableAlreadyExistsError(
                f"Table {database}.{table} is being created by a CREATE TABLE AS in the {where}; write after "
                "it commits. Nothing was registered.", table=f"{database}.{table}")

    return guard


class Heartbeat:
    """Keeps a reservation's `heartbeat_at_ms` fresh from a daemon thread with its own connection."""

    def __init__(self, open_connection, database: str, table: str, token: str, every_s: float = HEARTBEAT_S):
        self._open, self.database, self.table, self.token = open_connection, database, table, token
        self.every_s = every_s
        self.lost = False  # the row is no longer ours (removed as abandoned)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakesink-ctas-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        paimon = None
        try:
            while not self._stop.wait(self.every_s):
                try:
                    paimon = paimon or self._open()
                    if not self._beat(paimon):
                        self.lost = True
                        log.warning("the reservation of %s.%s was taken away (judged abandoned): this CREATE "
                                    "TABLE AS cannot commit", self.database, self.table)
                        return
                except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the threshold is long
                    log.warning("CREATE TABLE AS heartbeat of %s.%s failed: %s", self.database, self.table, exc)
                    paimon = None
        finally:
            if paimon is not None:
                paimon.close()

    def _beat(self, paimon) -> bool:
        conn = paimon.connection

        def attempt():
            count = conn.execute(f"UPDATE {TABLE} SET heartbeat_at_ms = ? WHERE {_KEY} AND token = ?",
                                 (_now_ms(), paimon.catalog_key, self.database, self.table, self.token))
            conn.connection.commit()
            return count == 1

        return retrying(conn, attempt)


def applies(config) -> bool:
    """Whether CREATE TABLE AS by name reserves names (a JDBC catalog whose warehouse is on an
    object store); a local warehouse stages beside the table and renames (ctas.py)."""
    return config.metastore == "jdbc" and not storage.is_local(config.warehouse)


def delete_location(location: str, fs_options: dict | None) -> None:
    """Every object under `<location>/` (never a sibling whose name starts alike)."""
    storage.file_io(location, fs_options).delete_directory_quietly(storage.normalize(location))


def location_of(paimon, database: str, table: str) -> str:
    from pypaimon.common.identifier import Identifier
    return storage.normalize(paimon.get_table_path(Identifier.create(database, table)))


@dataclass(frozen=True)
class Swept:
    """One reservation a sweep looked at: whether its location was (or, in a dry run, would be)
    removed, and why."""

    reservation: Reservation
    location: str
    removed: bool
    reason: str


def sweep(catalog, older_than_s: float = EXPIRY_S, dry_run: bool = False,
          only: tuple[str, str] | None = None) -> list[Swept]:
    """Remove what abandoned CREATE TABLE AS jobs of `catalog` (a lakesink Catalog) left: their
    locations' files, then their reservations (of name `only`, a (database, table), if given).
    A reservation is abandoned by `Reservation.abandoned`: its process on this host is gone, or it
    has not beaten for `older_than_s`; a live job beats every `HEARTBEAT_S`."""
    out = []
    fs = catalog.config.fs_options or None
    if only is not None:
        found = catalog._call(lambda paimon: find(paimon, *only))
        held_rows = [] if found is None else [found]
    else:
        held_rows = catalog._call(list_all)
    for held in held_rows:
        if held.token.startswith("register-"):
            continue  # a registration's guard row: never committed, seen only by a dirty read
        dead, why = held.abandoned(older_than_s)
        expected = catalog._call(lambda paimon: location_of(paimon, held.database, held.table))
        if not dead:
            log.info("keeping the reservation of %s.%s: %s", held.database, held.table, why)
            out.append(Swept(held, expected, False, f"kept: {why}"))
            continue
        if storage.normalize(held.location) != expected:
            why = f"kept: its location {held.location} is not the catalog's {expected}"
            log.warning("keeping the reservation of %s.%s: %s", held.database, held.table, why)
            out.append(Swept(held, expected, False, why))
            continue
        if dry_run:
            out.append(Swept(held, expected, True, why))
            continue
        token = new_token()
        if not catalog._call(lambda paimon: claim(paimon, held, token)):
            # another cleaner or a new CREATE TABLE AS took it over first, or its job beat meanwhile
            out.append(Swept(held, expected, False, "kept: changed while looked at (taken over, or its "
                             "job beat again)"))
            continue
        # A row in paimon_tables despite the reservation: an engine that ignores reservations created
        # the table there; its files stay.
        if not catalog._call(lambda paimon: registered(paimon, held.database, held.table)):
            delete_location(expected, fs)
        catalog._call(lambda paimon: delete(paimon, held.database, held.table, token))
        log.info("removed %s (CREATE TABLE AS of %s.%s: %s)", expected, held.database, held.table, why)
        out.append(Swept(held, expected, True, why))
    return out


def clean(catalog, older_than_s: float = EXPIRY_S, dry_run: bool = False) -> list[str]:
    """`sweep`'s removed locations."""
    return [s.location for s in sweep(catalog, older_than_s, dry_run) if s.removed]


# Table paths resolved by name in this process, with their catalog (where reservations apply):
# how the maintenance after a commit finds the catalog whose reservations it sweeps.
_resolved: dict[str, object] = {}


def note(path: str, config) -> None:
    """Name resolution found table `path` in catalog `config` (a CatalogConfig)."""
    if _resolved.get(path) != config:
        _resolved[path] = config


def noted(path: str):
    """The catalog in which this process resolved a name to `path`, if any."""
    return _resolved.get(storage.normalize(path))
