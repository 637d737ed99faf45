"""CREATE / REPLACE TABLE AS through a catalog: the table enters the catalog only at commit (FLIP-305).

* **Filesystem catalog**: the directory is the catalog entry, so the staged
  table of `staged_table.py` (a hidden sibling directory, published by one rename)
  is already the catalog transaction.
* **JDBC catalog**: the table is staged in the same hidden sibling directory;
  the commit is one database transaction: INSERT the table's row into Paimon's
  `paimon_tables` (its primary key lets exactly one of concurrent creators
  through; the others wait on the row lock and then fail, or see it), move the
  staged directory to the table's location, COMMIT. A failure before COMMIT
  rolls the row back and moves the directory back; the loser of a race removes
  its staged table. The moved directory keeps its `STAGED.json` marker until
  the row is committed, so a driver killed between the move and the COMMIT
  leaves a directory that `clean_staging` recognises (no row, owner gone) and
  removes; no reader ever sees it (name resolution refuses it).
  REPLACE: the row stays; the directories are exchanged atomically
  (`renameat2`), then the table's properties are rewritten.

A JDBC catalog whose warehouse is on an object store cannot move a directory:
there the table is written in place under a name reservation in the catalog
database (ctas_in_place.py). A filesystem catalog or a path on an object
store needs `ctas.atomicity-enabled=false`.
"""

from __future__ import annotations

import errno
import os
import shutil

from ...errors import CatalogInconsistencyError, TableAlreadyExistsError
from ...protocol import crashpoints
from ...protocol.staging import StagedTable
from . import reservations
from ..table import tables
from .catalog import Catalog, ResolvedTable
from .cleanup import unlink_quietly
from .config import connect
from .names import TableName
from .rows import insert_entry, update_properties
from .ctas_in_place import InPlaceCreate, InPlaceReplace
from .staged_table import MARKER, PaimonStagedTable, exchange, read_marker


def stage_table(resolved: ResolvedTable, catalog: Catalog | None, replace: bool = False,
                if_not_exists: bool = False, incoming=None, partition_by=(), primary_key=()) -> StagedTable:
    """The staged table for a CREATE / REPLACE TABLE AS of `resolved` (a path or a name).

    `incoming` (the DataFrame's Arrow schema), `partition_by` and `primary_key` are checked by a
    REPLACE in place (ctas_in_place.py) before anything is written."""
    if resolved.name is not None and catalog is not None and reservations.applies(catalog.config):
        if replace and resolved.exists:
            return InPlaceReplace(catalog, resolved.name, resolved.path, incoming, partition_by, primary_key)
        return InPlaceCreate(catalog, resolved.name, resolved.path, if_not_exists)
    if resolved.name is not None and catalog is not None and catalog.is_jdbc:
        return JdbcStagedTable(catalog, resolved.name, resolved.path, replace, if_not_exists)
    return PaimonStagedTable(resolved.path, replace=replace, if_not_exists=if_not_exists)


class JdbcStagedTable(PaimonStagedTable):
    def __init__(self, catalog: Catalog, name: TableName, path: str, replace: bool = False,
                 if_not_exists: bool = False):
        super().__init__(path, replace=replace, if_not_exists=if_not_exists)
        self.catalog, self.name = catalog, name

    def begin(self) -> None:
        if not self.replace and self.catalog.is_registered(self.name):
            if self.if_not_exists:
                self._skipped = True
                return
            raise TableAlreadyExistsError(f"Table {self.name} already exists in the "
                                          f"{self.catalog.config.describe()}; nothing was written.",
                                          table=str(self.name))
        self.make_staging()

    def commit(self) -> None:
        # A connection of its own: the transaction must not mix with other threads' catalog calls.
        paimon = connect(self.catalog.config)
        try:
            if self.replace and paimon._table_exists(self.name.identifier()):
                self._replace(paimon)
                return
            schema = tables.open_table(self.staging_path).table_schema
            try:
                won = insert_entry(paimon, self.name, schema, self.catalog.config, inside=self._move_in)
            except BaseException:
                self.abort()
                raise
            if not won:
                self.abort()
                raise TableAlreadyExistsError(
                    f"Table {self.name} was created in the {self.catalog.config.describe()} by another job "
                    "while this one ran; this job's data was removed.", table=str(self.name))
            unlink_quietly(os.path.join(self.path, MARKER))  # published: the marker has done its work
        finally:
            paimon.close()

    def _move_in(self) -> None:
        """Inside the transaction that holds the new row: the staged table goes to its location."""
        if os.path.isdir(self.path):
            _clear_unpublished(self.path)
        try:
            os.rename(self.staging_path, self.path)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise CatalogInconsistencyError(
                    f"{self.path} already holds files, but the {self.catalog.config.describe()} had no entry "
                    f"for {self.name}: move them away (or register_table('{self.name}')). This job's data "
                    "was removed.", table=str(self.name)) from exc
            raise
        try:
            crashpoints.reached("catalog-publish")
        except BaseException:
            os.rename(self.path, self.staging_path)  # the row rolls back: so does the move
            raise

    def _replace(self, paimon) -> None:
        os.unlink(os.path.join(self.staging_path, MARKER))
        schema = tables.open_table(self.staging_path).table_schema
        exchange(self.staging_path, self.path)
        shutil.rmtree(self.staging_path, ignore_errors=True)  # the old table
        update_properties(paimon, self.name, schema)


def _clear_unpublished(path: str) -> None:
    """Called holding the table's new row: a directory at its location carrying a CTAS marker is a
    publication whose transaction never committed (its row would block ours); lakesink's own
    leftovers without a table go too. Anything else stays (and the rename then refuses)."""
    if read_marker(path) is not None:
        shutil.rmtree(path)
    elif tables.open_table(path) is None and set(os.listdir(path)) <= {tables.LAKESINK_DIR}:
        shutil.rmtree(path)


