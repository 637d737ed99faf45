"""TypeTables.java: Paimon's Java writer for TIMESTAMP(0..3), TIME and nanosecond tables, and
Java reads with a filter (file pruning by statistics). Compiled and cached as PaimonOracle is
(same Paimon 1.0 jar, same cache directory)."""

from __future__ import annotations

from pathlib import Path

from . import oracle

SOURCE = Path(__file__).parent / "java" / "TypeTables.java"


class TypeTables:
    def __init__(self):
        self.java, self.classpath = oracle.compile_java(SOURCE, "type-tables")

    def _run(self, args: list[str]) -> None:
        oracle.run_java(self.java, self.classpath, "TypeTables", args)

    def write(self, kind: str, table: str) -> None:
        self._run(["write", kind, table])

    def ids(self, table: str, column: str, op: str, millis: int, out: Path) -> list[int]:
        """Ids of the rows Java Paimon returns for `column >= millis` (op "ge") or `< millis` ("lt")."""
        self._run(["ids", table, column, op, str(millis), str(out)])
        return sorted(int(line) for line in out.read_text("utf-8").split())
