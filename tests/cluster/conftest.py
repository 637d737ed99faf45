"""Fixtures of the cluster tier: one Spark standalone cluster, one S3 server, one driver, shared directories.

Package-scoped: every test of the tier shares them (starting them is most of its
time), and they stop after its last test. The cluster is a master and two
workers from the pip package (`tests/cluster/cluster.py`); the S3 server is
`tests/s3server.py`'s moto on loopback; the driver (`tests/cluster/driver.py`)
runs each test's Spark work, and the tests check the tables themselves with
pypaimon. Without Java the tier is skipped with the reason (pytest -rs); with CI=true it fails.

    .venv/bin/python -m pytest tests/cluster
"""

from __future__ import annotations

import os

import pytest

from tests.requirements import unavailable
from tests.s3server import S3Server

from .cluster import Cluster, ClusterError, java_reason
from .remote import RemoteDriver

BUCKET = "lakesink-cluster"
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


@pytest.fixture(scope="package")
def shared_dir(tmp_path_factory):
    """A directory every process of the cluster reaches (one host here: any local directory)."""
    return tmp_path_factory.mktemp("cluster-shared")


def _start(tmp_path_factory) -> Cluster:
    started = Cluster(tmp_path_factory.mktemp("cluster")).launch()
    # The driver's JVM starts while the cluster does; its session registers once the master is up.
    started.remote = RemoteDriver(started, tmp_path_factory.mktemp("driver"))
    try:
        started.remote.launch()
        return started.wait_ready()
    except BaseException:
        started.remote.stop()
        started.stop()
        raise


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    """The cluster, with the tier's driver already starting on it (see `driver`)."""
    reason = java_reason()
    if reason:
        unavailable(reason)
    try:
        started = _start(tmp_path_factory)
    except ClusterError as exc:
        if "not spark://" not in str(exc):
            raise
        started = _start(tmp_path_factory)  # the master's free port was taken meanwhile: once more
    try:
        yield started
    finally:
        started.remote.stop()
        started.stop()
    assert not started.alive(), f"cluster processes outlived stop(): {started.alive()}"


@pytest.fixture(scope="package")
def s3(cluster):
    server = S3Server()
    # Killed with the cluster if the tests die first, even while it starts.
    cluster.reaper.watch_command(server.command()[1:])
    with server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(scope="package")
def driver(cluster):
    """The tier's Spark driver on the cluster (`tests/cluster/driver.py`): `driver.run(scenario, ...)`."""
    return cluster.remote.wait_ready()


@pytest.fixture(scope="package")
def s3_options(s3):
    """Storage options of the S3 server: the only way credentials reach lakesink in this tier."""
    assert not [k for k in CREDENTIAL_VARIABLES if k in os.environ], \
        "the tier gives S3 credentials only as options: unset them in the test environment"
    return s3.fs_options()


@pytest.fixture()
def s3_table(request, s3):
    """A fresh table path in the bucket, named after the test."""
    name = request.node.name.replace("[", "-").replace("]", "").lower()[:60]
    return f"s3://{BUCKET}/wh/db.db/{name}"


@pytest.fixture()
def local_table(request, shared_dir):
    name = request.node.name.replace("[", "-").replace("]", "").lower()[:60]
    return str(shared_dir / "wh" / "db.db" / name)
