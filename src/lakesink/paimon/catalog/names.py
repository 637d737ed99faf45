"""Table names and paths: the first steps of the rule from a string to a table (docs/catalogs.md).

A string holding `/` or `\\` is a path; any other string is a name, `database.table`,
`table` (database `default`) or `<catalog name>.database.table`, backquotes around
parts holding dots. What a name leads to is the catalog's business (`catalog.Catalog`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import ConfigurationError

DEFAULT_DATABASE = "default"
PURPOSES = ("read", "write", "create", "drop", "locate")


def is_path(text: str) -> bool:
    """The first step of the rule: anything holding a path separator is a path."""
    return "/" in text or "\\" in text


@dataclass(frozen=True)
class TableName:
    database: str
    table: str

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"

    def identifier(self):
        from pypaimon.common.identifier import Identifier
        return Identifier.create(self.database, self.table)


def branch_of(name: TableName, statement: str) -> tuple[TableName, str | None]:
    """(the table, its branch or None) of a name in SQL: Paimon's SQL names branch `b` of table
    `t` as `t$branch_b`. Any other `$` suffix names one of Paimon's system tables (`t$snapshots`),
    which `lakesink.sql` does not serve: refused, rather than reading or changing `t` itself."""
    from ...errors import UnsupportedStatementError

    base, dollar, suffix = name.table.partition("$")
    if not dollar:
        return name, None
    table = TableName(name.database, base)
    if suffix.startswith("branch_") and len(suffix) > len("branch_"):
        return table, suffix[len("branch_"):]
    raise UnsupportedStatementError(
        statement, str(name), f"lakesink.sql serves the table itself and its branches (`{base}$branch_<name>`), "
        "not Paimon's system tables; lakesink.history and the `lakesink` CLI show snapshots, tags and files.")


def split_name(text: str) -> list[str]:
    """`a.b.c` → [a, b, c]; backquoted parts may hold dots (``a.`b.c` `` → [a, b.c])."""
    parts, current, quoted, i = [], "", False, 0
    while i < len(text):
        ch = text[i]
        if ch == "`":
            if quoted and i + 1 < len(text) and text[i + 1] == "`":
                current += "`"
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
        i += 1
    if quoted:
        raise ConfigurationError(f"{text!r}: unbalanced backquote in a table name.", table=text)
    parts.append(current.strip())
    return parts


def local_table(text: str) -> bool:
    """A relative path of that spelling holds a Paimon table (the ambiguity the rule refuses)."""
    return os.path.isdir(os.path.join(text, "schema"))
