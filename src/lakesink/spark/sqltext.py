"""Spark SQL text for plans built per micro-batch.

A DataFrame built from Column objects costs one call into the JVM per function and
literal (hundreds for a keyed write's plan); the same expressions as SQL text cost
one call per projection. A stream pays that price every micro-batch.
"""

from __future__ import annotations


def ident(name: str) -> str:
    """A column name as a quoted SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def string(text: str) -> str:
    """A SQL string literal (Spark's default escaping: backslash and quote)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def columns(names) -> list[str]:
    return [ident(n) for n in names]
