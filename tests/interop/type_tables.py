"""TypeTables.java: Paimon's Java writer for TIMESTAMP(0..3), TIME and nanosecond tables, and
Java reads with a filter (file pruning by statistics). Compiled and cached as PaimonOracle is
(same Paimon 1.0 jar, same cache directory)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from . import oracle

SOURCE = Path(__file__).parent / "java" / "TypeTables.java"


class TypeTables:
    def __init__(self):
        self.java, javac = oracle._java_tools()
        jar = oracle._bridge_jar()
        digest = hashlib.sha256(SOURCE.read_bytes() + str(jar.stat().st_size).encode()).hexdigest()[:16]
        classes = oracle.cache_dir() / f"type-tables-{digest}"
        if not (classes / "TypeTables.class").exists():
            tmp = oracle.cache_dir() / f".type-tables-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            proc = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(tmp), "-cp", str(jar),
                                   str(SOURCE)], capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"TypeTables.java does not compile:\n{proc.stderr}")
            try:
                os.replace(tmp, classes)
            except OSError:  # another session compiled it meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
        self.classpath = os.pathsep.join([str(classes), str(jar), *oracle._codec_jars()])

    def _run(self, args: list[str]) -> None:
        proc = subprocess.run([self.java, "-Xmx512m", "-XX:TieredStopAtLevel=1", "-cp", self.classpath,
                               "TypeTables", *args], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            noise = ("SLF4J", "StatusLogger")
            raise oracle.JavaError("\n".join(line for line in proc.stderr.splitlines()
                                             if not line.startswith(noise)).strip())

    def write(self, kind: str, table: str) -> None:
        self._run(["write", kind, table])

    def ids(self, table: str, column: str, op: str, millis: int, out: Path) -> list[int]:
        """Ids of the rows Java Paimon returns for `column >= millis` (op "ge") or `< millis` ("lt")."""
        self._run(["ids", table, column, op, str(millis), str(out)])
        return sorted(int(line) for line in out.read_text("utf-8").split())
