"""CREATE TABLE AS through a catalog: the table enters the catalog only at commit (no Spark here).

Every case runs on the filesystem catalog, JDBC on SQLite and JDBC on PostgreSQL (skipped with
the reason shown when no server answers).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

import lakesink
from lakesink.errors import CatalogInconsistencyError, TableAlreadyExistsError
from lakesink.paimon.catalog.ctas import stage_table
from lakesink.protocol.crashpoints import InjectedFailure
from lakesink.protocol.staging import run_staged
from tests.catalog.conftest import commit_rows, rows_of


def _ctas(cat, name, ids, replace=False, if_not_exists=False, before_commit=None):
    staged = stage_table(cat.resolve(name, "create"), cat, replace=replace, if_not_exists=if_not_exists)

    def job():
        commit_rows(staged.staging_path, ids)
        if before_commit is not None:
            before_commit()

    run_staged(staged, job)
    return staged


def _db_entries(cat, database="shop"):
    path = cat.database_path(database)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


@pytest.fixture()
def cat(options):
    catalog = lakesink.catalog(options)
    catalog.create_database("shop")
    return catalog


def test_the_table_enters_the_catalog_only_at_commit(cat):
    seen = []
    _ctas(cat, "shop.daily", [1, 2], before_commit=lambda: seen.append(cat.list_tables("shop")))
    assert seen == [[]]  # the job ran; its table was in no catalog listing
    assert cat.list_tables("shop") == ["daily"] and _db_entries(cat) == ["daily"]
    assert rows_of(cat.location("shop.daily")) == [1, 2]
    assert not os.path.exists(os.path.join(cat.location("shop.daily"), "STAGED.json"))


def test_a_failed_job_leaves_no_catalog_entry_and_no_files(cat):
    def fail():
        raise RuntimeError("job failed on purpose")

    with pytest.raises(RuntimeError, match="on purpose"):
        _ctas(cat, "shop.daily", [1], before_commit=fail)
    assert cat.list_tables("shop") == [] and _db_entries(cat) == []
    assert cat.resolve("shop.daily", "write").exists is False


def test_an_existing_table_is_an_error_or_left_alone(cat):
    _ctas(cat, "shop.daily", [1])
    with pytest.raises(TableAlreadyExistsError, match="already exists"):
        _ctas(cat, "shop.daily", [2])
    _ctas(cat, "shop.daily", [3], if_not_exists=True)
    assert rows_of(cat.location("shop.daily")) == [1] and _db_entries(cat) == ["daily"]


def test_of_two_creates_racing_to_commit_exactly_one_wins_and_the_loser_leaves_nothing(cat):
    barrier = threading.Barrier(2)
    outcomes = {}

    def create(who, ids):
        try:
            _ctas(cat, "shop.daily", ids, before_commit=barrier.wait)  # both staged, both commit at once
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
    winner = [1, 2] if outcomes["a"] == "created" else [3, 4, 5]
    assert rows_of(cat.location("shop.daily")) == winner
    assert cat.list_tables("shop") == ["daily"] and _db_entries(cat) == ["daily"]  # the loser's staging is gone


def test_a_failure_inside_the_catalog_transaction_rolls_back_entry_and_move(jdbc_options, monkeypatch):
    cat = lakesink.catalog(jdbc_options)
    cat.create_database("shop")
    monkeypatch.setenv("LAKESINK_FAIL_AT", "catalog-publish")
    with pytest.raises(InjectedFailure):
        _ctas(cat, "shop.daily", [1])
    assert cat.list_tables("shop") == [] and _db_entries(cat) == []
    monkeypatch.delenv("LAKESINK_FAIL_AT")
    _ctas(cat, "shop.daily", [2])
    assert rows_of(cat.location("shop.daily")) == [2]


def test_replace_swaps_the_table_and_keeps_one_catalog_entry(cat):
    _ctas(cat, "shop.daily", [1])
    _ctas(cat, "shop.daily", [7, 8], replace=True)
    assert rows_of(cat.location("shop.daily")) == [7, 8]
    assert cat.list_tables("shop") == ["daily"] and _db_entries(cat) == ["daily"]


def test_a_directory_in_the_way_that_the_catalog_does_not_list_is_refused(jdbc_options):
    cat = lakesink.catalog(jdbc_options)
    cat.create_database("shop")
    staged = stage_table(cat.resolve("shop.daily", "create"), cat)
    staged.begin()
    commit_rows(staged.staging_path, [1])
    commit_rows(cat.location("shop.daily"), [9])  # someone else's table appears, never registered
    with pytest.raises(CatalogInconsistencyError, match="already holds files"):
        staged.commit()
    assert cat.list_tables("shop") == [] and _db_entries(cat) == ["daily"]
    assert rows_of(cat.location("shop.daily")) == [9]  # theirs, untouched; ours removed


def _child(options, where, env=None):
    return subprocess.Popen([sys.executable, "-m", "tests.catalog.ctas_child", json.dumps(options), "shop.daily",
                             where], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_process_killed_mid_job_or_mid_publication_leaves_no_entry_and_clean_up_removes_its_files(cat):
    """SIGKILL (1) while the job writes the staged table, (2) after the table moved in place and
    before the catalog's transaction committed (JDBC). No entry either way; the table is refused
    by name; the next CTAS of the name succeeds (clearing the dead publication once it holds the
    row), and `clean_staging` removes the dead job's staged table."""
    proc = _child(cat.config.options, "job")
    assert proc.stdout.readline().startswith("READY")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert cat.list_tables("shop") == [] and len(_db_entries(cat)) == 1  # the hidden staged table
    if cat.is_jdbc:
        proc = _child(cat.config.options, "publish", {"LAKESINK_CRASH_AT": "catalog-publish"})
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
        assert cat.list_tables("shop") == [] and "daily" in _db_entries(cat)  # moved, never committed
        with pytest.raises(CatalogInconsistencyError, match="interrupted CREATE TABLE AS.*clean_staging"):
            cat.resolve("shop.daily", "read")
    _ctas(cat, "shop.daily", [4])
    assert rows_of(cat.location("shop.daily")) == [4] and cat.list_tables("shop") == ["daily"]
    removed = cat.clean_staging()
    assert len(removed) == 1 and ".daily.lakesink-staging-" in removed[0]
    assert _db_entries(cat) == ["daily"]


def test_clean_staging_removes_a_dead_publication_and_keeps_a_published_table(jdbc_options):
    """The state a kill inside the publishing transaction leaves (table in place with its marker,
    no row), built by hand; and a published table that still carries its marker."""
    cat = lakesink.catalog(jdbc_options)
    cat.create_database("shop")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    for name in ("daily", "weekly"):
        staged = stage_table(cat.resolve(f"shop.{name}", "create"), cat)
        staged.begin()
        commit_rows(staged.staging_path, [1])
        marker = os.path.join(staged.staging_path, "STAGED.json")
        with open(marker) as src:
            content = json.load(src)
        with open(marker, "w") as out:
            json.dump({**content, "pid": int(dead)}, out)
        os.rename(staged.staging_path, cat.location(f"shop.{name}"))
    cat.register_table("shop.weekly")  # this one's transaction committed; its marker stayed
    assert cat.clean_staging(dry_run=True) == [cat.location("shop.daily")]
    assert cat.clean_staging() == [cat.location("shop.daily")]
    assert _db_entries(cat) == ["weekly"] and cat.list_tables("shop") == ["weekly"]
    assert not os.path.exists(os.path.join(cat.location("shop.weekly"), "STAGED.json"))
    assert rows_of(cat.location("shop.weekly")) == [1]
