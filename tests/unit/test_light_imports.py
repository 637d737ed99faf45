"""What importing lakesink loads: the API, the CLI and the commit protocol import neither Spark
nor pypaimon (each checked in a fresh interpreter, as a user's process starts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("pyspark", "pypaimon", "pyarrow", "py4j")
PROTOCOL = sorted(p.stem for p in (Path(__file__).parents[2] / "src" / "lakesink" / "protocol").glob("*.py"))


def _loaded_after(code: str) -> set[str]:
    """The heavy top-level packages in sys.modules after running `code` in a new interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1])) & set(HEAVY)


def test_import_lakesink_loads_neither_spark_nor_pypaimon_nor_pyarrow():
    assert _loaded_after("import lakesink") == set()


def test_the_api_names_are_all_there_without_loading_anything_heavy():
    # Every name of __all__ resolves (CommitReport on first use) and dir() lists them all.
    code = ("import lakesink\n"
            "missing = [n for n in lakesink.__all__ if not hasattr(lakesink, n)]\n"
            "assert not missing, missing\n"
            "assert set(lakesink.__all__) <= set(dir(lakesink))\n"
            "from lakesink import CommitReport\n"
            "assert CommitReport is lakesink.CommitReport")
    assert _loaded_after(code) == set()


def test_lakesink_help_loads_neither_spark_nor_pypaimon_nor_pyarrow():
    code = ("from lakesink.cli import main\n"
            "import contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    code = main(['--help'])\n"
            "assert code in (0, None) and 'Usage: lakesink' in out.getvalue(), out.getvalue()")
    assert _loaded_after(code) == set()


@pytest.mark.parametrize("module", PROTOCOL)
def test_the_commit_protocol_imports_neither_spark_nor_pypaimon(module):
    name = "lakesink.protocol" if module == "__init__" else f"lakesink.protocol.{module}"
    assert _loaded_after(f"import {name}") & {"pyspark", "pypaimon", "py4j"} == set()


def test_storage_paths_and_local_state_need_no_pypaimon(tmp_path):
    code = ("from lakesink import storage\n"
            f"target = storage.normalize({str(tmp_path)!r} + '/a/b.json')\n"
            "storage.write_atomically(None, target, '{}')\n"
            "assert storage.local_path(target) and open(target).read() == '{}'\n"
            "assert 'file_io' in dir(storage)")
    assert _loaded_after(code) & {"pypaimon", "pyspark"} == set()
    # and file_io is there when asked for
    assert "pypaimon" in _loaded_after("from lakesink import storage\nstorage.file_io('/tmp')")
