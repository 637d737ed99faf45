"""`lakesink clean-staging --catalog ...` without a TABLE on a local warehouse: the staged tables
of dead CREATE TABLE AS jobs in every database of the catalog go, a running job's stays (no
Spark). Filesystem catalog, JDBC on SQLite and JDBC on PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

import lakesink
from lakesink.cli import cli
from lakesink.paimon.catalog.ctas import stage_table
from lakesink.paimon.catalog.staged_table import MARKER
from tests.catalog.conftest import commit_rows, rows_of


@pytest.fixture()
def cat(options):
    catalog = lakesink.catalog(options)
    catalog.create_database("shop")
    catalog.create_database("sales")
    return catalog


def _begin(cat, name, ids):
    staged = stage_table(cat.resolve(name, "create"), cat)
    staged.begin()
    commit_rows(staged.staging_path, ids)
    return staged


def _gone_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def _cli(cat, *args):
    catalog = [a for k, v in cat.config.options.items() for a in ("--catalog", f"{k}={v}")]
    result = CliRunner().invoke(cli, ["-o", "json", "clean-staging", *args, *catalog], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_cli_cleans_every_database_of_the_catalog_and_keeps_a_running_job(cat):
    dead = _begin(cat, "sales.daily", [1])
    marker = os.path.join(dead.staging_path, MARKER)
    with open(marker) as f:
        data = json.load(f)
    with open(marker, "w") as f:
        json.dump({**data, "pid": _gone_pid()}, f)  # its driver was killed
    live = _begin(cat, "shop.live", [2])

    dry = _cli(cat, "--dry-run")
    actions = {os.path.basename(e["path"]).split(".lakesink-staging-")[0]: e["action"] for e in dry["entries"]}
    assert actions == {".daily": "would remove", ".live": "kept"} and os.path.isdir(dead.staging_path)

    report = _cli(cat)
    assert report["removed_count"] == 1 and report["kept_count"] == 1
    assert not os.path.exists(dead.staging_path) and os.path.isdir(live.staging_path)
    assert "gone" in next(e["reason"] for e in report["entries"] if e["action"] == "removed")

    live.commit()
    assert cat.list_tables("shop") == ["live"] and rows_of(cat.location("shop.live")) == [2]
    assert cat.list_tables("sales") == []
