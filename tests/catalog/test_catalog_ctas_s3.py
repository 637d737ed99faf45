"""CREATE TABLE AS through a JDBC catalog whose warehouse is on an object store (no Spark here).

The table is written in place under a reservation in the catalog database and enters Paimon's
`paimon_tables` only at commit. Every case runs on the S3-compatible test server with the catalog
on SQLite and on PostgreSQL (skipped with the reason shown when no server answers).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import lakesink
from lakesink.errors import (CatalogInconsistencyError, CommitFailedError, TableAlreadyExistsError,
                             TableNotFoundError)
from lakesink.paimon.catalog import reservations
from lakesink.paimon.catalog.ctas import stage_table
from lakesink.protocol.crashpoints import InjectedFailure
from lakesink.protocol.staging import run_staged
from tests.catalog.conftest import forget_postgres_catalog, write_rows, s3_catalog_options
from tests.s3server import s3_bucket
from tests.staged import read_back

pytestmark = pytest.mark.full  # the catalog CTAS matrix on S3 (the local one runs by default): ./dev full

BUCKET = "lakesink-catalog"


@pytest.fixture(scope="module")
def s3():
    with s3_bucket(BUCKET) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def cat(request, tmp_path, s3):
    options = s3_catalog_options(request.param, tmp_path, s3, BUCKET)
    catalog = lakesink.catalog(options)
    catalog.create_database("shop")
    yield catalog
    forget_postgres_catalog(options)


def _ctas(cat, name, ids, before_commit=None, **kwargs):
    staged = stage_table(cat.resolve(name, "create"), cat, **kwargs)

    def job():
        write_rows(staged.staging_path, ids, cat.config.fs_options)
        if before_commit is not None:
            before_commit()

    run_staged(staged, job)
    return staged


def _objects(s3, cat, name="daily") -> list[str]:
    prefix = cat.location(f"shop.{name}")[len(f"s3://{BUCKET}/"):] + "/"
    return [o["Key"] for o in s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


def _reserved(cat) -> list[str]:
    return [f"{r.database}.{r.table}" for r in cat._call(reservations.list_all)]


def _rows(cat, name="shop.daily") -> list[int]:
    return sorted(read_back(cat.location(name), cat.config.fs_options).column("id").to_pylist())


def test_the_table_is_written_in_place_and_enters_the_catalog_only_at_commit(cat, s3):
    seen = {}

    def during():
        seen["tables"] = cat.list_tables("shop")
        seen["reserved"] = _reserved(cat)
        seen["objects"] = len(_objects(s3, cat))
        with pytest.raises(TableNotFoundError, match="being created by a CREATE TABLE AS by process"):
            cat.resolve("shop.daily", "read")
        with pytest.raises(TableAlreadyExistsError, match="being created"):
            cat.resolve("shop.daily", "write")  # a write by name would write into the half-made table

    _ctas(cat, "shop.daily", [1, 2], before_commit=during)
    assert seen["tables"] == [] and seen["reserved"] == ["shop.daily"] and seen["objects"] > 0
    assert cat.list_tables("shop") == ["daily"] and _reserved(cat) == []
    assert _rows(cat) == [1, 2]
    table = cat.open("shop.daily")  # through the catalog's checks, with pypaimon
    builder = table.new_read_builder()
    assert sorted(builder.new_read().to_arrow(builder.new_scan().plan().splits()).column("id").to_pylist()) == [1, 2]


def test_a_failed_job_leaves_no_catalog_entry_no_reservation_and_no_files(cat, s3):
    def fail():
        raise RuntimeError("job failed on purpose")

    with pytest.raises(RuntimeError, match="on purpose"):
        _ctas(cat, "shop.daily", [1], before_commit=fail)
    assert cat.list_tables("shop") == [] and _reserved(cat) == [] and _objects(s3, cat) == []
    assert cat.resolve("shop.daily", "write").exists is False
    _ctas(cat, "shop.daily", [5])
    assert _rows(cat) == [5]


def test_a_failure_inside_the_catalog_transaction_rolls_back_and_removes_the_files(cat, s3, monkeypatch):
    monkeypatch.setenv("LAKESINK_FAIL_AT", "catalog-publish")
    with pytest.raises(InjectedFailure):
        _ctas(cat, "shop.daily", [1])
    assert cat.list_tables("shop") == [] and _reserved(cat) == [] and _objects(s3, cat) == []


def test_an_existing_table_is_an_error_or_left_alone(cat, s3):
    _ctas(cat, "shop.daily", [1])
    before = _objects(s3, cat)
    ran = []
    with pytest.raises(TableAlreadyExistsError, match="already exists"):
        _ctas(cat, "shop.daily", [2], before_commit=lambda: ran.append(1))
    assert _ctas(cat, "shop.daily", [3], if_not_exists=True).skipped
    assert ran == [] and _rows(cat) == [1] and _objects(s3, cat) == before and _reserved(cat) == []


def test_of_two_racing_creates_exactly_one_wins_and_the_loser_writes_nothing(cat, s3):
    """Both start at once, each with a connection of its own; the reservation's primary key lets
    one through, the other fails before its job runs."""
    barrier = threading.Barrier(2)
    outcomes, jobs = {}, []

    def create(who, ids):
        staged = stage_table(cat.resolve("shop.daily", "create"), cat)

        def job():
            jobs.append(who)
            write_rows(staged.staging_path, ids, cat.config.fs_options)

        barrier.wait()
        try:
            run_staged(staged, job)
            outcomes[who] = "created"
        except TableAlreadyExistsError:
            outcomes[who] = "lost"

    threads = [threading.Thread(target=create, args=("a", [1, 2])),
               threading.Thread(target=create, args=("b", [3, 4, 5]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(outcomes.values()) == ["created", "lost"]
    winner = "a" if outcomes["a"] == "created" else "b"
    assert jobs == [winner]  # the loser never wrote
    assert _rows(cat) == ([1, 2] if winner == "a" else [3, 4, 5])
    assert cat.list_tables("shop") == ["daily"] and _reserved(cat) == []


def test_a_write_by_name_cannot_create_a_name_a_create_table_as_holds(cat):
    staged = stage_table(cat.resolve("shop.daily", "create"), cat)
    staged.begin()
    try:
        import pyarrow as pa
        from lakesink.paimon.table import tables
        write_rows(staged.staging_path, [1], cat.config.fs_options)
        schema = tables.open_table(staged.staging_path, cat.config.fs_options).table_schema
        from lakesink.paimon.catalog.names import TableName
        with pytest.raises(TableAlreadyExistsError, match="being created by a CREATE TABLE AS"):
            cat.register(TableName("shop", "daily"), schema)  # what a write creating the name does
        assert cat.list_tables("shop") == [] and pa is not None
    finally:
        staged.abort()
    assert _reserved(cat) == []


def test_files_at_the_location_without_a_catalog_entry_are_refused_and_kept(cat, s3):
    write_rows(cat.location("shop.daily"), [9], cat.config.fs_options)  # someone's, never registered
    before = _objects(s3, cat)
    with pytest.raises(CatalogInconsistencyError, match="has no entry"):
        _ctas(cat, "shop.daily", [1])
    assert _objects(s3, cat) == before and _reserved(cat) == [] and cat.list_tables("shop") == []


def test_a_sibling_whose_name_starts_alike_is_not_touched(cat, s3):
    write_rows(cat.location("shop.daily2"), [7], cat.config.fs_options)
    cat.register_table("shop.daily2")
    with pytest.raises(RuntimeError):
        _ctas(cat, "shop.daily", [1], before_commit=lambda: (_ for _ in ()).throw(RuntimeError("fail")))
    assert _objects(s3, cat) == [] and _rows(cat, "shop.daily2") == [7]


def _child(options, where, env=None):
    return subprocess.Popen([sys.executable, "-m", "tests.catalog.ctas_child", json.dumps(options), "shop.daily",
                             where], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_driver_killed_mid_job_leaves_no_entry_and_clean_staging_removes_its_files(cat, s3):
    proc = _child(cat.config.options, "job")
    assert proc.stdout.readline().startswith("READY"), proc.stderr.read()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert cat.list_tables("shop") == [] and _reserved(cat) == ["shop.daily"] and _objects(s3, cat)
    with pytest.raises(TableNotFoundError, match="job looks dead.*clean_staging"):
        cat.resolve("shop.daily", "read")
    assert cat.clean_staging(dry_run=True) == [cat.location("shop.daily")]
    assert _objects(s3, cat) and _reserved(cat) == ["shop.daily"]  # a dry run changes nothing
    assert cat.clean_staging() == [cat.location("shop.daily")]
    assert _objects(s3, cat) == [] and _reserved(cat) == [] and cat.list_tables("shop") == []
    _ctas(cat, "shop.daily", [4])
    assert _rows(cat) == [4]


def test_a_driver_killed_inside_the_catalog_transaction_leaves_no_entry(cat, s3):
    proc = _child(cat.config.options, "publish", {"LAKESINK_CRASH_AT": "catalog-publish"})
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    assert cat.list_tables("shop") == [] and _reserved(cat) == ["shop.daily"] and _objects(s3, cat)
    assert cat.clean_staging() == [cat.location("shop.daily")]
    assert _objects(s3, cat) == [] and _reserved(cat) == []


def test_a_new_create_takes_over_the_name_of_a_dead_job_on_this_host(cat, s3):
    proc = _child(cat.config.options, "job")
    assert proc.stdout.readline().startswith("READY"), proc.stderr.read()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    _ctas(cat, "shop.daily", [8, 9])  # clears the dead job's files itself
    assert _rows(cat) == [8, 9] and cat.list_tables("shop") == ["daily"] and _reserved(cat) == []


def test_clean_staging_keeps_a_running_job_and_the_commit_of_a_job_judged_dead_fails(cat, s3):
    staged = stage_table(cat.resolve("shop.daily", "create"), cat)
    staged.begin()
    write_rows(staged.staging_path, [1], cat.config.fs_options)
    assert cat.clean_staging() == []  # its process is this one, alive, with a fresh heartbeat
    assert _objects(s3, cat)
    time.sleep(1.1)
    assert cat.clean_staging(older_than=1.0) == [cat.location("shop.daily")]  # no heartbeat for 1 s
    with pytest.raises(CommitFailedError, match="reservation of shop.daily was removed"):
        try:
            staged.commit()
        except BaseException:
            staged.abort()
            raise
    assert cat.list_tables("shop") == [] and _reserved(cat) == [] and _objects(s3, cat) == []


def test_a_registration_racing_an_uncommitted_reservation_waits_for_it_and_then_refuses(cat, tmp_path):
    """The write-skew case: a reservation INSERTed but not yet committed. A registration that only
    SELECTed reservations would not see it (PostgreSQL's READ COMMITTED) and both would commit; the
    guard's INSERT of the same key waits for the reservation's transaction, then fails."""
    from lakesink.paimon.catalog.config import connect
    from lakesink.paimon.catalog.names import TableName

    write_rows(str(tmp_path / "other"), [1])
    from lakesink.paimon.table import tables
    schema = tables.open_table(str(tmp_path / "other")).table_schema
    other = connect(cat.config)
    reservations.ensure_table(other)
    other.connection.execute(
        f"INSERT INTO {reservations.TABLE} (catalog_key, database_name, table_name, token, location, host, pid, "
        "created_at_ms, heartbeat_at_ms) VALUES (?, 'shop', 'daily', 'held', ?, 'h', 1, 0, 0)",
        (other.catalog_key, cat.location("shop.daily")))  # not committed yet
    outcome = []

    def register():
        try:
            outcome.append(cat.register(TableName("shop", "daily"), schema))
        except TableAlreadyExistsError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=register)
    thread.start()
    thread.join(timeout=1.5)
    assert thread.is_alive() and outcome == []  # waiting on the reservation's key
    other.connection.connection.commit()
    thread.join(timeout=60)
    assert len(outcome) == 1 and isinstance(outcome[0], TableAlreadyExistsError), outcome
    assert cat.list_tables("shop") == []
    other.connection.execute(f"DELETE FROM {reservations.TABLE} WHERE catalog_key = ?", (other.catalog_key,))
    other.connection.connection.commit()
    other.close()
