"""Atomic CREATE / REPLACE TABLE AS SELECT (issue 5)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink import clean_staging
from lakesink.errors import TableAlreadyExistsError
from lakesink.paimon import PaimonTarget, TableLayout, TableSpec, describe_parquet
from lakesink.paimon.catalog.staged_table import PaimonStagedTable
from lakesink.protocol import Committer
from lakesink.protocol.staging import run_staged
from tests.helpers import read_table

pytestmark = pytest.mark.spark


def _failing_df(spark):
    from pyspark.sql.functions import udf

    @udf("long")
    def boom(x):
        raise ValueError("task failed on purpose")

    return spark.range(20, numPartitions=2).select(boom("id").alias("id"))


def _db_entries(path):
    return sorted(os.listdir(os.path.dirname(path)))


@pytest.mark.parametrize("via", ["fast", "native"])
def test_table_appears_only_when_the_job_succeeds(spark, table_path, via):
    df = spark.range(30).selectExpr("id", "cast(id % 3 as string) as p")
    lakesink.create_table_as(df, table_path, partition_by=["p"], via=via)
    assert sorted(read_table(table_path).column("id").to_pylist()) == list(range(30))
    assert _db_entries(table_path) == ["t"]  # no staging left beside it
    assert not os.path.exists(os.path.join(table_path, "STAGED.json"))


@pytest.mark.parametrize("via", ["fast", "native"])
def test_a_failed_job_leaves_no_table_and_no_files(spark, table_path, via):
    with pytest.raises(Exception, match="task failed on purpose"):
        lakesink.create_table_as(_failing_df(spark), table_path, via=via)
    assert not os.path.exists(table_path)
    assert _db_entries(table_path) == []


def test_existing_table_is_an_error_or_left_alone_with_if_not_exists(spark, table_path):
    lakesink.create_table_as(spark.range(5), table_path)
    with pytest.raises(TableAlreadyExistsError, match="already exists"):
        lakesink.create_table_as(spark.range(7), table_path)
    assert lakesink.create_table_as(spark.range(7), table_path, if_not_exists=True) is None
    assert read_table(table_path).num_rows == 5
    assert _db_entries(table_path) == ["t"]


def test_replace_swaps_schema_and_data_in_one_step(spark, table_path):
    lakesink.create_table_as(spark.range(5), table_path)
    lakesink.replace_table_as(spark.range(3).selectExpr("id * 10 as x", "'new' as label"), table_path)
    data = read_table(table_path)
    assert data.column_names == ["x", "label"]
    assert sorted(data.column("x").to_pylist()) == [0, 10, 20]
    assert _db_entries(table_path) == ["t"]


def test_a_failed_replace_changes_nothing(spark, table_path):
    lakesink.create_table_as(spark.range(5), table_path)
    with pytest.raises(Exception, match="task failed on purpose"):
        lakesink.replace_table_as(_failing_df(spark), table_path)
    assert sorted(read_table(table_path).column("id").to_pylist()) == list(range(5))
    assert _db_entries(table_path) == ["t"]


def _stage_with_rows(staged: PaimonStagedTable, ids):
    """Write one committed snapshot into a staged table without Spark."""
    data = pa.table({"id": pa.array(ids, pa.int64())})
    target = PaimonTarget(staged.staging_path, create=TableSpec(data.schema, [], [], {"bucket": "-1"}))
    target.maintenance = False  # as create_table_as: no background thread inside a staged table
    table = target.table_or_create()
    staged_dir = os.path.join(staged.staging_path, "_lakesink", "staging", "x")
    os.makedirs(staged_dir)
    pq.write_table(data, os.path.join(staged_dir, "f.parquet"))
    files = [describe_parquet(os.path.join(staged_dir, "f.parquet"), TableLayout.of(table), table.file_io)]
    Committer(target, "ctas").commit(1, files)


def test_of_two_concurrent_creates_exactly_one_wins_and_the_loser_leaves_nothing(table_path):
    os.makedirs(os.path.dirname(table_path))
    first, second = PaimonStagedTable(table_path), PaimonStagedTable(table_path)
    first.begin()
    second.begin()
    _stage_with_rows(first, [1, 2])
    _stage_with_rows(second, [3, 4, 5])
    first.commit()
    with pytest.raises(TableAlreadyExistsError, match="created by another job"):
        second.commit()
    assert sorted(read_table(table_path).column("id").to_pylist()) == [1, 2]
    assert _db_entries(table_path) == ["t"]


def test_keyboard_interrupt_aborts_the_staged_table(table_path):
    os.makedirs(os.path.dirname(table_path))
    staged = PaimonStagedTable(table_path)

    def job():
        _stage_with_rows(staged, [1])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_staged(staged, job)
    assert _db_entries(table_path) == []


def test_spark_job_cancellation_aborts_the_staged_table(spark, table_path):
    from pyspark.sql.functions import udf

    @udf("long")
    def slow(x):
        time.sleep(0.2)
        return x

    df = spark.range(0, 200, 1, 2).select(slow("id").alias("id"))
    timer = threading.Timer(3.0, spark.sparkContext.cancelAllJobs)
    timer.start()
    try:
        with pytest.raises(Exception, match="(?i)cancel"):
            lakesink.create_table_as(df, table_path)
    finally:
        timer.cancel()
    assert not os.path.exists(table_path)
    assert _db_entries(table_path) == []


def _start_child(table_path):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen([sys.executable, "-m", "tests.spark.ctas_child", table_path], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    assert line.startswith("READY"), line
    time.sleep(4)  # let tasks write some staged files
    return proc


# ./dev full: SIGTERM mid-job (the default run kills the CTAS driver with SIGKILL, below)
@pytest.mark.full
def test_sigterm_mid_ctas_aborts_and_leaves_nothing(table_path):
    os.makedirs(os.path.dirname(table_path))
    proc = _start_child(table_path)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    os.killpg(proc.pid, signal.SIGKILL) if _group_alive(proc.pid) else None
    assert not os.path.exists(table_path)
    assert _db_entries(table_path) == []


def test_a_driver_killed_mid_ctas_leaves_no_table_and_clean_up_removes_its_staging(table_path):
    os.makedirs(os.path.dirname(table_path))
    proc = _start_child(table_path)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert not os.path.exists(table_path)
    leftovers = [e for e in _db_entries(table_path)]
    assert len(leftovers) == 1 and ".lakesink-staging-" in leftovers[0]
    # A staged table is never mistaken for a table, by pypaimon's catalog or by lakesink.
    from pypaimon import CatalogFactory
    catalog = CatalogFactory.create({"warehouse": os.path.dirname(os.path.dirname(table_path))})
    assert catalog.list_tables("db") == []
    assert clean_staging(os.path.dirname(table_path), dry_run=True) == [
        os.path.join(os.path.dirname(table_path), leftovers[0])]
    clean_staging(os.path.dirname(table_path))
    assert _db_entries(table_path) == []


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_two_spark_jobs_creating_one_table_at_once_exactly_one_wins(spark, table_path):
    from pyspark.sql.functions import udf

    @udf("long")
    def slow(x):
        time.sleep(0.05)
        return x

    outcomes = {}

    def create(name, rows):
        df = spark.range(0, rows, 1, 2).select(slow("id").alias("id"))
        try:
            lakesink.create_table_as(df, table_path, via="fast" if name == "a" else "native")
            outcomes[name] = "created"
        except TableAlreadyExistsError:
            outcomes[name] = "exists"

    threads = [threading.Thread(target=create, args=("a", 40)), threading.Thread(target=create, args=("b", 60))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(outcomes.values()) == ["created", "exists"]
    winner = "a" if outcomes["a"] == "created" else "b"
    assert sorted(read_table(table_path).column("id").to_pylist()) == list(range(40 if winner == "a" else 60))
    assert _db_entries(table_path) == ["t"]  # the loser's staged table is gone
