"""Dead CREATE TABLE AS reservations of a JDBC catalog on an object store: who removes them.

A CREATE TABLE AS through a JDBC catalog on S3 writes in place under a reservation row
(reservations.py). A job killed on another host leaves the row and its objects; once its
heartbeat is older than the threshold, `lakesink clean-staging --catalog ...` and the
maintenance after a commit to any table of the catalog remove both, while a running job
(fresh heartbeat) keeps its reservation and commits. No Spark: the behaviour is the catalog's.
Every case runs on the S3 test server, with the catalog on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

import lakesink
from lakesink.cli import cli
from lakesink.errors import CommitFailedError
from lakesink.paimon import maintenance
from lakesink.paimon.catalog import reservations
from lakesink.paimon.catalog.ctas import stage_table
from lakesink.paimon.maintenance import catalog_sweep as catalog_staging
from tests.catalog.conftest import forget_postgres_catalog, write_rows, s3_catalog_options
from tests.s3server import s3_bucket
from tests.staged import commit, new_target, read_back, stage

pytestmark = pytest.mark.full  # the sweep on S3 (the local one runs by default): ./dev full

BUCKET = "lakesink-sweep"


@pytest.fixture(scope="module")
def s3():
    with s3_bucket(BUCKET) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def cat(request, tmp_path, s3):
    options = s3_catalog_options(request.param, tmp_path, s3, BUCKET)
    catalog = lakesink.catalog(options)
    catalog.create_database("shop")
    catalog_staging.forget()
    yield catalog
    catalog_staging.wait(60)
    forget_postgres_catalog(options)


def _objects(s3, cat, name) -> list[str]:
    prefix = cat.location(f"shop.{name}")[len(f"s3://{BUCKET}/"):] + "/"
    return [o["Key"] for o in s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


def _reserved(cat) -> list[str]:
    return [r.table for r in cat._call(reservations.list_all)]


def _begin(cat, name, ids):
    """A CREATE TABLE AS of shop.<name> that reserved the name and wrote its rows, not committed."""
    staged = stage_table(cat.resolve(f"shop.{name}", "create"), cat)
    staged.begin()
    write_rows(staged.staging_path, ids, cat.config.fs_options)
    return staged


def _dead(cat, name, ids=(1, 2)):
    """What a driver on another host leaves when it is killed mid-job: its reservation, no longer
    beating for two hours, and the objects it wrote at the table's location."""
    staged = _begin(cat, name, ids)
    staged._close()  # its heartbeat and connection stop, as with the killed driver

    def backdate(paimon):
        paimon.connection.execute(
            f"UPDATE {reservations.TABLE} SET host = 'a-host-long-gone', heartbeat_at_ms = ? WHERE "
            "catalog_key = ? AND database_name = 'shop' AND table_name = ?",
            (int((time.time() - 7200) * 1000), paimon.catalog_key, name))
        paimon.connection.connection.commit()

    cat._call(backdate)
    return staged


def _cli(cat, *args):
    catalog = [a for k, v in cat.config.options.items() for a in ("--catalog", f"{k}={v}")]
    result = CliRunner().invoke(cli, ["-o", "json", "clean-staging", *args, *catalog], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _actions(report) -> dict[str, str]:
    return {e["path"].rsplit("/", 1)[-1]: e["action"] for e in report["entries"] if e["kind"] == "reserved-table"}


def _rows(cat, name) -> list[int]:
    return sorted(read_back(cat.location(f"shop.{name}"), cat.config.fs_options).column("id").to_pylist())


def test_the_cli_removes_dead_reservations_with_their_objects_and_keeps_a_live_one(cat, s3):
    _dead(cat, "daily")
    _dead(cat, "weekly")
    live = _begin(cat, "live", [7, 8])
    assert _objects(s3, cat, "daily") and _objects(s3, cat, "weekly")

    dry = _cli(cat, "--dry-run")
    assert _actions(dry) == {"daily": "would remove", "weekly": "would remove", "live": "kept"}
    assert sorted(_reserved(cat)) == ["daily", "live", "weekly"] and _objects(s3, cat, "daily")

    one = _cli(cat, "shop.daily")  # a name: that name's reservation only
    assert _actions(one) == {"daily": "removed"}
    assert _objects(s3, cat, "daily") == [] and sorted(_reserved(cat)) == ["live", "weekly"]

    every = _cli(cat)  # no TABLE: the whole catalog
    assert _actions(every) == {"weekly": "removed", "live": "kept"} and every["removed_count"] == 1
    live_entry = next(e for e in every["entries"] if e["path"].endswith("/live"))
    assert "heartbeat" in live_entry["reason"] and "no heartbeat" in next(
        e for e in every["entries"] if e["path"].endswith("/weekly"))["reason"]
    assert _objects(s3, cat, "weekly") == [] and _reserved(cat) == ["live"] and _objects(s3, cat, "live")

    live.commit()  # the running job was left alone: it commits
    assert cat.list_tables("shop") == ["live"] and _rows(cat, "live") == [7, 8] and _reserved(cat) == []


def test_the_cli_without_table_needs_a_catalog():
    result = CliRunner().invoke(cli, ["clean-staging"])
    assert result.exit_code == 2 and "--catalog" in result.output


def _commit_by_name(cat, name, ids, user="w", identifier=1):
    """A write by name without Spark: resolve, create and register the table as a first write by
    name does, commit through lakesink's commit core with the table's maintenance on."""
    resolved = cat.resolve(f"shop.{name}", "write")
    target = new_target(resolved.path, resolved.fs_options)
    target.maintenance = True
    if resolved.entry is not None:
        resolved.entry.create(target)
    commit(target, user, identifier, stage(target, ids, "a", user))
    catalog_staging.wait(60)
    maintenance.maintenance_for(resolved.path).wait(60)
    return resolved


def test_the_maintenance_after_a_commit_by_name_sweeps_dead_reservations_and_keeps_a_live_one(cat, s3):
    _dead(cat, "daily")
    live = _begin(cat, "live", [5])
    _commit_by_name(cat, "orders", [1, 2])  # another table of the same catalog
    assert _objects(s3, cat, "daily") == [] and _reserved(cat) == ["live"] and _objects(s3, cat, "live")
    assert cat.list_tables("shop") == ["orders"] and _rows(cat, "orders") == [1, 2]

    _dead(cat, "weekly")
    _commit_by_name(cat, "orders", [3], identifier=2)
    assert _objects(s3, cat, "weekly"), "a second sweep within the interval: at most one per interval"
    catalog_staging.forget()  # the interval has passed
    _commit_by_name(cat, "orders", [4], identifier=3)
    assert _objects(s3, cat, "weekly") == [] and _reserved(cat) == ["live"]

    live.commit()
    assert sorted(cat.list_tables("shop")) == ["live", "orders"] and _rows(cat, "live") == [5]


def test_a_commit_in_a_process_that_resolved_no_name_finds_the_catalog_by_its_lock(cat, s3, monkeypatch):
    """Spark's commit process and the streaming committer get the table's storage options only:
    the catalog lock among them names the catalog database and key."""
    resolved = cat.resolve("shop.orders", "write")
    monkeypatch.setattr(reservations, "_resolved", {})
    config = catalog_staging.catalog_of(resolved.path, resolved.fs_options)
    assert config is not None and config.warehouse == cat.warehouse
    assert catalog_staging.catalog_of(resolved.path, cat.config.fs_options) is None  # by path: no catalog
    _dead(cat, "daily")
    monkeypatch.setattr(reservations, "_resolved", {})
    target = new_target(resolved.path, resolved.fs_options)
    target.maintenance = True
    commit(target, "w", 1, stage(target, [1], "a", "w"))
    catalog_staging.wait(60)
    maintenance.maintenance_for(resolved.path).wait(60)
    assert _objects(s3, cat, "daily") == [] and _reserved(cat) == []


def test_a_claim_loses_to_a_heartbeat_that_lands_after_the_look(cat, s3):
    """A cleaner reads a stale row, the job beats, the cleaner's claim must fail: its job is alive."""
    live = _begin(cat, "daily", [1])
    seen = cat._call(lambda paimon: reservations.find(paimon, "shop", "daily"))
    time.sleep(0.01)
    assert cat._call(live._heartbeat._beat)
    assert not cat._call(lambda paimon: reservations.claim(paimon, seen, reservations.new_token()))
    live.commit()
    assert cat.list_tables("shop") == ["daily"] and _rows(cat, "daily") == [1]


def test_a_job_swept_while_it_still_wrote_fails_and_removes_what_it_wrote_after(cat, s3):
    """Its heartbeat stalled past the threshold: a sweep removed its reservation and objects; the
    job then writes on, fails at commit, and its abort removes those later objects too."""
    staged = _begin(cat, "daily", [1])
    time.sleep(1.1)
    assert cat.clean_staging(older_than=1.0) == [cat.location("shop.daily")]
    write_rows(staged.staging_path, [2], cat.config.fs_options)  # the job wrote on
    assert _objects(s3, cat, "daily")
    with pytest.raises(CommitFailedError, match="reservation of shop.daily was removed"):
        try:
            staged.commit()
        except BaseException:
            staged.abort()
            raise
    assert _objects(s3, cat, "daily") == [] and _reserved(cat) == [] and cat.list_tables("shop") == []
