"""Options of the JDBC sink, typed: declared in the options registry (scope `jdbc`,
listed in docs/options.md), checked together here before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import options as registry
from ..errors import ConfigurationError, InvalidOptionError

ISOLATION_LEVELS = ("READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE")


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
    fs_options: dict[str, str] = field(default_factory=dict)  # to reach a stream's checkpoint (fs.s3.*, ...)

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> JdbcOptions:
        """Typed options; unknown keys and bad values fail here, naming the key as given."""
        raw = {str(k): v for k, v in options.items()}
        typed = registry.parse(raw, ("jdbc",))
        given = {registry.canonical(k, ("jdbc",)): k for k in raw}
        out = cls()
        out.url = (typed.get("url") or "").strip()
        out.table = (typed.get("dbtable") or "").strip()
        out.user = typed.get("user")
        out.password = typed.get("password")
        out.batch_size = typed.get("batchsize", out.batch_size)
        if "isolationLevel" in typed:
            out.isolation_level = _isolation(given["isolationLevel"], typed["isolationLevel"])
        if "createTableColumnTypes" in typed:
            out.column_types = _column_types(given["createTableColumnTypes"], typed["createTableColumnTypes"])
        out.create_table_options = typed.get("createTableOptions", "")
        out.connect_timeout = typed.get("connectTimeout", out.connect_timeout)
        out.mode = typed.get("write.mode", out.mode)
        out.key = typed.get("upsert.key", [])
        out.commit_user = typed.get("commit.user")
        out.commit_identifier = typed.get("commit.identifier")
        out.staging_schema = typed.get("staging.schema", out.staging_schema)
        out.checkpoint = typed.get("checkpointLocation")
        out.fs_options = registry.storage_options(raw)
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
        if not streaming and self.fs_options:
            raise ConfigurationError(f"Storage options ({', '.join(sorted(self.fs_options))}) only reach a stream's "
                                     "checkpoint: a batch write into a database has no files. Remove them.")
        if streaming and self.commit_identifier is not None:
            raise ConfigurationError("commit.identifier is the batch id in streaming: do not set it.")
        return self


def _isolation(key: str, value: str) -> str:
    level = value.strip().upper()
    if level == "NONE":
        raise InvalidOptionError(key, value, "a transaction isolation level: exactly-once writes "
                                 f"commit in one transaction ({', '.join(ISOLATION_LEVELS)})")
    if level not in ISOLATION_LEVELS:
        raise InvalidOptionError(key, value, f"one of {', '.join(ISOLATION_LEVELS)}")
    return level


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
