"""Options of the JDBC sink: Spark's JDBC names where Spark has one, lakesink's dotted names otherwise.

Keys are case-insensitive, as Spark's are. Every key, its default and meaning
is listed in `OPTIONS` (and in docs/jdbc.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ConfigurationError, InvalidOptionError, UnknownOptionError

OPTIONS: dict[str, tuple[str | None, str]] = {
    "url": (None, "postgresql://user@host:5432/db or sqlite:///relative.db / sqlite:////absolute.db "
                  "(a 'jdbc:' prefix is accepted)."),
    "dbtable": (None, "Target table, optionally schema-qualified (public.orders); `path` is an alias."),
    "user": (None, "Database user (overrides the URL's)."),
    "password": (None, "Database password (overrides the URL's). Never written to durable state."),
    "batchsize": ("10000", "Rows per executemany call (SQLite) or per COPY chunk (PostgreSQL)."),
    "isolationLevel": ("READ_COMMITTED", "Isolation of the commit transaction: READ_UNCOMMITTED, "
                                         "READ_COMMITTED, REPEATABLE_READ or SERIALIZABLE (NONE is refused: "
                                         "exactly-once needs a transaction)."),
    "createTableColumnTypes": (None, "Column types used instead of the defaults when lakesink creates the "
                                     "table, e.g. \"name VARCHAR(64), note TEXT\"."),
    "createTableOptions": (None, "Text appended to CREATE TABLE when lakesink creates the table."),
    "connectTimeout": ("10", "Seconds to wait for a PostgreSQL connection (SQLite waits up to 300 s, or this if longer, "
                             "for its write lock: tasks write one at a time)."),
    "write.mode": ("append", "append, overwrite (all rows replaced, table kept) or upsert."),
    "upsert.key": (None, "Comma-separated key columns of an upsert (a unique index on them must exist, or "
                         "lakesink creates the table with that primary key)."),
    "commit.user": (None, "Stable commit user; with commit.identifier a re-run of a committed job is skipped."),
    "commit.identifier": (None, "Increasing integer identifying this job for commit.user."),
    "staging.schema": ("lakesink", "PostgreSQL schema of lakesink's progress table and staging tables."),
    "checkpointLocation": (None, "Streaming: the query's checkpoint (needed for exactly-once)."),
}
SPARK_SUPPLIED = {"path", "paths", "queryname", "__partition_columns"}
MODES = ("append", "overwrite", "upsert")
ISOLATION_LEVELS = ("READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE")
MAX_IDENTIFIER = 0x7FFFFFFFFFFFFFFF - 1


@dataclass
class JdbcOptions:
    url: str = ""
    table: str = ""
    user: str | None = None
    password: str | None = None
    batch_size: int = 10_000
    isolation_level: str = "READ_COMMITTED"
    column_types: dict[str, str] = field(default_factory=dict)
    create_table_options: str = ""
    connect_timeout: int = 10
    mode: str = "append"
    key: list[str] = field(default_factory=list)
    commit_user: str | None = None
    commit_identifier: int | None = None
    staging_schema: str = "lakesink"
    checkpoint: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> JdbcOptions:
        known = {k.lower(): k for k in OPTIONS}
        out = cls()
        for key, raw in options.items():
            if raw is None:
                continue
            value = str(raw)
            canonical = known.get(key.lower())
            if canonical == "url":
                out.url = value.strip()
            elif canonical == "dbtable" or key.lower() == "path":
                out.table = value.strip()
            elif canonical == "user":
                out.user = value
            elif canonical == "password":
                out.password = value
            elif canonical == "batchsize":
                out.batch_size = _int(key, value, 1)
            elif canonical == "isolationLevel":
                level = value.strip().upper()
                if level == "NONE":
                    raise InvalidOptionError(key, value, "a transaction isolation level: exactly-once writes "
                                             f"commit in one transaction ({', '.join(ISOLATION_LEVELS)})")
                if level not in ISOLATION_LEVELS:
                    raise InvalidOptionError(key, value, f"one of {', '.join(ISOLATION_LEVELS)}")
                out.isolation_level = level
            elif canonical == "createTableColumnTypes":
                out.column_types = _column_types(key, value)
            elif canonical == "createTableOptions":
                out.create_table_options = value
            elif canonical == "connectTimeout":
                out.connect_timeout = _int(key, value, 1)
            elif canonical == "write.mode":
                out.mode = value.strip().lower()
                if out.mode not in MODES:
                    raise InvalidOptionError(key, value, f"one of {', '.join(MODES)}")
            elif canonical == "upsert.key":
                out.key = [c.strip() for c in value.split(",") if c.strip()]
            elif canonical == "commit.user":
                if not value.strip():
                    raise InvalidOptionError(key, value, "a non-empty string")
                out.commit_user = value.strip()
            elif canonical == "commit.identifier":
                out.commit_identifier = _int(key, value, 0, MAX_IDENTIFIER)
            elif canonical == "staging.schema":
                out.staging_schema = value.strip()
            elif canonical == "checkpointLocation":
                out.checkpoint = value
            elif key.lower() in SPARK_SUPPLIED:
                continue
            else:
                raise UnknownOptionError(key, list(OPTIONS))
        return out

    def check(self, streaming: bool = False) -> JdbcOptions:
        """Refuse incomplete or contradictory options before anything is written."""
        if not self.url:
            raise ConfigurationError("No database URL: set option 'url' (e.g. postgresql://app@127.0.0.1:5432/shop "
                                     "or sqlite:////data/shop.db).")
        if not self.table:
            raise ConfigurationError("No target table: set option 'dbtable' (e.g. public.orders).")
        if self.mode == "upsert" and not self.key:
            raise ConfigurationError("write.mode=upsert needs the key columns: set option 'upsert.key' "
                                     "(lakesink.jdbc.write(..., key=['id'])).")
        if self.key and self.mode != "upsert":
            raise ConfigurationError(f"upsert.key is only used with write.mode=upsert, not {self.mode!r}.")
        if self.commit_identifier is not None and self.commit_user is None:
            raise InvalidOptionError("commit.identifier", self.commit_identifier, "to be given together with commit.user")
        if not streaming and self.commit_user is not None and self.commit_identifier is None:
            # Without an identifier a re-run cannot be told from a new run.
            raise ConfigurationError(f"commit.user={self.commit_user!r} needs commit.identifier for a batch write: "
                                     "give both (a stable user and an increasing number) or neither.")
        if streaming and self.commit_identifier is not None:
            raise ConfigurationError("commit.identifier is the batch id in streaming: do not set it.")
        return self


def _int(key: str, value: str, minimum: int, maximum: int | None = None) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidOptionError(key, value, "an integer") from None
    if number < minimum or (maximum is not None and number > maximum):
        raise InvalidOptionError(key, value, f"an integer from {minimum}" + (f" to {maximum}" if maximum else ""))
    return number


def _column_types(key: str, value: str) -> dict[str, str]:
    """"name VARCHAR(64), price NUMERIC(10, 2)" -> {name: type}; commas inside parentheses are kept."""
    out: dict[str, str] = {}
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(value):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(value[start:i])
            start = i + 1
    parts.append(value[start:])
    for part in filter(str.strip, parts):
        name, _, sql_type = part.strip().partition(" ")
        if not sql_type.strip():
            raise InvalidOptionError(key, value, "'column TYPE' pairs separated by commas")
        out[name.strip('"')] = sql_type.strip()
    return out
