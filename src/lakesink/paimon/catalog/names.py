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


_BRANCH = "branch_"


def split_suffix(table: str) -> tuple[str, str | None, str | None]:
    """(the table, a branch, another suffix) of a table part Paimon may suffix with `$`:
    `t$branch_b` is branch `b` of `t`; any other `t$x` names one of Paimon's system tables."""
    base, dollar, suffix = table.partition("$")
    if not dollar:
        return table, None, None
    if suffix.startswith(_BRANCH) and len(suffix) > len(_BRANCH):
        return base, suffix[len(_BRANCH):], None
    return base, None, suffix


def split_branch(text: str) -> tuple[str, str | None]:
    """(the path or name, the branch or None) of a table a caller may give as `<table>$branch_<b>`;
    a name keeps its other parts as written (backquoted where they need it)."""
    if is_path(text):
        from ..table.branches import parse_description
        return parse_description(text)
    parts = split_name(text)
    base, branch, _ = split_suffix(parts[-1])
    if branch is None:
        return text, None
    return ".".join("`" + p.replace("`", "``") + "`" for p in [*parts[:-1], base]), branch


def with_branch(text: str, branch: str | None, what: str) -> tuple[str, str | None]:
    """(the path or name, the branch or None) of a table a caller gives as text and maybe
    `branch=`: a `$branch_<b>` suffix names the branch, as in Paimon's SQL; naming two branches
    is an error."""
    name, named = split_branch(str(text))
    if named is not None and branch is not None and named != branch:
        raise ConfigurationError(f"{what}: the table name names branch {named!r} and branch={branch!r} another; "
                                 "give one of them. Nothing was read or changed.", option="branch")
    return name, branch if branch is not None else named


def branch_of(name: TableName, statement: str) -> tuple[TableName, str | None]:
    """(the table, its branch or None) of a name in SQL: Paimon's SQL names branch `b` of table
    `t` as `t$branch_b`. Any other `$` suffix names one of Paimon's system tables (`t$snapshots`),
    which `lakesink.sql` does not serve: refused, rather than reading or changing `t` itself."""
    from ...errors import UnsupportedStatementError

    base, branch, other = split_suffix(name.table)
    if other is not None:
        raise UnsupportedStatementError(
            statement, str(name), f"lakesink.sql serves the table itself and its branches (`{base}$branch_<name>`), "
            "not Paimon's system tables; lakesink.history and the `lakesink` CLI show snapshots, tags and files.")
    return TableName(name.database, base), branch


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
