"""What the test run's Python daemons load before they fork workers (tests/python-for-spark)."""

from __future__ import annotations

import importlib

# Spark's task worker and the Python data source planners run lakesink's code; the lookup of
# installed data sources runs none.
_RUNS_LAKESINK = ("pyspark.worker", "pyspark.sql.worker.")
_RUNS_NONE = ("pyspark.sql.worker.lookup_data_sources",)
MODULES = ("pyspark.sql.datasource", "lakesink.spark.datasource", "lakesink.spark.tasks",
           "lakesink.spark.keyed_tasks", "lakesink.spark.reader", "lakesink.paimon.write.batch",
           "lakesink.paimon.write.stream", "lakesink.paimon.commit.target", "lakesink.paimon.catalog.catalog")


def preload(worker_module: str) -> None:
    if not worker_module.startswith(_RUNS_LAKESINK) or worker_module.startswith(_RUNS_NONE):
        return
    for name in (worker_module, *MODULES):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports it itself and reports what fails
            pass
