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

from ..options import WriteOptions
from ..paimon.write.batch import BatchWrite, open_for_write
from ..protocol import CommitReport, crashpoints
from .arrow import spark_to_arrow
from .catalog import resolve_for
from .checks import checked_columns, translate_error
from .output import check_spark_can_write, ensure_micros_timestamps, list_parquet_files, spark_output
from .rewrite import distributed
from .settings import concurrent_writers, row_group_bytes

PATH_NAME = "lakesink.write (fast path)"
_HIDDEN = "lakesink_partition_{}"


def write(df, path: str, mode: str = "append", *, partition_by: Iterable[str] | None = None,
          options: Mapping[str, object] | None = None, commit_user: str | None = None,
          commit_identifier: int | None = None, primary_key: Iterable[str] | None = None,
          overwrite_partition: Mapping[str, object] | None = None) -> CommitReport:
    """Write `df` into the Paimon table at `path` (or named so in the session's catalog) as one
    snapshot; create the table if missing (by name: in the catalog).

    >>> report = lakesink.write(df, "/data/wh/db.db/orders", mode="append")   # doctest: +SKIP
    >>> report.snapshot_id, report.rows_added                                   # doctest: +SKIP

    With `commit_user` and an increasing `commit_identifier` (e.g. a run number) a
    re-run of a job that already committed commits nothing and writes nothing: an
    identifier at or below the last one the user committed is skipped (as Paimon's
    `filterCommitted`, Delta's `txnAppId`/`txnVersion`), `report.skipped_replay`.
    """
    resolved = resolve_for(df.sparkSession, path, "write")  # a path, or a name through the catalog
    path = resolved.path
    opts = WriteOptions.parse(_merge(resolved.with_fs_options(options), partition_by, commit_user,
                                     commit_identifier, primary_key))
    opts.catalog_entry = resolved.entry  # a new table by name: created in its catalog when planned
    opts.overwrite_partition = dict(overwrite_partition) if overwrite_partition else None
    from ..paimon.write.keyed_plan import wants_keyed
    # The job's one open of the table: planning, commit and maintenance use it (each snapshot,
    # manifest and index is read afresh where it matters; the commit checks the schema is current).
    table = open_for_write(path, opts)
    if wants_keyed(path, opts, table):  # primary-key and fixed-bucket tables: spark.keyed_write
        from .keyed_write import write_keyed
        return write_keyed(df, path, mode, opts, PATH_NAME, table)
    check_spark_can_write(df.sparkSession, path, PATH_NAME)
    session_mode = df.sparkSession.conf.get("spark.sql.sources.partitionOverwriteMode", "static")
    job = BatchWrite.plan(path, spark_to_arrow(df.schema), opts, mode, PATH_NAME, session_mode, table=table)
    job.rewriter = distributed(df.sparkSession)
    if job.already_committed():
        return CommitReport(job.commit_user, job.identifier, skipped_replay=True)
    files = []
    try:
        write_staged(df, job)
        crashpoints.reached("tasks-done")
        files = job.describe_staged(list_parquet_files(job.staging_dir, job.target.fs_options))
    except BaseException as exc:
        job.abort(files)
        translated = translate_error(exc, job.target.path)
        if translated is not None:
            raise translated from None
        raise
    return job.commit(files)


def write_staged(df, job: BatchWrite, lineage: bool = False, open_files: int = 0) -> None:
    """Let Spark write `df` as Parquet into the job's staging directory, split by partition.

    `lineage`: `df` also has a row-tracking table's `_ROW_ID`, `_SEQUENCE_NUMBER` and runs
    (spark.lineage): they are stored too, and each run's rows, sorted by id, go into a file
    of their own. `open_files`: a task writes up to that many partitions at once instead of
    sorting its rows by partition first (rows sorted by run are written so, as they come)."""
    from .lineage import COLUMNS, ROW_ID, RUN

    names = [f.name for f in job.layout.fields]
    keys = list(job.layout.partition_keys)
    # NOT NULL columns: a null fails the job (a NullValueError once translated), as in Delta.
    out = df.selectExpr(*checked_columns(df.schema, names, job.layout.not_null), *(COLUMNS if lineage else ()),
                        *((RUN,) if lineage else ()))
    hidden = [_HIDDEN.format(i) for i in range(len(keys))]
    for key, column in zip(keys, hidden):
        out = out.withColumn(column, out[key])
    split = hidden + ([RUN] if lineage else [])
    if lineage:  # already grouped by run: the window that made the runs placed each in one task
        out = out.sortWithinPartitions(*split, ROW_ID)
    # "error", not "errorifexists": Spark Connect knows only the former.
    writer = out.write.mode("error").option("compression", job.compression)
    if split:
        writer = writer.partitionBy(*split)
    ensure_micros_timestamps(df.sparkSession)
    open_files = open_files if split and not lineage else 0
    if open_files:  # row groups the open writers fill within the heap (settings.row_group_mib)
        writer = writer.option("parquet.block.size", str(row_group_bytes(df.sparkSession, open_files)))
    with concurrent_writers(df.sparkSession, open_files):
        spark_output(df.sparkSession, job.staging_dir, job.target.fs_options, PATH_NAME).write(writer)


def _merge(options, partition_by, commit_user, commit_identifier, primary_key=None) -> dict:
    merged = dict(options or {})
    if primary_key:
        merged["primary-key"] = ",".join([primary_key] if isinstance(primary_key, str) else primary_key)
    if partition_by:
        merged["partition"] = ",".join(partition_by)
    if commit_user is not None:
        merged["commit.user"] = commit_user
    if commit_identifier is not None:
        merged["commit.identifier"] = commit_identifier
    return merged
