"""lakesink as a sink of Spark Declarative Pipelines: real `spark-pipelines run` children.

One pipeline project (docs/pipelines.md shows the same files): JSON files read as a
stream, one file per micro-batch, into two lakesink sinks: an append table that must
hold every source row exactly once, and a primary-key table fed a CDC stream through
`rowkind.field` (the workaround for AutoCDC targets). The first run is killed with
SIGKILL on its whole process group once batches are committing; more files arrive;
the second run on the same `storage` (SDP keeps each flow's checkpoint there) catches up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from lakesink._java import ensure_java
from tests.helpers import latest_snapshot_id, leftover_files, read_table

pytestmark = pytest.mark.spark

SPARK_PIPELINES = Path(sys.executable).parent / "spark-pipelines"
RUN_TIMEOUT = 420

# pyspark 4.3's client fails on the last response of a run whose flows ran Python workers
# (any Python data source or UDF): the run has COMPLETED, then the CLI exits 1 with this.
CLIENT_ERROR = "[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__="

SPEC = """\
name: lakesink_orders
storage: {storage}
libraries:
  - glob:
      include: transformations/**
"""

TRANSFORMATIONS = '''\
import lakesink
from pyspark import pipelines as dp

lakesink.register(spark)  # format("paimon") on the pipeline's Spark Connect session

SOURCE = {source!r}
SCHEMA = "id long, v string, op string"

dp.create_sink("orders_sink", format="paimon", options={{"path": {orders!r}}})

@dp.append_flow(target="orders_sink")
def orders():
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(SOURCE)

# A CDC stream into a primary-key table: op holds +I, -U, +U or -D. ("lakesink-paimon" is
# lakesink's other name, for sessions where Apache Paimon's own connector owns "paimon".)
dp.create_sink("users_sink", format="lakesink-paimon",
               options={{"path": {users!r}, "primary-key": "id", "bucket": "2", "rowkind.field": "op"}})

@dp.append_flow(target="users_sink")
def users():
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(SOURCE)
'''


def write_project(root: Path, source: Path, orders: Path, users: Path, storage: Path) -> Path:
    (root / "transformations").mkdir(parents=True)
    (root / "spark-pipeline.yml").write_text(SPEC.format(storage=storage.as_uri()))
    (root / "transformations" / "orders.py").write_text(
        TRANSFORMATIONS.format(source=str(source), orders=str(orders), users=str(users)))
    return root


def source_rows(i: int) -> list[dict]:
    """File i inserts ids 10i..10i+9; from the second file on it also deletes the first id of
    the file before and updates its second (no id twice in one file: one batch per file)."""
    rows = [{"id": 10 * i + j, "v": f"v{10 * i + j}", "op": "+I"} for j in range(10)]
    if i > 0:
        rows += [{"id": 10 * (i - 1), "v": None, "op": "-D"},
                 {"id": 10 * (i - 1) + 1, "v": "updated", "op": "+U"}]
    return rows


def add_files(source: Path, first: int, count: int) -> None:
    source.mkdir(exist_ok=True)
    base = time.time() - 3600
    for i in range(first, first + count):
        path = source / f"part-{i:03d}.json"
        path.write_text("\n".join(json.dumps(r) for r in source_rows(i)) + "\n")
        os.utime(path, (base + i, base + i))  # the file source takes files in modification order


def expected_users(files: int) -> dict[int, str]:
    state: dict[int, str] = {}
    for i in range(files):
        for row in source_rows(i):
            if row["op"] == "-D":
                state.pop(row["id"], None)
            else:
                state[row["id"]] = row["v"]
    return state


def pipeline_env() -> dict[str, str]:
    ensure_java()
    env = {k: v for k, v in os.environ.items() if k != "LAKESINK_MASTER"}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               # The pipeline's local Connect server on a free port, not 15002 (which another
               # Spark Connect test may hold): pyspark's switch for that is SPARK_TESTING.
               SPARK_TESTING="1")
    return env


def start(project: Path, log: Path, *args: str) -> subprocess.Popen:
    out = open(log, "wb")
    try:
        return subprocess.Popen([str(SPARK_PIPELINES), "run", *args], cwd=project, env=pipeline_env(), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        out.close()


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI, its JVM (Connect server, driver) and Python workers
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def assert_completed(proc: subprocess.Popen, log: Path) -> str:
    text = log.read_text(errors="replace")
    assert "Run is COMPLETED." in text, text[-4000:]
    # Exit 0, or 1 from pyspark's client after the completed run (CLIENT_ERROR); nothing else.
    assert proc.returncode == 0 or (proc.returncode == 1 and CLIENT_ERROR in text), text[-4000:]
    return text


def rows_of(path: Path) -> list[tuple]:
    table = read_table(str(path))
    return sorted(zip(table.column("id").to_pylist(), table.column("op").to_pylist(), table.column("v").to_pylist()),
                  key=repr)


# ./dev full (~70 CPU-s: two pipeline runs and a kill). The sink's commit protocol is the
# `format("paimon")` path the default run kills at every point (tests/crash/matrix.py).
@pytest.mark.crash
@pytest.mark.full
def test_a_pipeline_killed_while_committing_and_run_again_writes_every_source_row_exactly_once(tmp_path):
    source, storage = tmp_path / "source", tmp_path / "storage"
    orders, users = tmp_path / "wh" / "shop.db" / "orders", tmp_path / "wh" / "shop.db" / "users"
    project = write_project(tmp_path / "project", source, orders, users, storage)
    first_files, more_files = 5, 2
    add_files(source, 0, first_files)

    # Run 1: killed (SIGKILL, whole process group) once the second snapshot is published.
    run1 = start(project, tmp_path / "run1.log")
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while (latest_snapshot_id(str(orders)) or 0) < 2:
            assert run1.poll() is None, (tmp_path / "run1.log").read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the pipeline published no second snapshot in time"
            time.sleep(0.1)
        assert run1.poll() is None  # the kill lands on a live run, batches still to come
    finally:
        kill_group(run1)
    assert run1.returncode == -signal.SIGKILL
    after_kill = Counter(rows_of(orders))
    source_size = sum(len(source_rows(i)) for i in range(first_files))
    assert sum(after_kill.values()) < source_size, "the kill came after the whole source was written"
    assert max(after_kill.values()) == 1, "a row committed twice before the kill"

    # More source rows, then run 2 on the same storage: resumes from the flows' checkpoints.
    add_files(source, first_files, more_files)
    run2 = start(project, tmp_path / "run2.log")
    try:
        run2.wait(timeout=RUN_TIMEOUT)
    finally:
        kill_group(run2)
    text = assert_completed(run2, tmp_path / "run2.log")
    print(f"run 1 killed with {sum(after_kill.values())} rows committed; run 2 rc={run2.returncode}")

    files = first_files + more_files
    every_row = sorted(((r["id"], r["op"], r["v"]) for i in range(files) for r in source_rows(i)), key=repr)
    assert rows_of(orders) == every_row, text[-4000:]
    users_now = read_table(str(users))
    assert dict(zip(users_now.column("id").to_pylist(), users_now.column("v").to_pylist())) == expected_users(files)
    assert users_now.num_rows == len(expected_users(files))
    # SDP's checkpoint of each flow is <storage>/_checkpoints/<sink>/<flow>/<n>; lakesink keeps its
    # pending state inside it.
    assert list(storage.glob("_checkpoints/orders_sink/orders/*/lakesink")), sorted(map(str, storage.rglob("*")))
    assert leftover_files(str(orders)) == set()
    assert leftover_files(str(users)) == set()


CATALOG_SPEC = """\
name: lakesink_tables
storage: {storage}
configuration:
  spark.lakesink.catalog.warehouse: {warehouse}
libraries:
  - glob:
      include: transformations/**
"""

CATALOG_TRANSFORMATIONS = '''\
import lakesink
from pyspark import pipelines as dp

SOURCE = {source!r}
SCHEMA = "id long, v string, op string"

try:  # a definition file may not set session conf: the catalog belongs in the spec's configuration
    lakesink.register(spark, catalog={{"warehouse": "/elsewhere"}})
except Exception as exc:
    print("CATALOG ARGUMENT REFUSED:", str(exc).splitlines()[0], flush=True)
lakesink.register(spark)
lakesink.catalog(spark).create_database("shop")

dp.create_sink("events_sink", format="paimon", options={{"path": "shop.events"}})

@dp.append_flow(target="events_sink")
def events():
    return spark.readStream.schema(SCHEMA).json(SOURCE)

@dp.table(name="events_table", format="paimon")
def events_table():
    return spark.readStream.schema(SCHEMA).json(SOURCE)

@dp.materialized_view(name="events_view", format="paimon")
def events_view():
    return spark.read.schema(SCHEMA).json(SOURCE)
'''

AUTO_CDC_TRANSFORMATIONS = '''\
import lakesink
from pyspark import pipelines as dp

lakesink.register(spark)

@dp.temporary_view(name="changes")
def changes():
    return spark.readStream.schema("id long, v string, op string").json({source!r})

dp.create_streaming_table("users", format="paimon")
dp.create_auto_cdc_flow(target="users", source="changes", keys=["id"], sequence_by="id")
'''


@pytest.mark.full  # a second pipeline project (~2 min): ./dev full
def test_sinks_take_catalog_names_while_paimon_tables_views_and_auto_cdc_targets_are_refused(tmp_path):
    """One run: a sink by name through the spec's catalog; a streaming table and a materialized
    view in format "paimon" (their flows fail with lakesink's pointer to sinks). Beside it, a
    run with an AutoCDC target in format "paimon" (Spark refuses it before any flow runs)."""
    source, warehouse = tmp_path / "source", tmp_path / "wh"
    add_files(source, 0, 2)
    tables = tmp_path / "tables"
    (tables / "transformations").mkdir(parents=True)
    (tables / "spark-pipeline.yml").write_text(
        CATALOG_SPEC.format(storage=(tmp_path / "storage").as_uri(), warehouse=warehouse))
    (tables / "transformations" / "tables.py").write_text(CATALOG_TRANSFORMATIONS.format(source=str(source)))
    cdc = tmp_path / "cdc"
    (cdc / "transformations").mkdir(parents=True)
    (cdc / "spark-pipeline.yml").write_text(SPEC.format(storage=(tmp_path / "cdc-storage").as_uri()))
    (cdc / "transformations" / "cdc.py").write_text(AUTO_CDC_TRANSFORMATIONS.format(source=str(source)))

    runs = [(start(tables, tmp_path / "tables.log"), tmp_path / "tables.log"),
            (start(cdc, tmp_path / "cdc.log"), tmp_path / "cdc.log")]  # side by side: each on its own port
    for proc, _ in runs:
        try:
            proc.wait(timeout=RUN_TIMEOUT)
        finally:
            kill_group(proc)
    (tables_run, tables_log), (cdc_run, cdc_log) = runs
    text = tables_log.read_text(errors="replace")

    assert "CATALOG ARGUMENT REFUSED: [SESSION_MUTATION_IN_DECLARATIVE_PIPELINE.SET_RUNTIME_CONF]" in text, text[-4000:]
    assert "Flow events has COMPLETED." in text, text[-4000:]
    events = read_table(str(warehouse / "shop.db" / "events"))  # the spec's catalog, kept on the session
    assert sorted(events.column("id").to_pylist()) == sorted(r["id"] for i in range(2) for r in source_rows(i))
    assert tables_run.returncode != 0 and "Run is COMPLETED." not in text
    for flow in ("events_table", "events_view"):
        assert f"Flow 'spark_catalog.default.{flow}' has FAILED" in text, text[-4000:]
    assert "ConfigurationError: No table" in text and "dp.create_sink(name, format='paimon'" in text
    assert sorted(p.name for p in (warehouse / "shop.db").iterdir()) == ["events"]  # nothing else written

    cdc_text = cdc_log.read_text(errors="replace")
    assert cdc_run.returncode != 0, cdc_text[-4000:]
    assert "[AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE]" in cdc_text, cdc_text[-4000:]


@pytest.mark.soak  # two more pipeline runs (~3 min on a busy machine): on demand
def test_a_full_refresh_starts_the_sink_flow_on_a_new_checkpoint_and_appends_the_source_again(tmp_path):
    source, storage = tmp_path / "source", tmp_path / "storage"
    orders, users = tmp_path / "wh" / "shop.db" / "orders", tmp_path / "wh" / "shop.db" / "users"
    project = write_project(tmp_path / "project", source, orders, users, storage)
    add_files(source, 0, 3)
    for number, args in enumerate(([], ["--full-refresh-all"])):
        log = tmp_path / f"run{number}.log"
        run = start(project, log, *args)
        try:
            run.wait(timeout=RUN_TIMEOUT)
        finally:
            kill_group(run)
        assert_completed(run, log)

    once = sorted(((r["id"], r["op"], r["v"]) for i in range(3) for r in source_rows(i)), key=repr)
    assert rows_of(orders) == sorted(once * 2, key=repr)  # SDP tells the sink nothing: appended again
    assert sorted(p.name for p in storage.glob("_checkpoints/orders_sink/orders/*")) == ["0", "1"]
    users_now = read_table(str(users))  # upserts of the same changes: the same state
    assert dict(zip(users_now.column("id").to_pylist(), users_now.column("v").to_pylist())) == expected_users(3)
