"""A pipeline started by spark-submit runs on the master spark-submit gave, not on local[2]."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import pyspark

pytestmark = pytest.mark.spark

SCRIPT = """
import lakesink
spark = lakesink.session()
spark.range(10).write.format("paimon").mode("append").save({path!r})
print("MASTER=" + spark.sparkContext.master, flush=True)
spark.stop()
"""


# ./dev full: spark-submit with a master (with the cluster tier)
@pytest.mark.full
def test_a_job_submitted_with_a_master_keeps_it_and_writes(tmp_path):
    script = tmp_path / "job.py"
    table = tmp_path / "wh" / "db.db" / "t"
    script.write_text(SCRIPT.format(path=str(table)))
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {k: v for k, v in os.environ.items() if k != "LAKESINK_MASTER"}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([str(submit), "--master", "local[1]", str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MASTER=local[1]" in done.stdout
    assert (table / "snapshot" / "snapshot-1").exists()
