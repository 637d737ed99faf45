"""The test run's preloading Python daemons (tests/python-for-spark) name modules that exist: a
renamed module would silently cost every forked worker its imports again."""

import importlib

from tests.preload import MODULES


def test_every_preloaded_module_imports():
    for name in MODULES:
        importlib.import_module(name)


def test_the_wrapper_runs_the_venvs_python_for_anything_but_a_daemon():
    import subprocess
    from pathlib import Path

    wrapper = Path(__file__).resolve().parents[1] / "python-for-spark"
    out = subprocess.run([str(wrapper), "-c", "import sys; print(sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().startswith("(3, ")
