"""lakesink beside another data source named `paimon` (as Apache Paimon's Spark connector is)."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import read_table
from tests.requirements import unavailable

pytestmark = pytest.mark.spark

STAND_IN = """
package standin;
public class PaimonStandIn implements org.apache.spark.sql.sources.DataSourceRegister {
    public String shortName() { return "paimon"; }
}
"""


@pytest.fixture(scope="module")
def stand_in_jar(tmp_path_factory):
    javac = shutil.which("javac")
    if javac is None:
        unavailable("no javac on this machine: cannot build the stand-in `paimon` connector jar")
    import pyspark
    work = tmp_path_factory.mktemp("standin")
    (work / "src" / "standin").mkdir(parents=True)
    (work / "src" / "standin" / "PaimonStandIn.java").write_text(STAND_IN)
    classpath = str(Path(pyspark.__file__).parent / "jars" / "*")
    subprocess.run([javac, "-cp", classpath, "-d", str(work / "classes"),
                    str(work / "src" / "standin" / "PaimonStandIn.java")], check=True, timeout=120)
    jar = work / "paimon-standin.jar"
    with zipfile.ZipFile(jar, "w") as out:
        out.write(work / "classes" / "standin" / "PaimonStandIn.class", "standin/PaimonStandIn.class")
        out.writestr("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister", "standin.PaimonStandIn\n")
    return str(jar)


@pytest.mark.full  # a second Spark driver with a stand-in connector jar (~35 s): ./dev full
def test_lakesink_leaves_the_name_paimon_to_another_connector_and_works_as_lakesink_paimon(stand_in_jar, table_path):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-m", "tests.spark.format_child", stand_in_jar, table_path], env=env,
                         capture_output=True, text=True, timeout=300)
    assert "OWNS_PAIMON False" in out.stdout, out.stderr[-3000:]
    assert "COUNT 13 13" in out.stdout, out.stderr[-3000:]
    assert "PAIMON_REACHED other" in out.stdout, out.stdout
    assert sorted(read_table(table_path).column("id").to_pylist()) == sorted(list(range(10)) + [0, 1, 2])


def test_in_a_plain_session_both_names_reach_lakesink(spark, table_path):
    import lakesink
    assert lakesink.register(spark) is True
    spark.range(3).write.format("lakesink-paimon").mode("append").save(table_path)
    assert spark.read.format("paimon").load(table_path).count() == 3
