"""Options as users give them → typed values: lookups by any spelling, the checks, the parsed
write options, and docs/options.md's tables. What each option is (key, aliases, type, default,
scope, meaning) is declared once, in `options.declarations`; this module re-exports it.

Anything not declared is an error naming the key (and a close match), so a typo never silently
does nothing. `docs/options.md` is generated from the declarations (`options.page`, `python -m lakesink.options`);
a test keeps them equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import storage
from ..errors import (ConfigurationError, InvalidOptionError, UnknownOptionError, UnsupportedOptionError,
                      UnsupportedTableError)
from .declarations import (BATCH_IDENTIFIER, CATALOG_FAMILY_DOC, CATALOG_FAMILY_PREFIX, MAX_COMMIT_IDENTIFIER,
                                  REFUSED, REGISTRY, SCOPES, SPARK_SUPPLIED, STORAGE_FAMILY_DOC, Option, Refusal)
from .unhonoured import UNHONOURED

__all__ = ["BATCH_IDENTIFIER", "MAX_COMMIT_IDENTIFIER", "SPARK_SUPPLIED", "SCOPES", "REGISTRY", "REFUSED", "Option",
           "Refusal", "refusal", "option", "canonical", "paimon_option_keys", "is_field_option", "is_storage_option",
           "parse", "parse_storage", "storage_options", "catalog_options", "table_value", "table_options_of",
           "WriteOptions", "UNHONOURED", "check_honoured"]


def refusal(key: str, scopes: tuple[str, ...]) -> Refusal | None:
    """The refusal of `key` (any spelling case) in one of `scopes`, if lakesink refuses it there."""
    found = REFUSED.get(str(key).lower())
    return found if found is not None and set(found.scopes) & set(scopes) else None


def _check_refused(key: str, scopes: tuple[str, ...]) -> None:
    found = refusal(key, scopes)
    if found is not None:
        raise UnsupportedOptionError(key, found.reason)


def check_honoured(table_options: Mapping[str, object], table: str | None = None,
                   primary_keys=None, complete: bool | None = None) -> None:
    """Refuse the Paimon table options lakesink cannot honour yet (`UNHONOURED`): given to a
    write (`table` None: `UnsupportedOptionError`) or held by the existing table `table`
    (`UnsupportedTableError`). Called before anything is written. `primary_keys` and
    `complete` (default: `table` given) for the options honoured in some tables only: the
    table's keys, and whether `table_options` are all of a table's options (a table, or one
    about to be created) rather than a write's."""
    complete = table is not None if complete is None else complete
    for key, value in table_options.items():
        entry = UNHONOURED.get(str(key))
        if entry is None or str(value).strip().lower() in entry.honoured:
            continue
        reason = entry.reason
        if entry.honoured_in is not None:
            problem = entry.honoured_in(table_options, list(primary_keys or ()), complete)
            if problem is None:
                continue
            reason = f"{reason} {problem}"
        if table is not None:
            raise UnsupportedTableError(f"{table} has {key}={value}, which lakesink cannot write yet. "
                                        f"{reason} Nothing was written.", table=table, option=str(key))
        raise UnsupportedOptionError(key, f"{key}={value}: {reason} Nothing was written.")


def option(key: str) -> Option:
    return REGISTRY[key]


def _index(scopes: tuple[str, ...]) -> dict[str, str]:
    """Lower-cased spelling → canonical key, for the options of `scopes`."""
    out = {}
    for opt in REGISTRY.values():
        if set(opt.scopes) & set(scopes):
            for spelling in (opt.key, *opt.aliases):
                out[spelling.lower()] = opt.key
    return out


def canonical(key: str, scopes: tuple[str, ...]) -> str | None:
    """The registry's key for a spelling (any case, any alias) among `scopes`' options."""
    return _index(scopes).get(key.lower())


def paimon_option_keys() -> set[str]:
    """Every Paimon table option: pypaimon's declared ones and those declared here."""
    from pypaimon.common.options.config_option import ConfigOption
    from pypaimon.common.options.core_options import CoreOptions

    keys = {v.key() for v in vars(CoreOptions).values() if isinstance(v, ConfigOption)}
    return keys | {o.key for o in REGISTRY.values() if o.scope == "table"}


# Paimon's per-field table options, `fields.<column>.<suffix>` (merge engines; docs/keyed.md).
FIELD_OPTION_SUFFIXES = ("aggregate-function", "ignore-retract", "sequence-group", "list-agg-delimiter",
                         "distinct", "nested-key", "default-value")


def is_field_option(key: str) -> bool:
    """`fields.<column>.<suffix>` or `fields.default-aggregate-function`: passed to Paimon's schema."""
    if key == "fields.default-aggregate-function":
        return True
    if not key.startswith("fields."):
        return False
    column, _, suffix = key[len("fields."):].rpartition(".")
    return bool(column) and suffix in FIELD_OPTION_SUFFIXES


def is_storage_option(key: str) -> bool:
    """File-system and publication options: used to reach the table, never stored in it."""
    return storage.is_storage_key(key) or (key in REGISTRY and REGISTRY[key].scope == "storage")


def parse(raw: Mapping[str, object], scopes: tuple[str, ...], storage: bool = True) -> dict[str, object]:
    """Typed values by canonical key, for options of `scopes`; Spark's own keys (unless a scope
    declares them) and, with `storage`, storage options (see `storage_options`) skipped.
    Unknown keys are an error naming the known ones.
    """
    reach_files = storage
    index = _index(scopes)
    out: dict[str, object] = {}
    spelled: dict[str, str] = {}
    for key, value in raw.items():
        if value is None:
            continue
        low = str(key).lower()
        _check_refused(str(key), scopes)
        canonical = index.get(low)
        if canonical is None and low in SPARK_SUPPLIED:
            continue
        if canonical is None and reach_files and is_storage_option(str(key)):
            continue  # read with `storage_options`
        if canonical is None:
            raise UnknownOptionError(str(key), sorted({s for o in REGISTRY.values() if set(o.scopes) & set(scopes)
                                                       for s in (o.key, *o.aliases)}))
        parsed = REGISTRY[canonical].parse(value, str(key))
        if canonical in out and out[canonical] != parsed:
            raise InvalidOptionError(str(key), value, f"the same value as {spelled[canonical]!r} (both name "
                                     f"{canonical}), or only one of them")
        out[canonical], spelled[canonical] = parsed, str(key)
    return out


def parse_storage(raw: Mapping[str, object]) -> dict[str, str]:
    """Storage options only (`fs.*`, `s3.*`, `commit.lock`, ...), by pypaimon's spelling; any
    other key is an error naming it (e.g. the CLI's `--option`, which only says how to reach files).
    """
    out: dict[str, str] = {}
    for key, value in raw.items():
        key = str(key).strip()
        if not is_storage_option(key):
            raise ConfigurationError(
                f"Option {key!r} is not a storage option. Storage options say how to reach a table's "
                "files: `fs.*` / `s3.*` (e.g. `fs.s3.endpoint`, `fs.s3.accessKeyId`), `commit.lock`, "
                "`commit.allow-unsafe-publication` (docs/options.md, docs/storage.md).", option=key)
        if key in REGISTRY:
            REGISTRY[key].parse(value, key)  # a bad value fails here, naming the option
        out[storage.canonical_key(key)] = str(value)
    return out


def storage_options(raw: Mapping[str, object]) -> dict[str, str]:
    """The storage options among `raw` (by pypaimon's spelling): how to reach the files."""
    return {storage.canonical_key(str(k)): str(v) for k, v in raw.items()
            if v is not None and is_storage_option(str(k))}


def catalog_options(raw: Mapping[str, object]) -> dict[str, str]:
    """Catalog options by canonical key, values checked (bools as `true`/`false`); storage options
    kept by pypaimon's spelling. An unknown key is an error naming the valid ones."""
    index = _index(("catalog",))
    out: dict[str, str] = {}
    for key, value in raw.items():
        if value is None:
            continue
        key = str(key)
        canonical = index.get(key.lower())
        if canonical == "metastore" and str(value).strip().lower() == "rest":
            raise InvalidOptionError(key, value, "one of filesystem, jdbc (Paimon's REST catalog is not "
                                     "supported by lakesink yet)")
        if canonical is not None:
            typed = REGISTRY[canonical].parse(value, key)
            out[canonical] = str(typed).lower() if isinstance(typed, bool) else str(typed)
        elif key.startswith(CATALOG_FAMILY_PREFIX) and len(key) > len(CATALOG_FAMILY_PREFIX):
            out[key] = str(value)
        elif is_storage_option(key):
            out[storage.canonical_key(key)] = str(value)
        else:
            keys = [o.key for o in REGISTRY.values() if o.scope == "catalog"]
            raise UnknownOptionError(key, keys, "catalog", ", ".join(keys) + ", jdbc.*, and storage options "
                                     "fs.*, s3.* (docs/catalogs.md)")
    return out


def table_value(table_options: Mapping[str, object], key: str):
    """A table option's typed value from a table's options (its default when unset)."""
    opt = REGISTRY[key]
    raw = table_options.get(key)
    return opt.default if raw is None else opt.parse(raw)


def table_options_of(table) -> dict[str, str]:
    """A pypaimon table's options as a plain dict."""
    return dict(table.options.options.to_map())


@dataclass
class WriteOptions:
    """Parsed write options. `table_options` go to Paimon when a table is created."""

    partition_keys: list[str] = field(default_factory=list)
    primary_keys: list[str] = field(default_factory=list)
    commit_user: str | None = None
    commit_identifier: int | None = None
    branch: str | None = None   # option branch: a Paimon branch (None: main)
    dynamic_overwrite: bool | None = None  # None: not given (the session's setting decides)
    checkpoint_location: str | None = None
    commit_mode: str = "sync"
    commit_empty_batches: bool = False
    maintenance: bool = True
    aggregator: bool = False
    merge_schema: bool = False  # option write.merge-schema: evolve the table's schema with the data
    in_place: str = "auto"      # option write.in-place: auto | true | false (paimon.commit.intents)
    keyed_shuffle: str = "auto"  # option write.keyed-shuffle: auto | true | false (spark.streaming)
    keyed_shuffle_min_rows: int = 1_000_000
    table_options: dict[str, str] = field(default_factory=dict)
    fs_options: dict[str, str] = field(default_factory=dict)  # storage access: fs.s3.*, commit.lock, ...
    path: str | None = None
    query_name: str | None = None
    # A write by name to a table its catalog does not hold yet: the catalog entry that creates and
    # registers the table when the write is planned (paimon.catalog.catalog.CatalogEntry), set by the caller.
    catalog_entry: object | None = None
    # An overwrite of exactly one partition ({column: value} of every partition column), set by
    # callers that know it (SQL's INSERT OVERWRITE ... PARTITION): replaced even by no rows.
    overwrite_partition: dict | None = None

    @classmethod
    def parse(cls, options: Mapping[str, object], scopes: tuple[str, ...] = ("write",)) -> WriteOptions:
        raw = {str(k): str(v) for k, v in options.items() if v is not None}
        spark_partitions: list[str] = []
        known_paimon = paimon_option_keys()
        ours = _index(scopes)
        out = cls()
        typed: dict[str, object] = {}
        for key, value in raw.items():
            low = key.lower()
            _check_refused(key, scopes)
            canonical = ours.get(low)
            if canonical is not None:
                typed[canonical] = REGISTRY[canonical].parse(value, key)
            elif low == "path":
                out.path = value
            elif low == "queryname":
                out.query_name = value
            elif low == "__partition_columns":
                spark_partitions = _json_columns(key, value)
            elif low in SPARK_SUPPLIED:
                continue
            elif is_storage_option(key):
                out.fs_options[storage.canonical_key(key)] = value
            elif key in known_paimon or is_field_option(key) or key in UNHONOURED:
                if key in REGISTRY:
                    REGISTRY[key].parse(value, key)  # a bad value fails here, not after the write
                out.table_options[key] = value
            else:
                raise UnknownOptionError(key, [o.key for o in REGISTRY.values() if o.scope in scopes]
                                         + sorted(known_paimon))
        out.partition_keys = typed.get("partition", [])
        if spark_partitions:  # `.partitionBy(...)` on a format("paimon") writer: Paimon's partition keys
            if out.partition_keys and out.partition_keys != spark_partitions:
                raise InvalidOptionError("partition", ",".join(out.partition_keys),
                                         f"the same columns as .partitionBy({', '.join(spark_partitions)})")
            out.partition_keys = spark_partitions
        out.primary_keys = typed.get("primary-key", [])
        out.commit_user = typed.get("commit.user")
        out.branch = typed.get("branch")
        out.commit_identifier = typed.get("commit.identifier")
        if "partitionOverwriteMode" in typed:
            out.dynamic_overwrite = typed["partitionOverwriteMode"] == "dynamic"
        if "dynamic-partition-overwrite" in typed:
            out.dynamic_overwrite = typed["dynamic-partition-overwrite"]
        out.checkpoint_location = typed.get("checkpointLocation")
        out.commit_mode = typed.get("commit.mode", "sync")
        out.commit_empty_batches = typed.get("commit.empty-batches", False)
        out.maintenance = typed.get("maintenance.enabled", True)
        out.aggregator = typed.get("aggregator.enabled", False)
        out.merge_schema = typed.get("write.merge-schema", False)
        out.in_place = typed.get("write.in-place", "auto")
        out.keyed_shuffle = typed.get("write.keyed-shuffle", "auto")
        out.keyed_shuffle_min_rows = typed.get("write.keyed-shuffle.min-rows", 1_000_000)
        check_honoured(out.table_options, primary_keys=out.primary_keys, complete=False)
        if out.commit_identifier is not None and out.commit_user is None:
            raise InvalidOptionError("commit.identifier", out.commit_identifier,
                                     "to be given together with commit.user")
        return out


def _json_columns(key: str, value: str) -> list[str]:
    import json
    try:
        columns = json.loads(value)
    except ValueError:
        raise InvalidOptionError(key, value, "a JSON list of column names (set by Spark's partitionBy)") from None
    return [str(c) for c in columns]
