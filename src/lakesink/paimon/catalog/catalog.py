"""Tables by name: pypaimon's catalogs (filesystem, JDBC) and the one rule from a name to a table.

The rule (docs/catalogs.md), the same for every entry point:

* a string holding `/` or `\\` is a **path**, with or without a catalog
  (`./orders` for a relative one);
* any other string is a **name**: `database.table`, `table` (database
  `default`) or `<catalog name>.database.table`, with backquotes around parts
  holding dots; it resolves through the session's catalog to the table's
  location, `<warehouse>/<database>.db/<table>` (pypaimon's `get_table_path`);
* a name that is also a relative path holding a Paimon table is refused
  (`AmbiguousTableNameError`): write `./name` for the path.

What a name's table *is* comes from the catalog: in a filesystem catalog the
directory; in a JDBC catalog the row of Paimon's `paimon_tables` table, which
must agree with the storage (a row without a table, or a table without a row,
is a `CatalogInconsistencyError`, never guessed at).

pypaimon does the catalog work (opening, listing, creating databases,
dropping). lakesink adds what pypaimon's JDBC catalog cannot do safely: it
registers a table lakesink has created with one INSERT that tolerates a
concurrent registration (pypaimon's `create_table` deletes the table directory
when its INSERT fails, which under a race is the winner's table), and it
publishes staged CREATE TABLE AS (ctas.py; on an object store written
in place under a name reservation, ctas_in_place.py and reservations.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from ... import dbapi, storage
from ...errors import (AmbiguousTableNameError, CatalogInconsistencyError, ConfigurationError,
                      DatabaseConnectionError, DatabaseNotFoundError, NotAPaimonTableError, TableNotFoundError)
from ...protocol.staging import STAGING_AGE, staging_age
from ..table import tables
from . import cleanup, reservations
from .config import CatalogConfig, connect
from ..table.catalog_lock import first_line
from .names import DEFAULT_DATABASE, PURPOSES, TableName, is_path, local_table, split_name, split_suffix
from .rows import connection_lost, insert_entry, is_driver_error
from .staged_table import MARKER as STAGED_MARKER

log = logging.getLogger(__name__)

__all__ = ["Catalog", "CatalogConfig", "CatalogEntry", "ResolvedTable", "TableName", "is_path", "open_catalog",
           "resolve"]


# ------------------------------------------------------------------ opening

_open: dict[CatalogConfig, Catalog] = {}
_open_lock = threading.Lock()
_open_pid = os.getpid()


def open_catalog(config: CatalogConfig | Mapping[str, object]) -> Catalog:
    """The catalog for these options, opened once per process (a JDBC catalog holds a connection)."""
    global _open_pid
    if not isinstance(config, CatalogConfig):
        config = CatalogConfig.parse(config)
    with _open_lock:
        if _open_pid != os.getpid():  # a forked child must not share its parent's connections
            _open.clear()
            _open_pid = os.getpid()
        catalog = _open.get(config)
        if catalog is None:
            catalog = Catalog(config)
            _open[config] = catalog
        return catalog


@dataclass(frozen=True)
class ResolvedTable:
    """Where a path or name leads. `name`/`catalog` are None for a path (paths never touch a catalog)."""

    path: str
    name: TableName | None = None
    exists: bool | None = None         # None: a path, not looked at
    fs_options: dict = field(default_factory=dict)
    catalog: CatalogConfig | None = None

    @property
    def entry(self) -> CatalogEntry | None:
        """For a write by name to a table the catalog does not hold: how to create it."""
        if self.name is None or self.exists or self.catalog is None:
            return None
        return CatalogEntry(self.catalog, self.name, self.path)

    def with_fs_options(self, options: Mapping[str, object] | None) -> dict:
        """The caller's options over the catalog's storage options (credentials given once)."""
        return {**self.fs_options, **dict(options or {})}

    def __str__(self) -> str:
        return str(self.name) if self.name is not None else self.path


@dataclass(frozen=True)
class CatalogEntry:
    """Creates a named table at first write: lakesink's own create at the catalog's location, then
    the catalog's registration. Picklable: it rides in `WriteOptions.catalog_entry`."""

    catalog: CatalogConfig
    name: TableName
    path: str

    def create(self, target) -> None:
        """`target`: the planned `PaimonTarget` (its `create` spec is the table lakesink makes)."""
        table = target.table_or_create()  # a concurrent creator's table is used if it fits
        open_catalog(self.catalog).register(self.name, table.table_schema)


def resolve(text: str, catalog: Catalog | None, purpose: str = "read") -> ResolvedTable:
    """The one rule from a path or name to a table (docs/catalogs.md).

    `purpose`: "read" (the table must exist), "write" (may be missing: it is created by name, in an
    existing database), "create" (CREATE TABLE AS: may exist, in an existing database), "drop" (a
    catalog entry without files is not an error), "locate" (only where it is, and whether it exists).
    """
    text = str(text)
    if not text.strip():
        raise ConfigurationError("An empty table path or name.")
    if is_path(text):
        return ResolvedTable(storage.normalize(text))
    if catalog is None:
        raise ConfigurationError(
            f"{text!r} is a table name (it holds no '/'), but this session has no catalog. Set one with "
            "lakesink.session(catalog={'warehouse': '/data/wh'}) (or lakesink.register(spark, catalog=...)), "
            f"or give a path: './{text}' for a relative one.", table=text)
    return catalog.resolve(text, purpose)


# ------------------------------------------------------------------ the catalog

def _refuse_suffix(name: TableName) -> None:
    """A name with Paimon's `$` suffix (`t$branch_b`, `t$snapshots`) is not table `t`: refused
    rather than resolved to `t` (the entry points that take a branch split it off first)."""
    base, branch, _ = split_suffix(name.table)
    if branch is not None:
        raise ConfigurationError(
            f"'{name}' names branch {branch!r} of {name.database}.{base}: here give the table and the branch "
            f"apart, options={{'branch': {branch!r}}} (writes, format(\"paimon\")) or branch={branch!r}. Nothing "
            "was read or written.", table=str(name),
            option="branch")
    raise ConfigurationError(
        f"'{name}' names one of Paimon's system tables, which lakesink does not read or write; lakesink.history "
        "and the `lakesink` CLI show snapshots, tags and files. Nothing was read or written.", table=str(name))


class Catalog:
    """A Paimon catalog: pypaimon's, with lakesink's name rule and checks on top.

    >>> cat = lakesink.catalog(spark)                      # doctest: +SKIP
    >>> cat.create_database("shop"); cat.list_tables("shop")  # doctest: +SKIP
    """

    def __init__(self, config: CatalogConfig):
        self.config = config
        self._lock = threading.RLock()  # one connection, used by one thread at a time
        self._paimon = connect(config)

    # -- what it is ----------------------------------------------------------
    @property
    def name(self) -> str:
        return self.config.name

    @property
    def metastore(self) -> str:
        return self.config.metastore

    @property
    def warehouse(self) -> str:
        return self.config.warehouse

    @property
    def is_jdbc(self) -> bool:
        return self.metastore == "jdbc"

    def __repr__(self) -> str:
        return f"<lakesink catalog: {self.config.describe()}>"

    def _call(self, method, *args):
        """pypaimon's `method` under the lock. JDBC: its implicit read transaction is ended (no
        connection idles in a transaction); a dropped connection is opened again once; a database
        error becomes a `DatabaseConnectionError`."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    if callable(method):  # a function of the pypaimon catalog, under the same rules
                        return method(self._paimon)
                    return getattr(self._paimon, method)(*args)
                except Exception as exc:
                    if not (self.is_jdbc and is_driver_error(exc)):
                        raise
                    self._rollback()
                    if attempt == 1 and connection_lost(self._paimon):
                        log.info("catalog connection lost (%s): reconnecting", first_line(exc))
                        self._paimon = connect(self.config)
                        continue
                    raise DatabaseConnectionError(f"The catalog database of the {self.config.describe()} "
                                                  f"failed: {first_line(exc)}") from exc
                finally:
                    if self.is_jdbc:
                        self._rollback()

    def _rollback(self) -> None:
        dbapi.rollback(self._paimon.connection.connection)

    # -- names ---------------------------------------------------------------
    def parse_name(self, text: str) -> TableName:
        parts = split_name(text)
        if len(parts) == 3:
            if parts[0] != self.name:
                raise ConfigurationError(
                    f"{text!r} names catalog {parts[0]!r}, but this session's catalog is {self.name!r} "
                    "(catalog option 'name').", table=text)
            parts = parts[1:]
        if len(parts) == 1:
            parts = [DEFAULT_DATABASE, parts[0]]
        if len(parts) != 2 or not all(parts):
            raise ConfigurationError(
                f"{text!r} is not a table name: expected 'database.table', 'table' or "
                f"'{self.name}.database.table' (backquote parts holding dots), or a path holding '/'.",
                table=text)
        return TableName(parts[0], parts[1])

    def table_path(self, name: TableName) -> str:
        return storage.normalize(self._paimon.get_table_path(name.identifier()))

    def database_path(self, database: str) -> str:
        return storage.normalize(self._paimon.get_database_path(database))

    def resolve(self, text: str, purpose: str = "read") -> ResolvedTable:
        if purpose not in PURPOSES:
            raise ValueError(purpose)
        if is_path(text):
            return ResolvedTable(storage.normalize(text))
        name = self.parse_name(text)
        if "$" in name.table:
            _refuse_suffix(name)
        if local_table(text):
            raise AmbiguousTableNameError(
                f"{text!r} is both a table name in the {self.config.describe()} and a Paimon table in the "
                f"working directory ({os.path.abspath(text)}). Write './{text}' for the directory, or "
                f"'{name}' after moving it away. Nothing was read or written.", table=text)
        path = self.table_path(name)
        exists = self._exists(name, path, purpose)
        if not exists and purpose != "locate":
            if not self.database_exists(name.database):
                raise DatabaseNotFoundError(
                    f"Database {name.database!r} does not exist in the {self.config.describe()}: create it "
                    f"with lakesink.catalog(spark).create_database({name.database!r}). Nothing was changed.",
                    table=str(name))
            if purpose == "read":
                raise TableNotFoundError(
                    f"Table {name} does not exist in the {self.config.describe()} (its tables: "
                    f"{', '.join(self.list_tables(name.database)) or 'none'}).", table=str(name))
        if reservations.applies(self.config):  # for the sweep after its commits (maintenance/catalog_sweep.py)
            reservations.note(path, self.config)
        return ResolvedTable(path, name, exists, self.config.fs_options_of(name), self.config)

    def _exists(self, name: TableName, path: str, purpose: str) -> bool:
        """Whether the catalog holds the table, checked against the storage."""
        fs = self.config.fs_options or None
        if reservations.applies(self.config) and not self.is_registered(name):
            held = self._call(lambda paimon: reservations.find(paimon, name.database, name.table))
            if held is not None:  # being created in place: no table yet (refused to readers and writers)
                reservations.refuse(held, str(name), self.config.describe(), purpose)
                return False
        try:
            on_storage = tables.open_table(path, fs) is not None
        except NotAPaimonTableError as exc:
            raise CatalogInconsistencyError(f"Table {name} of the {self.config.describe()}: {exc}",
                                            table=str(name)) from exc
        if not self.is_jdbc:
            return on_storage  # the directory is the catalog
        registered = self.is_registered(name)
        if registered and not on_storage and purpose != "drop":
            raise CatalogInconsistencyError(
                f"Table {name} is in the {self.config.describe()} but there is no table at {path}. Restore "
                f"its files, or remove the entry with lakesink.catalog(spark).drop_table('{name}'). "
                "Nothing was changed.", table=str(name))
        if on_storage and not registered:
            if storage.file_io(path, fs).exists(f"{path}/{STAGED_MARKER}"):
                if purpose == "create":
                    return False  # a new CREATE TABLE AS clears it once it holds the table's row
                raise CatalogInconsistencyError(
                    f"{path} was left by an interrupted CREATE TABLE AS of {name} (it never reached the "
                    f"catalog): lakesink.catalog(spark).clean_staging() removes it. Nothing was changed.",
                    table=str(name))
            raise CatalogInconsistencyError(
                f"There is a Paimon table at {path} but the {self.config.describe()} has no entry for {name}. "
                f"Register it with lakesink.catalog(spark).register_table('{name}'), or move it away. "
                "Nothing was changed.", table=str(name))
        return registered

    def is_registered(self, name: TableName, paimon=None) -> bool:
        """JDBC: the table's row exists. Filesystem: the table's directory holds a table."""
        if not self.is_jdbc:
            return tables.open_table(self.table_path(name), self.config.fs_options or None) is not None
        if paimon is not None:
            return paimon._table_exists(name.identifier())
        return self._call("_table_exists", name.identifier())

    # -- databases -----------------------------------------------------------
    def list_databases(self) -> list[str]:
        if not self.is_jdbc and not storage.file_io(self.warehouse, self.config.fs_options or None).exists(
                self.warehouse):
            return []
        return self._call("list_databases")

    def database_exists(self, database: str) -> bool:
        from pypaimon.catalog.catalog_exception import DatabaseNotExistException
        try:
            self._call("get_database", database)
            return True
        except DatabaseNotExistException:
            return False

    def create_database(self, database: str, if_not_exists: bool = True) -> None:
        self._call("create_database", database, if_not_exists)

    def drop_database(self, database: str, cascade: bool = False, if_exists: bool = False) -> None:
        """Drop a database; `cascade=True` drops its tables (and their files) first."""
        from pypaimon.catalog.catalog_exception import DatabaseNotExistException
        try:
            self._call("drop_database", database, if_exists, cascade)
        except DatabaseNotExistException:
            raise DatabaseNotFoundError(f"Database {database!r} does not exist in the "
                                        f"{self.config.describe()}.") from None
        except ValueError as exc:  # pypaimon: not empty
            raise ConfigurationError(f"{exc} Nothing was dropped.") from None

    # -- tables --------------------------------------------------------------
    def list_tables(self, database: str) -> list[str]:
        from pypaimon.catalog.catalog_exception import DatabaseNotExistException
        try:
            return self._call("list_tables", database)
        except DatabaseNotExistException:
            raise DatabaseNotFoundError(f"Database {database!r} does not exist in the "
                                        f"{self.config.describe()}.") from None

    def table_exists(self, name: str) -> bool:
        """Whether the catalog holds the table (a disagreement with the storage is an error)."""
        return bool(self.resolve(name, "locate").exists)

    def location(self, name: str) -> str:
        """The table's directory (whether or not it exists yet)."""
        return self.table_path(self.parse_name(name))

    def drop_table(self, name: str, if_exists: bool = False) -> bool:
        """Remove the table from the catalog and delete its files. Also removes a JDBC entry whose
        files are gone. Returns whether something was dropped."""
        parsed = self.parse_name(name)
        resolved = self.resolve(name, "drop")
        if not resolved.exists:
            if if_exists:
                return False
            raise TableNotFoundError(f"Table {parsed} does not exist in the {self.config.describe()}.",
                                     table=str(parsed))
        self._call("drop_table", parsed.identifier(), False)
        return True

    def alter_table(self, name: str, changes: list) -> None:
        """Apply pypaimon `SchemaChange`s to the table (a new schema file; no data rewritten)."""
        parsed = self.parse_name(name)
        if not self.resolve(name, "write").exists:
            raise TableNotFoundError(f"Table {parsed} does not exist in the {self.config.describe()}.",
                                     table=str(parsed))
        self._call("alter_table", parsed.identifier(), changes, False)

    def register_table(self, name: str) -> None:
        """Enter a table that exists on storage at its catalog location into a JDBC catalog."""
        parsed = self.parse_name(name)
        if not self.is_jdbc:
            raise ConfigurationError("A filesystem catalog needs no registration: its tables are the "
                                     "directories of its warehouse.")
        path = self.table_path(parsed)
        table = tables.open_table(path, self.config.fs_options or None)
        if table is None:
            raise TableNotFoundError(f"There is no table at {path} to register as {parsed}.", table=str(parsed))
        if not self.database_exists(parsed.database):
            self.create_database(parsed.database)
        if not self.register(parsed, table.table_schema):
            raise CatalogInconsistencyError(f"{parsed} is already in the {self.config.describe()}.",
                                            table=str(parsed))

    def register(self, name: TableName, schema) -> bool:
        """JDBC: insert the table's row (and properties) in one transaction; False when another writer
        registered it first (nothing done). Filesystem: nothing to do."""
        if not self.is_jdbc:
            return True
        with self._lock:
            guard = None
            if reservations.applies(self.config):  # a CREATE TABLE AS may hold the name
                guard = reservations.registration_guard(self._paimon, name.database, name.table,
                                                        self.config.describe())
            return insert_entry(self._paimon, name, schema, self.config, inside=guard)

    def open(self, name: str):
        """The table as a pypaimon `FileStoreTable` (through the checks of `resolve`)."""
        resolved = self.resolve(name, "read")
        return tables.open_table(resolved.path, resolved.fs_options or None)

    def clean_staging(self, older_than: dt.timedelta | float = STAGING_AGE, dry_run: bool = False, *,
                      older_than_s: float | None = None) -> list[str]:
        """Remove what interrupted CREATE TABLE AS jobs left in the catalog's databases (staged
        tables, JDBC publications that never reached the catalog, on an object store the dead
        reservations' files and rows). Returns what was (with `dry_run`: would be) removed.

        `older_than` (a `datetime.timedelta`, or a number of seconds; default an hour): a job
        whose process on this host is gone is dead at once; one elsewhere once its staged table
        is older than that, or its reservation's heartbeat (every 30 s) is. `older_than_s` is the
        former keyword (deprecated)."""
        age = staging_age(older_than, older_than_s)
        return [e.path for e in cleanup.clean_catalog(self, age, dry_run) if e.remove]
