import os
import subprocess
import sys

import pytest

from tests.helpers import leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark


def test_spark_connect_writes_on_both_paths_and_reads_through_format_paimon(table_path):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-m", "tests.spark.connect_child", table_path], env=env,
                         capture_output=True, text=True, timeout=300)
    assert "COUNT 23" in out.stdout, out.stderr[-2000:]
    assert "READ 23 0" in out.stdout, out.stderr[-2000:]
    assert "COMPACTED COMPACT 23" in out.stdout, out.stderr[-2000:]
    assert sorted(read_table(table_path).column("id").to_pylist()) == sorted(list(range(10)) * 2 + [0, 1, 2])
    assert [s.commit_kind for s in snapshots(table_path)] == ["APPEND", "APPEND", "APPEND", "COMPACT"]
    assert leftover_files(table_path) == set()
