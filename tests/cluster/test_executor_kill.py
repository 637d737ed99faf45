"""An executor SIGKILLed in the middle of a write job.

The job's two tasks run at once, one on each executor, and write slowly (Spark's
JVM sleeps per row; the native path's Python writer closes a file per small
Arrow batch), so each attempt has files out before it ends. Once both attempts
have written, the test SIGKILLs one executor JVM (its Python workers die with
it). Spark runs the lost task again elsewhere; the job must commit every row
exactly once, and what the killed attempt wrote must be gone.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.helpers import leftover_files as local_leftovers
from tests.helpers import referenced_data_files
from tests.staged import snapshot_list

from .scenarios import expected_rows
from .tables import data_objects, leftover_files, referenced_files, table_rows

pytestmark = [pytest.mark.cluster, pytest.mark.full]  # the cluster tier: ./dev full

ROWS = 80
DELAY_MS = 50  # 40 rows a task: ~2 s per attempt


def attempts(files: set[str]) -> set[str]:
    """Task attempts that have files out: `...-attempt<id>-...` (native path) or Spark's
    `_temporary/.../attempt_<id>/` directories (fast path)."""
    out = set()
    for name in files:
        match = re.search(r"attempt[-_]?(\d+)-|/(attempt_[^/]+)/", name)
        if match:
            out.add(match.group(1) or match.group(2))
    return out


def wait_until_both_attempts_wrote(list_files, timeout: float = 240.0) -> set[str]:
    """The files out once both running attempts have written some."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list_files()
        found = attempts(files)
        # Files named by attempt: two of them; else (names without attempts) enough files for two.
        if len(found) >= 2 or (not found and len(files) >= 4):
            return files
        time.sleep(0.2)
    raise AssertionError(f"no two task attempts wrote files within {timeout:.0f} s")


def kill_an_executor_once_both_attempts_wrote(cluster, driver, list_files) -> set[str]:
    """SIGKILL one executor JVM of the driver's application mid-write; the files out then."""
    files = wait_until_both_attempts_wrote(list_files)
    os.kill(cluster.executors(driver.started["app_id"])[0], signal.SIGKILL)
    return files


def test_an_executor_killed_mid_write_leaves_none_of_its_files_and_no_row_twice(
        cluster, driver, s3, s3_table, s3_options):
    options = {**s3_options, "target-file-size": "1b"}  # a file per Arrow batch
    driver.submit("write", path=s3_table, via="native", start=0, stop=ROWS, partitions=2,
                  delay_ms=DELAY_MS, batch_rows=5, options=options)
    out_at_kill = kill_an_executor_once_both_attempts_wrote(cluster, driver, lambda: data_objects(s3, s3_table))
    driver.result(timeout=300)

    assert table_rows(s3_table, s3_options) == expected_rows(0, ROWS)
    assert len(snapshot_list(s3_table, s3_options)) == 1
    referenced = referenced_files(s3_table, s3_options)
    killed = out_at_kill - referenced
    assert killed, "the killed attempt had files out (else this test proves nothing)"
    assert not killed & data_objects(s3, s3_table), "the killed attempt's files must be gone"
    assert leftover_files(s3, s3_table, s3_options) == set()


@pytest.mark.soak
def test_an_executor_killed_mid_write_on_the_fast_path_leaves_none_of_its_files_and_no_row_twice(
        cluster, driver, local_table):
    def files() -> set[str]:
        out = set()
        for root, _, names in os.walk(local_table):
            out.update(os.path.join(root, n) for n in names if n.endswith(".parquet"))
        return out

    driver.submit("write", path=local_table, via="fast", start=0, stop=ROWS, partitions=2, delay_ms=DELAY_MS)
    out_at_kill = kill_an_executor_once_both_attempts_wrote(cluster, driver, files)
    driver.result(timeout=300)

    assert table_rows(local_table) == expected_rows(0, ROWS)
    killed = out_at_kill - referenced_data_files(local_table)
    assert killed and not killed & files()
    assert local_leftovers(local_table) == set()


@pytest.mark.soak
def test_the_python_workers_of_an_executor_killed_mid_write_leave_none_of_their_files_and_no_row_twice(
        cluster, driver, s3, s3_table, s3_options):
    """As above, but the executor JVM lives: only its Python workers (the native writer among
    them) are SIGKILLed; Spark retries the task."""
    options = {**s3_options, "target-file-size": "1b"}
    driver.submit("write", path=s3_table, via="native", start=0, stop=ROWS, partitions=2,
                  delay_ms=DELAY_MS, batch_rows=5, options=options)
    app = driver.started["app_id"]
    out_at_kill = wait_until_both_attempts_wrote(lambda: data_objects(s3, s3_table))
    executor = cluster.executors(app)[0]
    workers = cluster.python_workers(executor)
    assert workers, "the executor runs the writer in a Python worker"
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    driver.result(timeout=300)

    assert cluster.executors(app).count(executor) == 1, "the executor JVM itself lives on"
    assert table_rows(s3_table, s3_options) == expected_rows(0, ROWS)
    killed = out_at_kill - referenced_files(s3_table, s3_options)
    assert killed and not killed & data_objects(s3, s3_table)
    assert leftover_files(s3, s3_table, s3_options) == set()
