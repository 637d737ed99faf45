"""The cluster is what the tier claims: separate executor JVMs and Python workers, no credentials."""

from __future__ import annotations

import os

import pytest

from .cluster import project_python

pytestmark = [pytest.mark.cluster, pytest.mark.full]  # the cluster tier: ./dev full


def test_tasks_run_in_executor_processes_of_their_own_with_the_projects_python_and_no_credentials(
        cluster, driver):
    seen = driver.run("executors")
    tasks = seen["tasks"]
    assert seen["executors"] == 2
    assert {t["python"] for t in tasks} == {project_python()}
    assert [t["aws"] for t in tasks if t["aws"]] == [], "credentials must reach tasks only as options"
    executor_dirs = {os.path.dirname(t["cwd"]) for t in tasks}
    assert all(d.startswith(str(cluster.root)) for d in executor_dirs)
    pids = {t["pid"] for t in tasks}
    assert driver.started["pid"] not in pids
    jvms = cluster.executors(driver.started["app_id"])
    assert len(jvms) == 2
    print(seen)
