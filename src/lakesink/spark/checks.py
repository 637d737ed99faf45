"""Checks of the data that Spark runs inside a write's job, and their errors read back.

A check is SQL text in the column that is written (`CASE WHEN ... THEN raise_error(...)`),
so the optimizer cannot prune it away. Its message starts with `ERROR_PREFIX`; the driver
turns the failed job back into a lakesink error (`translate_error`) after aborting it.
"""

from __future__ import annotations

from ..errors import ConfigurationError, LakesinkError, NullValueError
from .sqltext import ident, string

ERROR_PREFIX = "lakesink write: "


def not_null(name: str, primary_key: bool = False) -> str:
    """SQL: column `name`, failing the job on a row where it is null (a NOT NULL column)."""
    column = ident(name)
    message = string(ERROR_PREFIX + NullValueError.text(name, primary_key))
    return f"CASE WHEN {column} IS NULL THEN raise_error({message}) ELSE {column} END"


def checked_columns(schema, names, not_null_columns) -> list[str]:
    """SQL selecting `names` from a Spark `schema`, each NOT NULL one that may hold null checked
    (a column Spark knows to be non-nullable costs nothing)."""
    nullable = {f.name for f in schema.fields if f.nullable}
    required = set(not_null_columns)
    return [f"{not_null(n)} AS {ident(n)}" if n in required and n in nullable else ident(n) for n in names]


def translate_error(exc: BaseException, table: str | None = None) -> LakesinkError | None:
    """A lakesink data error raised inside the Spark job (NullValueError or ConfigurationError), or None."""
    text = str(exc)
    if ERROR_PREFIX not in text:
        return None
    message = text[text.index(ERROR_PREFIX) + len(ERROR_PREFIX):]
    end = message.find("Nothing was written.")
    message = message[: end + len("Nothing was written.")] if end >= 0 else message.splitlines()[0]
    null = NullValueError.from_text(message)
    if null is not None:
        null.table = table
        return null
    return ConfigurationError(message, table=table)
