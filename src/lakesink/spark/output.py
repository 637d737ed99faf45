"""Spark's own file writer, as the fast paths use it: where it can write, how, and what it leaves."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from .. import storage
from ..errors import UnsupportedTableError


def list_parquet_files(directory: str, options: dict | None = None) -> list[str]:
    """Data files Spark's writer left in a staging directory.

    Skips what Spark's output committer keeps to itself: `_temporary/` (task
    attempts not committed), `_SUCCESS` and hidden files.
    """
    out = []
    for entry in storage.list_dir(directory, options, recursive=True):
        rel = storage.relative(entry.path, directory)
        if not rel.endswith(".parquet"):
            continue
        if any(part.startswith(("_", ".")) for part in rel.split("/")):
            continue
        out.append(entry.path)
    return sorted(out)


@dataclass(frozen=True)
class SparkOutput:
    """Where Spark's own writer puts a directory of the table's storage, and how it gets there."""

    path: str                       # the directory as Spark's Hadoop file system names it
    options: dict[str, str]         # per-write Hadoop options (DataFrameWriter.option)

    def write(self, writer) -> None:
        writer.options(**self.options).parquet(self.path)


def spark_output(spark, path: str, fs_options: dict | None, path_name: str) -> SparkOutput:
    """How Spark's JVM reaches `path`: as is when Spark has a Hadoop file system for its
    scheme (local files, HDFS, EMR's s3://); an S3 path through Hadoop's S3A connector
    when the cluster has one (hadoop-aws), with the table's endpoint and credentials
    as that write's options. Refused, naming the alternatives, when Spark has neither."""
    scheme = urlparse(str(path)).scheme.lower()
    if scheme in ("", "file"):
        return SparkOutput(str(path), {})
    reason = _spark_file_system(spark, scheme)
    if reason is None:
        hadoop = _s3a_options(fs_options) if scheme == "s3a" else {}
        return SparkOutput(str(path), hadoop)
    if scheme in storage.S3_SCHEMES and _spark_file_system(spark, "s3a") is None:
        return SparkOutput("s3a" + str(path)[len(scheme):], _s3a_options(fs_options))
    raise UnsupportedTableError(
        f"{path_name} cannot write {path}: Spark itself writes the files on this path and has no "
        f"file system for {scheme}:// ({reason}). Write with df.write.format('paimon') instead (its "
        "tasks write with pyarrow and reach object stores through the fs.s3.* options), or add the "
        "storage's Hadoop connector (hadoop-aws, for s3a://) to Spark. See docs/storage.md."
    )


def check_spark_can_write(spark, path: str, path_name: str, fs_options: dict | None = None) -> None:
    """Refuse before anything is written when Spark's writer cannot reach `path`."""
    spark_output(spark, path, fs_options, path_name)


def _spark_file_system(spark, scheme: str) -> str | None:
    """None when Spark's JVM has a Hadoop file system for `scheme`, else why not."""
    try:
        spark._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, spark._jsc.hadoopConfiguration())
        return None
    except Exception as exc:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__


def _s3a_options(fs_options: dict | None) -> dict[str, str]:
    # Spark's Hadoop S3A options for the same store (keys as Spark may lower-case them): Hadoop
    # reads per-write options given to DataFrameWriter, so nothing goes into the session's conf.
    return storage.s3a_options({storage.canonical_key(str(k)): str(v) for k, v in (fs_options or {}).items()})


def ensure_micros_timestamps(spark) -> None:
    """Make Spark write timestamps as INT64 micros: INT96 carries no statistics.

    Set once on the session and left set (not toggled per write): concurrent writes
    from several threads share the session conf, and a toggle could race.
    """
    key = "spark.sql.parquet.outputTimestampType"
    if spark.conf.get(key, None) != "TIMESTAMP_MICROS":
        spark.conf.set(key, "TIMESTAMP_MICROS")
