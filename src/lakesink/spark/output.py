"""Spark's own file writer, as the fast paths use it: where it can write, how, and what it leaves."""

from __future__ import annotations

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


def check_spark_can_write(spark, path: str, path_name: str) -> None:
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
        f"{path_name} cannot write {path}: Spark itself writes the files on this path and has no "
        f"file system for {scheme}:// ({reason}). Write with df.write.format('paimon') instead (its "
        "tasks write with pyarrow and reach object stores through the fs.s3.* options), or add the "
        "storage's Hadoop connector (e.g. hadoop-aws) to Spark. See docs/storage.md."
    )


def ensure_micros_timestamps(spark) -> None:
    """Make Spark write timestamps as INT64 micros: INT96 carries no statistics.

    Set once on the session and left set (not toggled per write): concurrent writes
    from several threads share the session conf, and a toggle could race.
    """
    key = "spark.sql.parquet.outputTimestampType"
    if spark.conf.get(key, None) != "TIMESTAMP_MICROS":
        spark.conf.set(key, "TIMESTAMP_MICROS")
