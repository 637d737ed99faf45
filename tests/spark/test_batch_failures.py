"""Nothing of a failed job remains, on both batch paths.

Every case checks the table afterwards with pypaimon: same latest snapshot, same
rows, and no data file on disk that no snapshot references (staging included).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import lakesink
from lakesink.errors import CommitFailedError
from tests.helpers import PATHS, write, data_files_on_disk, latest_snapshot_id, leftover_files, read_table

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))



def seed(spark, path: str) -> None:
    lakesink.write(spark.createDataFrame([(1, "a"), (2, "a")], "id long, p string"), path, partition_by=["p"])


def assert_unchanged(path: str) -> None:
    assert latest_snapshot_id(path) == 1
    assert sorted(read_table(path).column("id").to_pylist()) == [1, 2]
    assert leftover_files(path) == set()
    staging = os.path.join(path, "_lakesink", "staging")
    assert not os.path.exists(staging) or os.listdir(staging) == []


def _fail_in_partition_1(batches):
    from pyspark import TaskContext
    for batch in batches:
        yield batch
        if TaskContext.get().partitionId() == 1:
            raise ValueError("boom: a task fails past its retries")


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_task_failing_past_its_retries_fails_the_job_and_leaves_nothing(spark, table_path, path_kind):
    seed(spark, table_path)
    df = (spark.range(0, 2000, 1, 2).selectExpr("id", "'b' as p")
          .mapInArrow(_fail_in_partition_1, "id long, p string"))
    with pytest.raises(Exception, match="boom: a task fails past its retries"):
        write(df, table_path, path_kind, **{"target-file-size": "1kb"})
    assert_unchanged(table_path)


def _slow_partition_1(table: str):
    """mapInArrow body: partition 1 holds its task until the job was cancelled and its
    staging directory removed (Spark does not stop a sleeping Python worker), then ends
    like a zombie task would, trying to write after the abort."""
    def run(batches):
        from pyspark import TaskContext
        yield from batches
        if TaskContext.get().partitionId() == 1:
            started = time.time()
            while time.time() - started < 60:
                if time.time() - started > 5 and not glob.glob(f"{table}/_lakesink/staging/*"):
                    break
                time.sleep(0.1)
    return run


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_cancelled_job_leaves_nothing(spark, table_path, path_kind):
    seed(spark, table_path)
    before = data_files_on_disk(table_path)
    df = (spark.range(0, 2000, 1, 2).selectExpr("id", "'b' as p")
          .mapInArrow(_slow_partition_1(table_path), "id long, p string"))

    def cancel_once_files_appear():
        deadline = time.time() + 60
        while time.time() < deadline and not (data_files_on_disk(table_path) - before):
            time.sleep(0.05)
        spark.sparkContext.cancelAllJobs()

    canceller = threading.Thread(target=cancel_once_files_appear)
    canceller.start()
    try:
        with pytest.raises(Exception, match="(?i)cancel"):
            write(df, table_path, path_kind)
    finally:
        canceller.join()
    time.sleep(6)  # the held task ends ~5 s after the abort and tries to write: it must not leave files
    assert_unchanged(table_path)


def _junk_in_staging(table: str):
    """mapInArrow body: one task drops a file that is not Parquet into the job's staging
    directory, so the driver fails reading footers, after the tasks and before the commit."""
    def run(batches):
        from pyspark import TaskContext
        yield from batches
        if TaskContext.get().partitionId() == 0:
            (staging,) = glob.glob(f"{table}/_lakesink/staging/*")
            with open(f"{staging}/junk.parquet", "wb") as out:
                out.write(b"not parquet at all")
    return run


def test_the_driver_failing_between_write_and_commit_leaves_nothing(spark, table_path):
    seed(spark, table_path)
    df = spark.range(0, 100, 1, 2).selectExpr("id", "'b' as p").mapInArrow(
        _junk_in_staging(table_path), "id long, p string")
    with pytest.raises(Exception, match="(?i)parquet"):
        lakesink.write(df, table_path)
    assert_unchanged(table_path)


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_commit_that_fails_raises_and_leaves_the_table_and_disk_unchanged(spark, table_path, path_kind):
    seed(spark, table_path)
    # A file where the new partition's directory must go: placing the data files fails.
    with open(os.path.join(table_path, "p=b"), "w") as blocker:
        blocker.write("in the way")
    df = spark.range(10, 20, 1, 2).selectExpr("id", "'b' as p")
    expected = CommitFailedError if path_kind == "fast" else Exception
    with pytest.raises(expected, match="did not land"):
        write(df, table_path, path_kind)
    assert_unchanged(table_path)


CHILD = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {root!r})
    os.environ["LAKESINK_MASTER"] = "local[2,3]"    # 3 attempts per task
    import lakesink
    from tests.helpers import leftover_files, read_table, snapshots

    spark = lakesink.session("lakesink-attempts", conf={{
        "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "500",
    }})
    spark.sparkContext.setLogLevel("OFF")
    attempts_dir = {attempts!r}

    def make_flaky(kind, path):
        def flaky(batches):
            from pyspark import TaskContext
            from tests.helpers import data_files_on_disk
            ctx = TaskContext.get()
            part, attempt = ctx.partitionId(), ctx.attemptNumber()
            marker = f"{{attempts_dir}}/{{kind}}-p{{part}}-a{{attempt}}-{{os.urandom(4).hex()}}"
            open(marker, "w").close()
            for i, batch in enumerate(batches):
                yield batch
                if part == 0 and attempt == 0 and i >= 1:
                    deadline = time.time() + 30      # let the writer put a file on disk first
                    while time.time() < deadline and not data_files_on_disk(path + "/_lakesink"):
                        time.sleep(0.05)
                    with open(marker, "w") as out:   # files on disk when the attempt dies
                        out.write(str(len(data_files_on_disk(path + "/_lakesink"))))
                    os._exit(1)          # the worker dies: no cleanup runs, Spark retries
        return flaky

    result = {{}}
    for kind in ("fast", "native"):
        path = f"{warehouse}/db.db/{{kind}}"
        df = (spark.range(0, 4000, 1, 2).selectExpr("id", "id % 2 as k")
              .mapInArrow(make_flaky(kind, path), "id long, k long"))
        opts = {{"target-file-size": "1kb"}}
        if kind == "fast":
            lakesink.write(df, path, options=opts)
        else:
            df.write.format("paimon").mode("append").options(**opts).save(path)
        result[kind] = {{
            "rows": sorted(read_table(path).column("id").to_pylist()) == list(range(4000)),
            "snapshots": len(snapshots(path)),
            "leftover": sorted(leftover_files(path)),
        }}
    result["attempts"] = {{name: open(f"{{attempts_dir}}/{{name}}").read()
                          for name in sorted(os.listdir(attempts_dir))}}
    spark.stop()
    print("RESULT " + json.dumps(result))
""")


def test_a_task_attempt_that_dies_after_writing_files_leaves_none_once_the_retry_succeeds(tmp_path):
    """In its own driver with task retries (local[2,3]): a worker dies mid-task on the first
    attempt, after writing files Spark never hears of: the same leftovers a losing speculative
    attempt leaves (tried here with spark.speculation on, local mode started no speculative copy)."""
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    script = CHILD.format(root=ROOT, attempts=str(attempts), warehouse=str(tmp_path / "wh"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    attempts = result["attempts"]
    for kind in ("fast", "native"):
        # Partition 0 died on its first attempt, with files on disk, and was retried.
        died = [v for k, v in attempts.items() if k.startswith(f"{kind}-p0-a0-")]
        assert died and int(died[0]) > 0, attempts
        assert any(k.startswith(f"{kind}-p0-a1-") for k in attempts), attempts
    for kind in ("fast", "native"):
        assert result[kind] == {"rows": True, "snapshots": 1, "leftover": []}, (kind, result)
