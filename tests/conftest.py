"""Shared fixtures: one local Spark session per test process, fresh warehouse per test."""

from __future__ import annotations

import os

import pytest

# Pipelined format("paimon") queries leave a committer process per checkpoint idling
# after their last batch (60 s by default): keep test runs from piling them up.
os.environ.setdefault("LAKESINK_COMMITTER_IDLE_SECONDS", "5")


def pytest_configure(config):
    # Once, in the controlling process, before test workers start (they inherit the setting).
    if not hasattr(config, "workerinput"):
        from tests.jvm import configure

        configure()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    from tests.schedule import order

    order(items)
    # A module whose tests share a module-scoped fixture (tables Java wrote, an S3 server) runs on
    # one test process (`--dist loadgroup`): handed out test by test, every process would build it.
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d and d[-1].scope == "module" for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("LAKESINK_MASTER", "local[2]")
    import lakesink

    session = lakesink.session("lakesink-tests", conf={
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture()
def warehouse(tmp_path):
    path = tmp_path / "warehouse"
    path.mkdir()
    return path


@pytest.fixture()
def table_path(warehouse):
    return str(warehouse / "db.db" / "t")


@pytest.fixture(scope="session")
def java_paimon():
    """Apache Paimon's Java reader and writer (tests/interop/oracle.py), or a skip with its reason."""
    from tests.interop.oracle import JavaPaimon, Unavailable
    from tests.requirements import unavailable

    try:
        return JavaPaimon()
    except Unavailable as exc:
        unavailable(f"Java Paimon reader unavailable: {exc}")
