"""Rows of a JDBC catalog that lakesink writes itself: a table entered in one transaction.

pypaimon's `create_table` deletes the table directory when its INSERT fails, which under
a race is the winner's table: `insert_entry` lets the row's primary key decide between
concurrent creators and does nothing when it loses. Also how a catalog tells a lost
connection and a driver's error (`catalog.Catalog` reconnects on those).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ... import dbapi
from ...errors import CommitStateUnknownError, DatabaseConnectionError
from ..table.catalog_lock import first_line

if TYPE_CHECKING:
    from .config import CatalogConfig
    from .names import TableName


def connection_lost(paimon) -> bool:
    """The DB-API connection under a pypaimon JDBC catalog is closed or broken."""
    conn = paimon.connection.connection
    closed = getattr(conn, "closed", False)  # psycopg: True / non-zero once closed or broken
    if closed:
        return True
    try:
        conn.cursor().close()  # sqlite3: ProgrammingError on a closed connection
        return False
    except Exception:  # noqa: BLE001
        return True


def is_driver_error(exc: BaseException) -> bool:
    """An error of a DB-API driver (sqlite3, psycopg, ...): they all derive from their module's Error."""
    module = type(exc).__module__.split(".")[0]
    return module in ("sqlite3", "psycopg", "psycopg2", "pymysql", "mysql")


def insert_entry(paimon, name: TableName, schema, config: CatalogConfig,
                 inside: Callable[[], None] | None = None, attempts: int = 50) -> bool:
    """Insert the table's row into Paimon's `paimon_tables` (and its properties, as pypaimon's
    `create_table` does) and run `inside` in the same transaction, then commit.

    The row's primary key decides between concurrent creators: returns False, having done nothing,
    when the row exists (another writer won). A failure after `inside` ran rolls back the row; a
    failed COMMIT is a `CommitStateUnknownError` (the row may exist: nothing is undone).
    """
    conn = paimon.connection
    identifier = name.identifier()

    def insert() -> bool:
        try:
            conn.execute("INSERT INTO paimon_tables (catalog_key, database_name, table_name) VALUES (?, ?, ?)",
                         (paimon.catalog_key, name.database, name.table))
            if paimon._sync_all_properties():
                paimon._insert_table_properties(identifier, paimon._collect_table_properties(schema))
            return True
        except Exception:  # noqa: BLE001 - the driver's IntegrityError, or a busy SQLite
            dbapi.rollback(conn.connection)
            try:
                if paimon._table_exists(identifier):
                    return False
            except Exception:  # noqa: BLE001
                dbapi.rollback(conn.connection)
            raise

    try:
        if not dbapi.retry_busy(insert, attempts=attempts, pause=lambda attempt: min(0.05 * (attempt + 1), 0.5)):
            return False
    except Exception as exc:  # noqa: BLE001
        raise DatabaseConnectionError(f"Cannot enter {name} into the {config.describe()}: "
                                      f"{first_line(exc)}. Nothing was changed.", table=str(name)) from exc
    try:
        if inside is not None:
            inside()
    except BaseException:
        dbapi.rollback(conn.connection)
        raise
    try:
        conn.connection.commit()
    except Exception as exc:  # noqa: BLE001
        raise CommitStateUnknownError(
            f"Entering {name} into the {config.describe()}: the database's COMMIT failed ({first_line(exc)}); "
            "the entry may or may not exist. Nothing was deleted: look at the catalog, and run "
            "lakesink.catalog(spark).clean_staging() if it has no entry.", table=str(name)) from exc
    return True


def update_properties(paimon, name: TableName, schema) -> None:
    """Rewrite a JDBC table's properties from its (new) schema, as pypaimon's `alter_table` does."""
    if not paimon._sync_all_properties():
        return
    conn = paimon.connection
    with conn.transaction():
        conn.execute("DELETE FROM paimon_table_properties WHERE catalog_key = ? AND database_name = ? "
                     "AND table_name = ?", (paimon.catalog_key, name.database, name.table))
        paimon._insert_table_properties(name.identifier(), paimon._collect_table_properties(schema))
