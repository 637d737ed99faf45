"""CREATE / REPLACE TABLE AS through a JDBC catalog on an object store: written in place.

Paimon's JDBC catalog has no per-table location: a table lives at
`<warehouse>/<db>.db/<table>`, and an object store cannot rename a staged
directory there. So the catalog database, not the directory, is what makes
the table appear (FLIP-305's "registered only at commit"):

* **begin**: reserve the name in lakesink's `lakesink_staged_tables`
  (reservations.py); of concurrent creators exactly one gets it, the others
  fail at once with `TableAlreadyExistsError` having written nothing. The
  location must be empty. A heartbeat keeps the reservation alive.
* **the job** writes the table at its final location by path (the normal write
  path). Name resolution refuses a reserved name without a catalog row, so no
  reader or writer by name sees the half-written table.
* **commit**: one database transaction INSERTs the `paimon_tables` row (and
  properties) and DELETEs the reservation. A failed COMMIT is
  `CommitStateUnknownError` and nothing is deleted.
* **abort** (failure, cancel, Ctrl-C, SIGTERM): delete every object under the
  location, then the reservation.
* **killed driver**: the reservation stays (the name stays refused);
  `Catalog.clean_staging()` removes the files and the row once the owner is
  gone (same host) or its heartbeat is older than the threshold; a later
  CREATE TABLE AS of the name on the same host takes a dead owner's
  reservation over and clears its files itself.

REPLACE TABLE AS of a table the catalog holds cannot be staged anywhere (the
location is fixed by the name), so it is the table's own OVERWRITE snapshot:
readers see the old rows or the new, never a mix. That keeps the table's
schema: the DataFrame must have its columns and types, its partition and
primary keys; any other change is refused before anything is written (drop
the table and CREATE it again, or `ctas.atomicity-enabled=false` to let the
columns evolve in place).
"""

from __future__ import annotations

import logging
import math

from ... import dbapi, storage
from ...errors import (CatalogInconsistencyError, CommitFailedError, CommitStateUnknownError,
                      SchemaMismatchError, TableAlreadyExistsError)
from ...protocol import crashpoints
from ...protocol.staging import StagedTable
from ..table import evolution, tables
from . import reservations
from .catalog import Catalog
from .config import connect
from .names import TableName
from .rows import insert_entry

log = logging.getLogger(__name__)


class InPlaceCreate(StagedTable):
    """CREATE TABLE AS by name, written at the table's location under a reservation."""

    def __init__(self, catalog: Catalog, name: TableName, path: str, if_not_exists: bool = False):
        self.catalog, self.name, self.path = catalog, name, storage.normalize(path)
        self.staging_path = self.path  # the job writes in place
        self.if_not_exists = if_not_exists
        self.fs = catalog.config.fs_options or None
        self.token = reservations.new_token()
        self._paimon = None
        self._heartbeat: reservations.Heartbeat | None = None
        self._reserved = self._skipped = self._unknown = False

    @property
    def skipped(self) -> bool:
        return self._skipped

    def _db(self):
        # A connection of its own: these transactions must not mix with other threads' catalog calls.
        if self._paimon is None:
            self._paimon = connect(self.catalog.config)
        return self._paimon

    def _close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if self._paimon is not None:
            try:
                self._paimon.close()
            finally:
                self._paimon = None

    def _where(self) -> str:
        return f"the {self.catalog.config.describe()}"

    # -- begin ----------------------------------------------------------------
    def begin(self) -> None:
        try:
            self._reserve()
        except BaseException:
            self._close()
            raise

    def _reserve(self) -> None:
        db, name = self._db(), self.name
        outcome = reservations.reserve(db, name.database, name.table, self.token, self.path)
        if outcome == "taken":
            outcome = self._take_over_dead_owner()
        if outcome == "registered":
            if self.if_not_exists:
                self._skipped = True
                self._close()
                return
            raise TableAlreadyExistsError(f"Table {name} already exists in {self._where()}; nothing was written.",
                                          table=str(name))
        self._reserved = True
        if storage.file_io(self.path, self.fs).exists(self.path):
            reservations.delete(db, name.database, name.table, self.token)
            self._reserved = False
            raise CatalogInconsistencyError(
                f"{self.path} already holds files, but {self._where()} has no entry for {name}: move them "
                f"away (or lakesink.catalog(spark).register_table('{name}') if they are that table). "
                "Nothing was written.", table=str(name))
        self._heartbeat = reservations.Heartbeat(lambda: connect(self.catalog.config), name.database,
                                                 name.table, self.token).start()

    def _take_over_dead_owner(self) -> str:
        """Another reservation holds the name: take it over if its process on this host is gone
        (clearing what it wrote), else fail. Only a dead process: age alone is clean_staging's call."""
        db, name = self._db(), self.name
        held = reservations.find(db, name.database, name.table)
        if held is None:  # it committed or aborted meanwhile: look again
            outcome = reservations.reserve(db, name.database, name.table, self.token, self.path)
            if outcome != "taken":
                return outcome
            held = reservations.find(db, name.database, name.table)
        if held is not None and held.abandoned(math.inf)[0] and reservations.claim(db, held, self.token):
            self._reserved = True
            if reservations.registered(db, name.database, name.table):
                dbapi.rollback(db.connection.connection)
                reservations.delete(db, name.database, name.table, self.token)
                self._reserved = False
                return "registered"
            dbapi.rollback(db.connection.connection)
            log.info("taking over the dead CREATE TABLE AS of %s: removing %s", name, self.path)
            reservations.delete_location(self.path, self.fs)
            return "reserved"
        what = held.describe() if held is not None else "another CREATE TABLE AS"
        raise TableAlreadyExistsError(
            f"Table {name} is being created by {what} in {self._where()}; this job wrote nothing. If that "
            "job is dead, lakesink.catalog(spark).clean_staging() removes what it left.", table=str(name))

    # -- commit ---------------------------------------------------------------
    def commit(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        db, name = self._db(), self.name
        lost = CommitFailedError(
            f"The reservation of {name} was removed while this job ran (judged abandoned by clean_staging: "
            "no heartbeat for longer than its threshold); nothing entered the catalog.", table=str(name))
        held = reservations.find(db, name.database, name.table)
        if held is None or held.token != self.token:
            raise lost
        table = tables.open_table(self.path, self.fs)
        if table is None:
            raise CommitFailedError(f"The CREATE TABLE AS job wrote no table at {self.path}; {name} did "
                                    "not enter the catalog.", table=str(name))

        def inside():  # in the transaction holding the new paimon_tables row
            if reservations.delete_in_transaction(db, name.database, name.table, self.token) != 1:
                raise lost
            crashpoints.reached("catalog-publish")

        try:
            won = insert_entry(db, name, table.table_schema, self.catalog.config, inside=inside)
        except CommitStateUnknownError:
            self._unknown = True  # the row may exist: never delete the files
            raise
        if not won:
            self._unknown = True  # the files may now be that table's: keep them
            raise CatalogInconsistencyError(
                f"{name} entered {self._where()} while this job held its reservation: an engine that does not "
                f"know lakesink's reservations created it at {self.path}, where this job wrote too. Nothing "
                "was deleted: check the table, drop it and run the CREATE TABLE AS again.", table=str(name))
        self._reserved = False
        self._close()

    # -- abort ----------------------------------------------------------------
    def abort(self) -> None:
        try:
            if self._heartbeat is not None:
                self._heartbeat.stop()
            if self._unknown or not self._reserved:
                return
            db, name = self._db(), self.name
            held = reservations.find(db, name.database, name.table)
            if held is None:  # swept as abandoned, and the sweep is over: what it wrote since is ours
                self._clear_after_sweep(db)
                return
            if held.token != self.token:
                log.warning("CREATE TABLE AS of %s: its reservation was taken over; its files are the new "
                            "owner's to remove", name)
                return
            if not reservations.registered(db, name.database, name.table):
                reservations.delete_location(self.path, self.fs)
            dbapi.rollback(db.connection.connection)
            reservations.delete(db, name.database, name.table, self.token)
            self._reserved = False
        finally:
            self._close()

    def _clear_after_sweep(self, db) -> None:
        """Our reservation was removed by a sweep that judged the job dead (its heartbeat stalled)
        while it still wrote: take the name again, remove what is at the location, let it go."""
        name = self.name
        if reservations.reserve(db, name.database, name.table, self.token, self.path) != "reserved":
            return  # the name entered the catalog or another CREATE TABLE AS holds it: not ours to clear
        try:
            reservations.delete_location(self.path, self.fs)
        finally:
            reservations.delete(db, name.database, name.table, self.token)
            self._reserved = False


class InPlaceReplace(StagedTable):
    """REPLACE TABLE AS of a table the catalog holds: one OVERWRITE snapshot of the same table."""

    write_mode = "overwrite"

    def __init__(self, catalog: Catalog, name: TableName, path: str, incoming, partition_by, primary_key):
        self.catalog, self.name, self.path = catalog, name, storage.normalize(path)
        self.staging_path = self.path
        self.incoming, self.partition_by, self.primary_key = incoming, list(partition_by), list(primary_key)

    def begin(self) -> None:
        table = tables.open_table(self.path, self.catalog.config.fs_options or None)
        schema = table.table_schema
        problems = []
        if list(schema.partition_keys) != self.partition_by:
            problems.append(f"partition keys {self.partition_by} instead of {list(schema.partition_keys)}")
        if self.primary_key and list(schema.primary_keys) != self.primary_key:
            problems.append(f"primary key {self.primary_key} instead of {list(schema.primary_keys)}")
        if self.incoming is not None:
            try:
                evolution.plan(schema, self.incoming, False, str(self.name))
            except SchemaMismatchError as exc:
                problems.append(str(exc).split(": ", 1)[-1].split(". Table columns:")[0])
        if problems:
            raise SchemaMismatchError(
                f"REPLACE TABLE AS of {self.name} on {self.path}: through a JDBC catalog on an object store the "
                "replacement is an OVERWRITE snapshot of the same table, which keeps its schema, and this one "
                f"differs: {'; '.join(problems)}. Drop the table and CREATE it again "
                f"(lakesink.catalog(spark).drop_table('{self.name}'), then create_table_as), or pass "
                "ctas.atomicity-enabled=false to overwrite in place with added or widened columns. "
                "Nothing was written.", table=str(self.name))

    def commit(self) -> None:
        """The job's write committed the OVERWRITE snapshot: readers switched to the new rows then."""

    def abort(self) -> None:
        """The failed write removed its own files; the table kept its old snapshot."""
