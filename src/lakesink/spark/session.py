"""A local Spark session with lakesink's data source registered."""

from __future__ import annotations

import logging
import os
import sys

from .._java import ensure_java

log = logging.getLogger(__name__)

# The name that always reaches lakesink's data source (`paimon` may belong to another).
FORMAT = "lakesink-paimon"

# Spark's defaults, except where Paimon needs otherwise: INT96 timestamps carry no statistics.
_DEFAULT_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}


def session(app_name: str = "lakesink", master: str | None = None, conf: dict | None = None,
            catalog: dict | None = None):
    """Get or create a SparkSession (local[2] by default) with the `paimon` data source registered.

    `catalog`: the session's Paimon catalog (see `register`).

    >>> spark = lakesink.session()
    >>> spark.range(3).write.format("paimon").save("/tmp/wh/db.db/t")   # doctest: +SKIP
    """
    ensure_java()
    # Executors' Python workers must import lakesink: use this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    master = master or os.environ.get("LAKESINK_MASTER")
    # Under spark-submit (or pyspark's shell) the master is already set: keep it.
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[2]"
    if master is not None:
        builder = builder.master(master)
    for key, value in {**_DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark, catalog)
    return spark


def register(spark, catalog: dict | None = None) -> bool:
    """Register lakesink's data source on an existing session; True if `paimon` is lakesink's.

    `format("lakesink-paimon")` always reaches lakesink. `format("paimon")` does too,
    unless a JVM data source already owns that name (Apache Paimon's own Spark
    connector on the classpath): Spark then refuses a second `paimon`, and lakesink
    leaves that name to it rather than failing the whole set-up.
    Also call it in each new Python thread that uses `format(...)`: see `activate`.

    `catalog`: Paimon catalog options to keep on the session (`{}` removes them; None keeps
    what the session has, e.g. from `--conf spark.lakesink.catalog.warehouse=...`). The data
    source is registered with them: Spark hands it no session conf.
    """
    from ..paimon.catalog.config import CatalogConfig
    from .catalog import catalog_options, set_catalog, with_catalog
    from .jdbc_datasource import JdbcDataSource
    from .datasource import LakesinkPaimonDataSource, PaimonDataSource

    if catalog is not None:
        set_catalog(spark, catalog)
    options = catalog_options(spark)
    if options:
        CatalogConfig.parse(options)  # options set with --conf are checked here, not at the first write
    spark.dataSource.register(with_catalog(LakesinkPaimonDataSource, options))
    spark.dataSource.register(JdbcDataSource)  # format("lakesink-jdbc")
    try:
        spark.dataSource.register(with_catalog(PaimonDataSource, options))
        owned = True
    except Exception as exc:  # noqa: BLE001 - Spark raises AnalysisException (also over Connect)
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
        log.warning("format('paimon') belongs to another data source in this session (e.g. Apache Paimon's "
                    "Spark connector); use format('%s') for lakesink", FORMAT)
        owned = False
    activate(spark)
    return owned


def is_connect(spark) -> bool:
    """A Spark Connect session: no SparkContext, no JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def cores(spark, default: int = 2) -> int:
    """The cluster's cores (Spark's default parallelism); `default` under Spark Connect, whose
    client has no SparkContext."""
    try:
        return max(1, spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect refuses JVM attributes
        return default


def activate(spark) -> None:
    """Make `spark` the JVM's active session for the calling thread.

    Spark looks Python data sources up in the active session of the JVM thread
    running the call; a new Python thread gets a JVM thread without one, and
    `format("paimon")` then fails with DATA_SOURCE_NOT_FOUND (seen on Spark 4.3).
    """
    jvm = getattr(spark, "_jvm", None)  # None on Spark Connect, where this does not apply
    if jvm is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


def wait_for_tasks(sc, group: str | None = None, timeout: float = 60.0) -> None:
    """Wait until no task of the job group (None: of the jobs in no group) runs: cancelling
    returns before the tasks have stopped, and a cancelled task may still write where an abort
    just cleaned. Counted per stage from task ends: a cancelled stage leaves the active stages
    at once, while its tasks are still being killed."""
    import time

    tracker = sc.statusTracker()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stages = [s for job_id in tracker.getJobIdsForGroup(group)
                  for s in (getattr(tracker.getJobInfo(job_id), "stageIds", None) or [])]
        active = 0
        for stage_id in stages:
            stage = tracker.getStageInfo(stage_id)
            active += stage.numActiveTasks if stage else 0
        if active == 0:
            return
        time.sleep(0.1)
