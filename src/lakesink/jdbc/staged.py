"""CREATE / REPLACE TABLE AS, all or nothing: a hidden table, renamed in one transaction.

`begin()` creates `ctas_<token>` (PostgreSQL: in the staging schema; SQLite:
`_lakesink_ctas_<token>`) and registers it; the job fills it through the usual
exactly-once commit; `commit()` renames it to the final name in one transaction
(replace: drops the old table in the same transaction). Readers see the old
table or the new one, never a partial one. Of two jobs creating one name, the
second rename fails (`TableAlreadyExistsError`) and its table is dropped. A
killed driver leaves only the registered hidden table, which `clean_staging`
removes.
"""

from __future__ import annotations

import time

from ..errors import ConfigurationError, TableAlreadyExistsError
from ..protocol.staging import StagedTable, SupportsStaging
from .db import Database, TableName, quote
from .job import JdbcJob, _check_schema_exists, create_table_sql, new_token
from .options import JdbcOptions
from .target import ANONYMOUS_PREFIX, drop_staging, ensure_metadata, staging_name
from .types import columns_of


class JdbcStagedTable(StagedTable):
    def __init__(self, options: JdbcOptions, schema, replace: bool, if_not_exists: bool = False):
        if options.mode != "append" or options.key:
            raise ConfigurationError("create_table_as/replace_table_as write all rows of the DataFrame: "
                                     "write.mode and upsert.key do not apply.")
        options.check()
        self.options, self.replace, self.if_not_exists = options, replace, if_not_exists
        self.columns = columns_of(schema)  # unsupported types refused before connecting
        self.db = Database.from_options(options)
        self.table = self.db.table_name(options.table)
        self.token = new_token()
        self.hidden_name = f"ctas_{self.token}"  # as registered; see target.staging_name
        self.hidden = staging_name(self.db, self.hidden_name)
        self.job: JdbcJob | None = None
        self._skipped = False
        self._begun = False  # the hidden table may exist: abort must look

    @property
    def skipped(self) -> bool:
        return self._skipped

    def begin(self) -> None:
        db = self.db
        conn = db.connect()
        self._begun = True
        try:
            with db.transaction(conn) as cur:
                exists = db.columns(cur, self.table) is not None
                if exists and not self.replace:
                    if self.if_not_exists:
                        self._skipped = True
                        return
                    raise TableAlreadyExistsError(f"Table {self.table} already exists in {db.describe()}: use "
                                                  "replace_table_as, or if_not_exists=True. Nothing was written.")
                _check_schema_exists(db, cur, self.table)
                ensure_metadata(db, cur)
                cur.execute(create_table_sql(db, self.hidden, self.columns, self.options.column_types, (),
                                             self.options.create_table_options, if_not_exists=False))
                cur.execute(f"INSERT INTO {db.meta_table('staging').sql} (name, job, created_at) "
                            f"VALUES ({db.param}, {db.param}, {db.param})",
                            (self.hidden_name, f"ctas-{self.token}", time.time()))
        finally:
            conn.close()
        names = [c.name for c in self.columns]
        self.job = JdbcJob(db, self.hidden, self.columns, names, None, "append", [], self.options.batch_size,
                           f"{ANONYMOUS_PREFIX}ctas-{self.token}", token=self.token)

    def commit(self) -> None:
        db, p = self.db, self.db.param
        conn = db.connect()
        try:
            with db.transaction(conn) as cur:
                if self.replace:
                    cur.execute(f"DROP TABLE IF EXISTS {self.table.sql}")
                elif db.columns(cur, self.table) is not None:
                    raise TableAlreadyExistsError(f"Table {self.table} was created by someone else while this job "
                                                  "ran: this job's table was dropped.")
                if db.dialect == "postgres":
                    cur.execute(f"ALTER TABLE {self.hidden.sql} SET SCHEMA {quote(self.table.schema)}")
                    cur.execute(f"ALTER TABLE {TableName(self.table.schema, self.hidden.name).sql} "
                                f"RENAME TO {quote(self.table.name)}")
                else:
                    cur.execute(f"ALTER TABLE {self.hidden.sql} RENAME TO {quote(self.table.name)}")
                cur.execute(f"DELETE FROM {db.meta_table('staging').sql} WHERE name = {p}", (self.hidden_name,))
                cur.execute(f"DELETE FROM {db.meta_table('progress').sql} WHERE target = {p}",
                            (f"{db.describe()}/{self.hidden}",))
        except TableAlreadyExistsError:
            raise
        except Exception as exc:
            if _is_duplicate_table(exc):
                raise TableAlreadyExistsError(f"Table {self.table} was created by another job first; this job's "
                                              "table was dropped.") from exc
            raise
        finally:
            conn.close()

    def abort(self) -> None:
        if self._skipped or not self._begun:
            return
        conn = self.db.connect()
        try:
            with self.db.transaction(conn) as cur:
                cur.execute(f"DROP TABLE IF EXISTS {self.hidden.sql}")
                cur.execute(f"DELETE FROM {self.db.meta_table('staging').sql} WHERE name = {self.db.param}",
                            (self.hidden_name,))
                drop_staging(self.db, cur, (), [self.token])
        finally:
            conn.close()


def _is_duplicate_table(exc: Exception) -> bool:
    # PostgreSQL: 42P07 duplicate_table (a concurrent rename committed first); SQLite: "there is already..."
    return getattr(exc, "sqlstate", None) == "42P07" or "already" in str(exc).lower()


class JdbcTableCatalog(SupportsStaging):
    """Staged creates for one database table (FLIP-305's JdbcStagedTable)."""

    def __init__(self, options: JdbcOptions, schema):
        self.options, self.schema = options, schema

    def stage_create(self, if_not_exists: bool = False) -> JdbcStagedTable:
        return JdbcStagedTable(self.options, self.schema, replace=False, if_not_exists=if_not_exists)

    def stage_replace(self) -> JdbcStagedTable:
        return JdbcStagedTable(self.options, self.schema, replace=True)
