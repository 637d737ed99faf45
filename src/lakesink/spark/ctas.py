"""CREATE / REPLACE TABLE AS SELECT, all or nothing, on either write path."""

from __future__ import annotations

import threading

from collections.abc import Iterable, Mapping

from .. import options as registry
from .. import storage
from ..errors import ConfigurationError, UnsupportedTableError
from ..paimon import iceberg
from ..paimon.catalog.ctas import stage_table
from ..paimon.table import tables
from ..protocol import CommitReport
from ..protocol.staging import Terminated, run_staged
from .catalog import resolve_for, session_catalog
from .arrow import spark_to_arrow
from .fastpath import write as fast_write
from .output import check_spark_can_write
from .session import FORMAT, activate, is_connect, wait_for_tasks

ATOMICITY_OPTION = "ctas.atomicity-enabled"


def create_table_as(df, path: str, partition_by: Iterable[str] | None = None,
                    options: Mapping[str, object] | None = None, if_not_exists: bool = False,
                    via: str = "fast") -> CommitReport | None:
    """Create the Paimon table at `path` (or named so in the session's catalog) from `df`; it
    appears (enters the catalog) only if the job succeeds.

    >>> lakesink.create_table_as(df, "/data/wh/db.db/daily", partition_by=["dt"])   # doctest: +SKIP

    With `if_not_exists=True` an existing table is left alone (returns None, writes nothing).
    A failed, cancelled or interrupted job leaves no table and no files.
    `via="native"` writes through `df.write.format("paimon")` instead of the fast path.
    """
    return _run(df, path, partition_by, options, replace=False, if_not_exists=if_not_exists, via=via)


def replace_table_as(df, path: str, partition_by: Iterable[str] | None = None,
                     options: Mapping[str, object] | None = None, via: str = "fast") -> CommitReport | None:
    """Replace the table at `path` (schema and data) with `df` in one step, or change nothing."""
    return _run(df, path, partition_by, options, replace=True, if_not_exists=False, via=via)


def _run(df, path, partition_by, options, replace, if_not_exists, via):
    options = dict(options or {})
    raw = {k: options.pop(k) for k in list(options) if k.lower() == ATOMICITY_OPTION}
    atomic = registry.parse(raw, ("ctas",)).get(ATOMICITY_OPTION, registry.option(ATOMICITY_OPTION).default)
    if via not in ("fast", "native"):
        raise ConfigurationError(f"via={via!r}: expected 'fast' or 'native'.")
    if any(k.lower() == "branch" for k in options):
        raise ConfigurationError(
            "option branch: CREATE / REPLACE TABLE AS makes a table's main branch. Create the table, then "
            "the branch (lakesink.branch.create), then write it with lakesink.write(..., options={'branch': "
            "...}). Nothing was written.", option="branch")
    if not atomic:
        if replace:  # REPLACE TABLE replaces the whole table, whatever the session's overwrite mode
            options["partitionOverwriteMode"] = "static"
            # ... and its schema: in place, that is schema evolution (new columns, widening).
            # Columns the DataFrame lacks cannot be dropped in place: those stay an error.
            if not any(k.lower() in ("write.merge-schema", "mergeschema") for k in options):
                options["write.merge-schema"] = "true"
        return _write(df, path, partition_by, options, "overwrite" if replace else "append", via)
    resolved = resolve_for(df.sparkSession, path, "create")  # a path, or a name in the session's catalog
    # By name, the table enters the catalog only at commit (FLIP-305): the catalog's staged table.
    catalog = session_catalog(df.sparkSession) if resolved.name else None
    primary_key = [k.strip() for k in str(options.get("primary-key", "")).split(",") if k.strip()]
    staged = stage_table(resolved, catalog, replace=replace, if_not_exists=if_not_exists,
                         incoming=spark_to_arrow(df.schema), partition_by=list(partition_by or []),
                         primary_key=primary_key)
    if via == "fast" and not storage.is_local(staged.staging_path):  # Spark itself may have no S3 file system
        try:
            check_spark_can_write(df.sparkSession, staged.staging_path, "create_table_as")
        except UnsupportedTableError as exc:
            raise UnsupportedTableError(f"{exc} For create_table_as / replace_table_as pass via='native'. "
                                        "Nothing was written.", table=str(resolved)) from None
    options = resolved.with_fs_options(options)
    if staged.write_mode == "overwrite":  # the whole table, whatever the session's overwrite mode
        options["partitionOverwriteMode"] = "static"
    # Background maintenance must not touch the staging directory while it is renamed.
    options["maintenance.enabled"] = "false"

    def job():
        try:
            return _write(df, staged.staging_path, partition_by, options, staged.write_mode, via)
        except Terminated:
            # Don't leave tasks writing into staging. Not from this thread: its py4j
            # connection still waits for the interrupted call's answer (the whole job).
            spark = df.sparkSession

            def cancel():
                if is_connect(spark):
                    spark.interruptAll()
                    return
                spark.sparkContext.cancelAllJobs()
                wait_for_tasks(spark.sparkContext)  # the abort then finds no task still writing

            canceller = threading.Thread(target=cancel, name="lakesink-cancel", daemon=True)
            canceller.start()
            canceller.join(timeout=60)
            raise

    report = run_staged(staged, job)
    if not staged.skipped and storage.is_local(resolved.path):
        # Published by a rename: Iceberg metadata written in staging names the staging paths.
        iceberg.after_commit(tables.open_table(resolved.path))
    return report


def _write(df, path, partition_by, options, mode, via):
    if via == "fast":
        return fast_write(df, path, mode, partition_by=partition_by, options=options)
    activate(df.sparkSession)  # this may run in a thread of the caller's
    writer = df.write.format(FORMAT).mode(mode)
    if partition_by:
        writer = writer.option("partition", ",".join(partition_by))
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save(path)
    return None
