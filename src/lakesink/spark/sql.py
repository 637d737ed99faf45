"""`lakesink.sql`: Spark SQL over the session catalog's tables, by their names.

Spark reaches a Python data source only through a temporary view (it passes no
name or location to one for a catalog table), and a temporary view has a
one-part name. So `sql` finds the catalog's tables a statement names
(`shop.orders`, `paimon.shop.orders`), registers each as a temporary view whose
one-part name is the table's name in backquotes (`` `shop.orders` ``), rewrites
those references to it and runs the statement with `spark.sql`:

* a table the statement only reads becomes a view of `lakesink.read` (Spark's
  Parquet reader on pypaimon's plan of the latest snapshot, taken now);
* a table it writes (`INSERT INTO` / `INSERT OVERWRITE [TABLE] name`) becomes a
  view `USING lakesink-paimon`, which Spark writes through the data source
  (one snapshot per statement, exactly once as `format("paimon")`).

References are found by Spark SQL's lexical rules (strings, comments and
backquotes are skipped): a dotted identifier chain whose first two (or three,
led by the catalog's name) parts name a table of the catalog. One-part names
are left to Spark (they would be indistinguishable from columns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..paimon.catalog.catalog import Catalog
from ..paimon.catalog.names import TableName, branch_of

_TOKENS = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\n]*|/\*.*?\*/)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<dot>\.)
  | (?P<other>.)
""", re.S | re.X)

_WRITE_KEYWORDS = ("into", "overwrite")


@dataclass
class _Token:
    kind: str
    text: str
    start: int
    end: int

    @property
    def ident(self) -> str | None:
        if self.kind == "word":
            return self.text
        if self.kind == "quoted":
            return self.text[1:-1].replace("``", "`")
        return None


def view_name(name: TableName) -> str:
    """The temporary view standing for a catalog table: its name, backquoted as one part."""
    return "`" + f"{name.database}.{name.table}".replace("`", "``") + "`"


def rewrite(query: str, catalog: Catalog) -> tuple[str, dict[TableName, bool]]:
    """The statement with the catalog's tables replaced by their views, and those tables
    (True: the statement writes it)."""
    tokens = [_Token(m.lastgroup, m.group(), m.start(), m.end()) for m in _TOKENS.finditer(query)]
    significant = [t for t in tokens if t.kind not in ("ws", "comment")]
    databases: set[str] | None = None
    known: dict[TableName, bool] = {}
    found: dict[TableName, bool] = {}
    edits: list[tuple[int, int, TableName]] = []
    i = 0
    while i < len(significant):
        token = significant[i]
        if token.ident is None or (i > 0 and significant[i - 1].kind == "dot"):
            i += 1
            continue
        first, chain = i, [token]  # a maximal identifier chain a.b.c
        i += 1
        while i + 1 < len(significant) and significant[i].kind == "dot" and significant[i + 1].ident is not None:
            chain.append(significant[i + 1])
            i += 2
        if len(chain) < 2 or (i < len(significant) and significant[i].text == "("):
            continue  # one part (a column, an alias, a view), or a function call
        parts = [t.ident for t in chain]
        lead = 1 if len(parts) >= 3 and parts[0] == catalog.name else 0
        name = TableName(parts[lead], parts[lead + 1])
        if databases is None:
            databases = set(catalog.list_databases())
        if name.database not in databases:
            continue
        if name not in known:
            table, _ = branch_of(name, "a query")  # a branch `t$branch_b` is of table t
            known[name] = bool(catalog.resolve(_backquoted(table), "locate").exists)
        if not known[name]:
            continue
        found[name] = found.get(name, False) or _is_write_target(significant, first)
        edits.append((chain[0].start, chain[lead + 1].end, name))
    text = query
    for start, end, name in sorted(edits, reverse=True):
        text = text[:start] + view_name(name) + text[end:]
    return text, found


def _backquoted(name: TableName) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in (name.database, name.table))


def _is_write_target(tokens: list[_Token], first: int) -> bool:
    """INSERT INTO [TABLE] x / INSERT OVERWRITE [TABLE] x: the chain starting at `first`."""
    k = first - 1
    if k >= 0 and tokens[k].text.lower() == "table":
        k -= 1
    return k >= 0 and tokens[k].text.lower() in _WRITE_KEYWORDS


def sql(spark, query: str, catalog: Catalog | None, **kwargs):
    """Register the views the statement needs, then `spark.sql` the rewritten statement."""
    from .read import read
    from .session import FORMAT, activate

    if catalog is None:
        return spark.sql(query, **kwargs)
    text, tables = rewrite(query, catalog)
    activate(spark)
    for name, writes in tables.items():
        table, branch = branch_of(name, "a query")
        resolved = catalog.resolve(_backquoted(table), "read")
        if writes:
            options = {**resolved.fs_options, "path": resolved.path, **({"branch": branch} if branch else {})}
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view_name(name)} USING `{FORMAT}` OPTIONS ("
                      + ", ".join(f"{_sql_string(k)} {_sql_string(v)}" for k, v in options.items()) + ")")
        else:
            read(spark, resolved.path, options=resolved.fs_options or None, branch=branch).createOrReplaceTempView(
                view_name(name))
    return spark.sql(text, **kwargs)


def _sql_string(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
