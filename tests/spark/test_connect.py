import os
import subprocess
import sys

import pytest

from tests.helpers import leftover_files, read_table, snapshots

pytestmark = [pytest.mark.spark, pytest.mark.full]  # Spark Connect (a server of its own): ./dev full


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

    entries = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in out.stdout.splitlines()
               if line.startswith("ENTRY ")}
    print("\n".join(f"{k}: {v}" for k, v in entries.items()))
    # Every entry point works on Connect (a refusal would have to be a LakesinkError saying so).
    assert entries == {"writeStream.format(paimon)": "OK 5", "lakesink.stream": "OK 5",
                       "lakesink.stream(primary-key)": "OK 4",
                       "lakesink.read_stream": "OK 23", "lakesink.create_table_as": "OK 7",
                       "lakesink.jdbc.write": "OK 4", "lakesink.history": "OK 4",
                       "lakesink.write(primary_key)": "OK 10"}, out.stderr[-2000:]
