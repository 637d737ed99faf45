"""lakesink: exactly-once writes from PySpark into Apache Paimon tables.

    import lakesink
    spark = lakesink.session()
    lakesink.write(df, "/data/wh/db.db/orders", mode="append")          # fast path
    df.write.format("paimon").mode("append").save("/data/wh/db.db/orders")
    lakesink.stream(sdf, "/data/wh/db.db/orders", checkpoint="/data/chk/orders", trigger="10 seconds")
"""

from __future__ import annotations

from .errors import (BackgroundCommitError, CheckpointMismatchError, CommitFailedError, CommitStateUnknownError,
                     ConfigurationError, LakesinkError, NotAPaimonTableError, RestoreError,
                     SchemaMismatchError, UnsupportedTableError)
from .protocol import CommitReport

__version__ = "0.1.0"


def session(app_name: str = "lakesink", master: str | None = None, conf: dict | None = None):
    """A SparkSession (local[2] by default) with the `paimon` data source registered."""
    from .spark.session import session as _session
    return _session(app_name, master, conf)


def register(spark) -> None:
    """Register the `paimon` data source on your own SparkSession."""
    from .spark.session import register as _register
    _register(spark)


def write(df, path: str, mode: str = "append", **kwargs) -> CommitReport:
    from .spark.fastpath import write as _write
    return _write(df, path, mode, **kwargs)


def stream(df, path: str, checkpoint: str, trigger: str | None = None, **kwargs):
    from .spark.streaming import stream as _stream
    return _stream(df, path, checkpoint, trigger, **kwargs)


def await_commits(checkpoint: str, timeout: float = 120.0, options: dict | None = None) -> None:
    """Wait until a pipelined `format("paimon")` query's accepted batches are committed.

    In pipelined mode a micro-batch is committed in the background after Spark
    has recorded it; call this after `query.stop()` / `awaitTermination()` to
    read your own writes. Batches a dead driver accepted, which a restarted query
    with no new data never commits, are committed here (`options`: writer
    options such as file-system credentials). Raises a background commit failure.
    """
    from .paimon.committer_service import await_commits as _await
    _await(checkpoint, timeout, options)


def create_table_as(df, path: str, **kwargs):
    """Create a table from a DataFrame, all or nothing. See spark.ctas.create_table_as."""
    from .spark.ctas import create_table_as as _ctas
    return _ctas(df, path, **kwargs)


def replace_table_as(df, path: str, **kwargs):
    """Replace a table's schema and data in one step. See spark.ctas.replace_table_as."""
    from .spark.ctas import replace_table_as as _rtas
    return _rtas(df, path, **kwargs)


def clean_staging(database_dir: str, older_than_s: float = 3600.0, dry_run: bool = False) -> list[str]:
    """Remove staged tables that dead CREATE TABLE AS jobs left under a database directory."""
    from .paimon.staged import clean_staging as _clean
    return _clean(database_dir, older_than_s, dry_run)


def read(spark, path: str, **kwargs):
    """Read a Paimon table as a DataFrame (fast path). See spark.read.read."""
    from .spark.read import read as _read
    return _read(spark, path, **kwargs)


def read_stream(spark, path: str, **kwargs):
    """A streaming DataFrame of the rows each new snapshot adds. See spark.read.read_stream."""
    from .spark.read import read_stream as _read_stream
    return _read_stream(spark, path, **kwargs)


def compact(spark, path: str, **kwargs) -> CommitReport:
    """Rewrite a table's small files into one COMPACT snapshot on Spark. See spark.compact.compact."""
    from .spark.compact import compact as _compact
    return _compact(spark, path, **kwargs)


def history(path: str, **kwargs):
    """A pyarrow.Table with one row per retained snapshot. See paimon.maintenance.history."""
    from .paimon.maintenance import history as _history
    return _history(path, **kwargs)


write.__doc__ = "Write a DataFrame into a Paimon table as one snapshot (fast path). See spark.fastpath.write."
stream.__doc__ = "Start an exactly-once streaming query into a Paimon table. See spark.streaming.stream."

__all__ = ["session", "register", "write", "stream", "await_commits", "read", "read_stream", "history", "compact",
           "create_table_as", "replace_table_as", "clean_staging", "CommitReport", "LakesinkError", "ConfigurationError",
           "SchemaMismatchError", "UnsupportedTableError", "NotAPaimonTableError", "CommitFailedError",
           "CommitStateUnknownError", "RestoreError", "CheckpointMismatchError", "BackgroundCommitError"]
