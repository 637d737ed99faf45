"""Kill the driver (SIGKILL, whole process group) at each protocol point; restart; every row once.

Also: a task attempt that fails after its staging table was written is retried by Spark
(local[2,3]); only the winning attempt's rows land and the dead attempt's table is dropped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.crash]
REPO = Path(__file__).resolve().parents[2]
BATCHES = [list(range(0, 40)), list(range(40, 70)), list(range(70, 100))]


def make_source(directory: Path) -> list[int]:
    directory.mkdir(parents=True)
    for k, ids in enumerate(BATCHES):
        path = directory / f"part-{k:05d}.parquet"
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids]}), path)
        os.utime(path, (1_000_000 + k, 1_000_000 + k))
    return [i for ids in BATCHES for i in ids]


def run_driver(tmp_path: Path, db, path: str, run: int, env_extra: dict) -> int:
    cmd = [sys.executable, "-m", "tests.jdbc.driver", "--url", db.url, "--table", db.table("events"),
           "--source", str(tmp_path / "source"), "--path", path, "--checkpoint", str(tmp_path / "chk")]
    for key, value in db.options.items():
        cmd += ["--option", f"{key}={value}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESINK_CRASH", "LAKESINK_FAIL"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), str(REPO), env.get("PYTHONPATH")]))
    env["PYSPARK_PYTHON"] = sys.executable  # plain: see tests/crash/harness.py
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.update(env_extra)
    with open(tmp_path / f"run-{run}.log", "wb") as log:
        child = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return child.wait(timeout=300)
        finally:
            try:
                os.killpg(child.pid, signal.SIGKILL)  # what the dead driver left in its group
            except ProcessLookupError:
                pass


def check_exactly_once(db, expected: list[int]) -> None:
    got = Counter(r[0] for r in db.rows("events"))
    assert {i: n for i, n in got.items() if n > 1} == {}, "duplicates"
    assert sorted(got) == sorted(expected), "lost or foreign rows"
    assert db.staging_tables() == [] and db.registered() == []


# In the default run: each point around the commit once, killed twice in a row (the second run
# restarts after the first kill and dies after its own snapshot); PostgreSQL and format("lakesink-jdbc")
# take part through the task-staged case below. ./dev full also kills the format path on PostgreSQL;
# every other combination runs with `./dev soak`.
DEFAULT = {("sqlite", "fast"): ("before-snapshot", "after-snapshot")}
FULL = {("postgres", "format"): ("after-snapshot",)}
CASES = [pytest.param(dialect, path, points, id=f"{dialect}-{path}-{'+'.join(points)}")
         for (dialect, path), points in DEFAULT.items()]
CASES += [pytest.param(dialect, path, points, marks=pytest.mark.full, id=f"{dialect}-{path}-{'+'.join(points)}")
          for (dialect, path), points in FULL.items()]
CASES += [pytest.param(dialect, path, (point,), marks=pytest.mark.soak, id=f"{dialect}-{path}-{point}")
          for dialect in ("sqlite", "postgres") for path in ("fast", "format")
          for point in ("tasks-done", "before-snapshot", "after-snapshot")
          if point not in DEFAULT.get((dialect, path), ()) + FULL.get((dialect, path), ())]


@pytest.mark.parametrize("db,path,points", CASES, indirect=["db"])
def test_a_driver_killed_at_a_protocol_point_loses_and_duplicates_nothing(tmp_path, db, path, points):
    expected = make_source(tmp_path / "source")
    for run, point in enumerate(points, start=1):
        code = run_driver(tmp_path, db, path, run, {"LAKESINK_CRASH_AT": f"{point}@2",
                                                    "LAKESINK_CRASH_COUNTER": str(tmp_path / f"counter-{run}")})
        log = (tmp_path / f"run-{run}.log").read_text()
        assert code == -signal.SIGKILL, f"crash point {point} not reached: {log[-3000:]}"
        ids = [r[0] for r in db.rows("events")] if db.exists("events") else []
        assert len(ids) == len(set(ids)), f"rows twice after the kill at {point}"
    code = run_driver(tmp_path, db, path, len(points) + 1, {})
    assert code == 0, (tmp_path / f"run-{len(points) + 1}.log").read_text()[-3000:]
    check_exactly_once(db, expected)


@pytest.mark.parametrize("db,path", [
    pytest.param("sqlite", "batch", id="sqlite-batch", marks=pytest.mark.full),
    pytest.param("postgres", "format-batch", id="postgres-format-batch"),
    pytest.param("postgres", "batch", id="postgres-batch", marks=pytest.mark.soak),
    pytest.param("sqlite", "format-batch", id="sqlite-format-batch", marks=pytest.mark.soak)], indirect=["db"])
def test_a_task_attempt_that_failed_after_staging_is_retried_and_counted_once(tmp_path, db, path):
    expected = make_source(tmp_path / "source")
    code = run_driver(tmp_path, db, path, 1, {"LAKESINK_FAIL_AT": "task-staged@1",
                                                 "LAKESINK_CRASH_COUNTER": str(tmp_path / "counter")})
    log = (tmp_path / "run-1.log").read_text()
    assert code == 0, log[-3000:]
    assert "injected failure at task-staged" in log  # the first attempt staged its rows, then failed
    check_exactly_once(db, expected)


# ./dev full: PostgreSQL after filling; the rest with ./dev soak (the same commit code). The default
# run kills the JDBC sink mid-job above and ends a CTAS without kills (tests/jdbc/test_spark_jdbc.py).
@pytest.mark.parametrize("db,point", [
    pytest.param("postgres", "after-snapshot", id="postgres-after-snapshot", marks=pytest.mark.full),
    pytest.param("sqlite", "after-snapshot", id="sqlite-after-snapshot", marks=pytest.mark.soak),
    pytest.param("sqlite", "before-snapshot", id="sqlite-before-snapshot", marks=pytest.mark.soak),
    pytest.param("postgres", "before-snapshot", id="postgres-before-snapshot", marks=pytest.mark.soak),
], indirect=["db"])
def test_a_driver_killed_mid_ctas_leaves_no_table_and_clean_staging_removes_its_hidden_table(tmp_path, db, point):
    """CREATE TABLE AS killed while filling its hidden table (before-snapshot) or after filling
    it, before the rename (after-snapshot): no target table; clean_staging drops what is left;
    the re-run creates the table with every row once."""
    import lakesink
    expected = make_source(tmp_path / "source")
    code = run_driver(tmp_path, db, "ctas", 1, {"LAKESINK_CRASH_AT": f"{point}@1",
                                                "LAKESINK_CRASH_COUNTER": str(tmp_path / "counter")})
    assert code == -signal.SIGKILL, f"crash point {point} not reached: {(tmp_path / 'run-1.log').read_text()[-3000:]}"
    assert not db.exists("events"), "a killed CREATE TABLE AS must not leave the table"
    assert db.registered(), "the hidden table of the killed job is registered for clean-up"
    dropped = lakesink.jdbc.clean_staging(db.url, older_than=0, options=db.options)
    assert dropped and db.staging_tables() == [] and db.registered() == []
    assert not db.exists("events")
    code = run_driver(tmp_path, db, "ctas", 2, {})
    assert code == 0, (tmp_path / "run-2.log").read_text()[-3000:]
    check_exactly_once(db, expected)
