"""The fast path: Spark's JVM writes the Parquet bytes, Python only plans and commits.

`write` runs one Spark job writing Parquet into the job's staging directory
(Spark's own output committer already discards failed and speculative task
attempts), then describes the files from their footers and commits them as one
Paimon snapshot. Partition columns are copied into hidden columns so Spark
splits files by partition; the values Paimon records come from the files'
own columns, never from Spark's directory names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import urlparse

from ..errors import UnsupportedTableError
from ..options import WriteOptions
from ..paimon.sink import BatchWrite, list_parquet_files
from ..protocol import CommitReport, crashpoints
from .arrow import spark_to_arrow

PATH_NAME = "lakesink.write (fast path)"
_HIDDEN = "lakesink_partition_{}"


def write(df, path: str, mode: str = "append", *, partition_by: Iterable[str] | None = None,
          options: Mapping[str, object] | None = None, commit_user: str | None = None,
          commit_identifier: int | None = None) -> CommitReport:
    """Write `df` into the Paimon table at `path` as one snapshot; create the table if missing.

    >>> report = lakesink.write(df, "/data/wh/db.db/orders", mode="append")   # doctest: +SKIP
    >>> report.snapshot_id, report.rows_added                                   # doctest: +SKIP

    With `commit_user` and an increasing `commit_identifier` (e.g. a run number) a
    re-run of a job that already committed commits nothing and writes nothing.
    """
    opts = WriteOptions.parse(_merge(options, partition_by, commit_user, commit_identifier))
    check_spark_can_write(df.sparkSession, path)
    job = BatchWrite.plan(path, spark_to_arrow(df.schema), opts, mode, PATH_NAME)
    if job.already_committed():
        return CommitReport(job.commit_user, job.identifier, skipped_replay=True)
    files = []
    try:
        write_staged(df, job)
        crashpoints.reached("tasks-done")
        files = job.describe_staged(list_parquet_files(job.target.file_io, job.staging_dir))
    except BaseException:
        job.abort(files)
        raise
    return job.commit(files)


def write_staged(df, job: BatchWrite) -> None:
    """Let Spark write `df` as Parquet into the job's staging directory, split by partition."""
    names = [f.name for f in job.layout.fields]
    keys = list(job.layout.partition_keys)
    out = df.select(*names)
    hidden = [_HIDDEN.format(i) for i in range(len(keys))]
    for key, column in zip(keys, hidden):
        out = out.withColumn(column, out[key])
    # "error", not "errorifexists": Spark Connect knows only the former.
    writer = out.write.mode("error").option("compression", job.compression)
    if hidden:
        writer = writer.partitionBy(*hidden)
    _ensure_micros_timestamps(df.sparkSession)
    writer.parquet(job.staging_dir)


def check_spark_can_write(spark, path: str) -> None:
    """The fast path has Spark's JVM write the files: the table's storage needs a Hadoop
    file system in Spark (the pip pyspark has none for s3a://, gs://, ...)."""
    scheme = urlparse(str(path)).scheme.lower()
    if scheme in ("", "file"):
        return
    try:
        jvm = spark._jvm
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, spark._jsc.hadoopConfiguration())
        return
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    raise UnsupportedTableError(
        f"{PATH_NAME} cannot write {path}: Spark itself writes the files on this path and has no "
        f"file system for {scheme}:// ({reason}). Write with df.write.format('paimon') instead (its "
        "tasks write with pyarrow and reach object stores through the fs.s3.* options), or add the "
        "storage's Hadoop connector (e.g. hadoop-aws) to Spark. See docs/storage.md."
    )


def _ensure_micros_timestamps(spark) -> None:
    """Make Spark write timestamps as INT64 micros: INT96 carries no statistics.

    Set once on the session and left set (not toggled per write): concurrent writes
    from several threads share the session conf, and a toggle could race.
    """
    key = "spark.sql.parquet.outputTimestampType"
    if spark.conf.get(key, None) != "TIMESTAMP_MICROS":
        spark.conf.set(key, "TIMESTAMP_MICROS")


def _merge(options, partition_by, commit_user, commit_identifier) -> dict:
    merged = dict(options or {})
    if partition_by:
        merged["partition"] = ",".join(partition_by)
    if commit_user is not None:
        merged["commit.user"] = commit_user
    if commit_identifier is not None:
        merged["commit.identifier"] = commit_identifier
    return merged
