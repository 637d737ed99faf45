"""Readers nobody on this project wrote: Apache Paimon's Java library and paimon-rust.

Java: PaimonOracle.java, compiled once (cached by the hash of its source and of
the Paimon jar) against the Paimon 1.0 bundle shipped in the `paimon-python-ali`
0.1.1 wheel, fetched once from the package index into a cache directory
(`LAKESINK_INTEROP_CACHE`, default ~/.cache/lakesink-interop). Missing javac or
an unreachable index skip the Java tests with the reason (with CI=true: fail them);
nothing passes silently.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa

WHEEL = "paimon-python-ali==0.1.1"
JAR_IN_WHEEL = "paimon_python_java/java_dependencies/paimon-python-java-bridge.jar"
SOURCE = Path(__file__).parent / "java" / "PaimonOracle.java"
# Codecs the bundle leaves out (Paimon expects them from the engine); pyspark ships them.
CODEC_JARS = ("snappy-java-*.jar", "zstd-jni-*.jar", "lz4-java-*.jar",
              "rocksdbjni-*.jar")  # RocksDB: the key index of Paimon's cross-partition assigner


class Unavailable(Exception):
    """This reader cannot run on this machine; the message says why."""


def cache_dir() -> Path:
    path = Path(os.environ.get("LAKESINK_INTEROP_CACHE", Path.home() / ".cache" / "lakesink-interop"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _java_tools() -> tuple[str, str]:
    javac = shutil.which("javac")
    if javac is None and os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "javac"
        javac = str(candidate) if candidate.exists() else None
    if javac is None:
        raise Unavailable("no javac (a JDK) on this machine: the Java Paimon reader cannot be compiled")
    java = Path(javac).resolve().parent / "java"
    if not java.exists():
        raise Unavailable(f"javac at {javac} has no java beside it")
    return str(java), javac


def _bridge_jar() -> Path:
    cache = cache_dir()
    jar = cache / "paimon-python-java-bridge.jar"
    if jar.exists():
        return jar
    wheels = cache / "wheel"
    found = glob.glob(str(wheels / "paimon_python_ali-0.1.1-*.whl"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                               WHEEL, "-d", str(wheels)], capture_output=True, text=True, timeout=600)
        found = glob.glob(str(wheels / "paimon_python_ali-0.1.1-*.whl"))
        if proc.returncode != 0 or not found:
            raise Unavailable(f"cannot fetch {WHEEL} from the package index: {proc.stderr.strip()[-400:]}")
    tmp = cache / f".jar-{os.getpid()}.tmp"
    with zipfile.ZipFile(found[0]) as wheel, open(tmp, "wb") as out:
        shutil.copyfileobj(wheel.open(JAR_IN_WHEEL), out)
    os.replace(tmp, jar)  # whole or absent, also for a concurrent session
    return jar


def _codec_jars() -> list[str]:
    import pyspark

    jars_dir = Path(pyspark.__file__).parent / "jars"
    out = []
    for pattern in CODEC_JARS:
        found = sorted(glob.glob(str(jars_dir / pattern)))
        if not found:
            raise Unavailable(f"pyspark ships no {pattern} in {jars_dir}")
        out.append(found[-1])
    return out


def compile_java(source: Path, prefix: str) -> tuple[str, str]:
    """(java, classpath) running `source`'s classes against the Paimon 1.0 jar; compiled once per
    source and jar (cached under `prefix-<digest>`), also safe beside a concurrent session."""
    java, javac = _java_tools()
    jar = _bridge_jar()
    digest = hashlib.sha256(source.read_bytes() + str(jar.stat().st_size).encode()).hexdigest()[:16]
    classes = cache_dir() / f"{prefix}-{digest}"
    if not (classes / f"{source.stem}.class").exists():
        tmp = cache_dir() / f".{prefix}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        proc = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(tmp), "-cp", str(jar),
                               str(source)], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{source.name} does not compile:\n{proc.stderr}")
        try:
            os.replace(tmp, classes)
        except OSError:  # another session compiled it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    # In a jar: a class-data-sharing archive (run_java) takes no directory in the class path.
    packed = classes.with_name(f"{classes.name}.jar")
    if not packed.exists():
        partial = packed.with_name(f".{packed.name}.{os.getpid()}")
        with zipfile.ZipFile(partial, "w") as out:
            for path in sorted(classes.rglob("*.class")):
                out.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, packed)
    return java, os.pathsep.join([str(packed), str(jar), *_codec_jars()])


def _class_archive(java: str, classpath: str) -> tuple[list[str], Path | None]:
    """JVM flags sharing the classes one earlier call loaded (a class-data-sharing archive per Java
    and class path, dumped by the first call; half a call's start is loading Paimon's classes),
    and the file that call dumps into (None once the archive exists)."""
    digest = hashlib.sha1(f"{java}\n{classpath}".encode()).hexdigest()[:12]
    archive = cache_dir() / f"oracle-{digest}.jsa"
    quiet = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    if archive.exists():
        return [f"-XX:SharedArchiveFile={archive}", *quiet], None
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    return [f"-XX:ArchiveClassesAtExit={partial}", *quiet], partial


def run_java(java: str, classpath: str, main: str, args: list[str]) -> None:
    """Run `main`; a failure raises JavaError with its stack trace (logging noise dropped)."""
    sharing, partial = _class_archive(java, classpath)
    proc = subprocess.run([java, "-Xmx512m", "-XX:TieredStopAtLevel=1", *sharing, "-cp", classpath, main, *args],
                          capture_output=True, text=True, timeout=600)
    if partial is not None and partial.exists():
        if proc.returncode == 0 and partial.stat().st_size:
            os.replace(partial, partial.with_name(partial.name.rsplit(".", 2)[0]))  # in place in one rename
        else:
            partial.unlink()
    if proc.returncode != 0:
        noise = ("SLF4J", "StatusLogger")
        err = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith(noise))
        raise JavaError(err.strip())


class JavaPaimon:
    """Apache Paimon 1.0's Java reader and writer, one JVM per call."""

    name = "java-paimon-1.0"

    def __init__(self):
        self.java, self.classpath = compile_java(SOURCE, "classes")

    def _run(self, args: list[str]) -> None:
        run_java(self.java, self.classpath, "PaimonOracle", args)

    def read_many(self, tables: list[str], out_dir: Path) -> dict[str, list[dict] | Exception]:
        """Rows of each table (latest snapshot); a table Paimon fails on maps to its error.

        One JVM for all tables; a failing table is retried alone so that the others still get read.
        """
        out_dir.mkdir(parents=True, exist_ok=True)
        outputs = {t: out_dir / f"{i}-{Path(t).name}.jsonl" for i, t in enumerate(tables)}
        for path in outputs.values():
            path.unlink(missing_ok=True)
        retry: set[str] = set()
        try:
            self._run(["read", *[x for t in tables for x in (t, str(outputs[t]))]])
        except JavaError:
            # The table it stopped in (output partial) and those after it: one JVM each.
            started = [t for t in tables if outputs[t].exists()]
            retry = {t for t in tables if not outputs[t].exists()} | set(started[-1:])
        result: dict[str, list[dict] | Exception] = {}
        for table in tables:
            if table in retry:
                try:
                    self._run(["read", table, str(outputs[table])])
                except JavaError as exc:
                    result[table] = exc
                    continue
            result[table] = [json.loads(line) for line in outputs[table].read_text("utf-8").splitlines()]
        return result

    def read(self, table: str, out_dir: Path) -> list[dict]:
        rows = self.read_many([table], out_dir)[table]
        if isinstance(rows, Exception):
            raise rows
        return rows

    def read_with(self, table: str, out_dir: Path, options: dict[str, str]) -> list[dict]:
        """Rows of `table` read with its options overridden by `options` in memory (its files and
        schema untouched)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        out = out_dir / f"read-with-{Path(table).name}.jsonl"
        self._run(["read-with", table, str(out), ",".join(f"{k}={v}" for k, v in options.items())])
        return [json.loads(line) for line in out.read_text("utf-8").splitlines()]

    def read_branches(self, table: str, branches: list[str], out_dir: Path) -> dict[str, list[dict]]:
        """Rows of each branch of `table` ("main" too; latest snapshots), the table opened with
        Paimon's `branch` option; one JVM for all."""
        out_dir.mkdir(parents=True, exist_ok=True)
        outputs = {b: out_dir / f"branch-{Path(table).name}-{b}.jsonl" for b in branches}
        self._run(["read-branch", *[x for b in branches for x in (table, b, str(outputs[b]))]])
        return {b: [json.loads(line) for line in out.read_text("utf-8").splitlines()] for b, out in outputs.items()}

    def changes(self, table: str, after: int, out_dir: Path) -> list[dict]:
        """Paimon's own streaming read of `table` after snapshot `after`: rows with a "rowkind"."""
        out_dir.mkdir(parents=True, exist_ok=True)
        out = out_dir / f"changes-{Path(table).name}-{after}.jsonl"
        self._run(["changes", table, str(out), str(after)])
        return [json.loads(line) for line in out.read_text("utf-8").splitlines()]

    def mode(self, table: str, out_dir: Path) -> dict:
        """{"bucket": the table's bucket option, "bucket_mode": Paimon's BucketMode name}."""
        out_dir.mkdir(parents=True, exist_ok=True)
        out = out_dir / f"mode-{Path(table).name}.json"
        self._run(["mode", table, str(out)])
        return json.loads(out.read_text("utf-8"))

    def replay(self, spec: dict, table: str, work_dir: Path) -> None:
        """Create `table` as `spec` says and write its batches with Paimon's own writer, one commit
        each (format: PaimonOracle.java, `replay`; `"continue": true` writes into the existing table;
        dynamic-bucket tables through Paimon's HashBucketAssigner)."""
        work_dir.mkdir(parents=True, exist_ok=True)
        spec_file = work_dir / f"replay-{Path(table).name}.json"
        spec_file.write_text(json.dumps(spec), "utf-8")
        self._run(["replay", str(spec_file), table])

    def write(self, kinds: dict[str, str]) -> None:
        """Create tables with Paimon's own writer: {kind: table path} (kinds in PaimonOracle.java)."""
        self._run(["write", *[x for kind, path in kinds.items() for x in (kind, path)]])


class JavaError(AssertionError):
    """Java Paimon failed; the message is its stack trace."""


class RustPaimon:
    """paimon-rust (pypaimon-rust) through DataFusion SQL."""

    def __init__(self):
        try:
            from importlib.metadata import version

            from pypaimon_rust.datafusion import SQLContext  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"pypaimon-rust is not installed ({exc}); `pip install pypaimon-rust`") from None
        self.name = f"paimon-rust-{version('pypaimon-rust')}"

    def read(self, table: str) -> pa.Table:
        from pypaimon_rust.datafusion import SQLContext

        path = Path(table)
        database, name = path.parent.name, path.name
        if not database.endswith(".db"):
            raise ValueError(f"{table}: expected <warehouse>/<db>.db/<table>")
        ctx = SQLContext()
        ctx.register_catalog("wh", {"warehouse": str(path.parent.parent)}, default_database=database[:-3])
        batches = ctx.sql(f'SELECT * FROM wh.`{database[:-3]}`.`{name}`'.replace("`", '"'))
        if not batches:
            return pa.table({})
        return pa.Table.from_batches(batches)
