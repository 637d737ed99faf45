"""Every option lakesink reads: keys, defaults and checks in one place.

Write options are of three kinds:

* lakesink's own (table below), documented in docs/options.md;
* Paimon table options, by their Paimon names (`file.format`, `target-file-size`,
  `snapshot.num-retained.max`, ...): used when lakesink creates the table and
  stored in its schema; on an existing table they must not contradict it;
* options Spark adds by itself (`path`, `checkpointlocation`, `queryname`).

Anything else is an error naming the key, so a typo never silently does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import InvalidOptionError, UnknownOptionError

# key: (default, meaning)
LAKESINK_OPTIONS: dict[str, tuple[str | None, str]] = {
    "partition": (None, "Comma-separated partition columns of a table lakesink creates (Paimon's name)."),
    "primary-key": (None, "Comma-separated primary key of a table lakesink creates (not writable yet)."),
    "commit.user": (None, "Stable commit user. With commit.identifier, re-running a job that already "
                          "committed commits nothing (idempotent re-runs)."),
    "commit.identifier": (None, "Increasing integer identifying this job for commit.user (e.g. a run number)."),
    "partitionOverwriteMode": ("static", "Spark's name: `static` overwrites the whole table, `dynamic` only "
                                         "the partitions written. Paimon's `dynamic-partition-overwrite` also works."),
    "checkpointLocation": (None, "Streaming: the query's checkpoint directory (required)."),
    "commit.mode": ("sync", "Streaming: `sync` commits each micro-batch before the next starts; `pipelined` "
                            "accepts it durably and commits while the next batch runs."),
    "commit.empty-batches": ("false", "Streaming: make a snapshot for micro-batches without rows."),
    "maintenance.enabled": ("true", "Run snapshot/partition/tag expiry after each commit, in the background."),
    "aggregator.enabled": ("false", "After each commit, bin small files per partition up to `target-file-size` "
                                    "and replace them by one file in a COMPACT snapshot (docs/compaction.md)."),
}

# Paimon stores identifiers as signed 64-bit longs and reserves the largest for
# one-off batch commits.
MAX_COMMIT_IDENTIFIER = 0x7FFFFFFFFFFFFFFF - 1

# Options Spark passes to a Python data source on its own.
SPARK_SUPPLIED = {"path", "paths", "checkpointlocation", "queryname", "__partition_columns"}

# Paimon table options lakesink knows beyond those pypaimon declares.
_EXTRA_PAIMON_KEYS = {
    "snapshot.num-retained.min", "snapshot.num-retained.max", "snapshot.time-retained",
    "snapshot.expire.limit", "partition.expiration-time", "partition.expiration-check-interval",
    "partition.timestamp-formatter", "partition.timestamp-pattern", "tag.automatic-creation",
    "tag.creation-period", "tag.num-retained-max", "tag.default-time-retained", "consumer.expiration-time",
    "manifest.merge-min-count", "manifest.full-compaction-threshold-size", "compaction.min.file-num",
    "write-only", "parquet.compression", "file.compression",
}


def paimon_option_keys() -> set[str]:
    from pypaimon.common.options.config_option import ConfigOption
    from pypaimon.common.options.core_options import CoreOptions

    keys = {v.key() for v in vars(CoreOptions).values() if isinstance(v, ConfigOption)}
    return keys | _EXTRA_PAIMON_KEYS


def is_storage_option(key: str) -> bool:
    """File-system options (pypaimon's `fs.s3.endpoint`, `s3.path-style-access`, ...) and the
    snapshot publication options (docs/storage.md): used to reach the table, never stored in it."""
    from .paimon.publish import PUBLICATION_OPTIONS
    return key.startswith(("fs.", "s3.", "s3a.")) or key in PUBLICATION_OPTIONS


def _lower_map(options: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in options.items() if v is not None}


@dataclass
class WriteOptions:
    """Parsed write options. `table_options` go to Paimon when a table is created."""

    partition_keys: list[str] = field(default_factory=list)
    primary_keys: list[str] = field(default_factory=list)
    commit_user: str | None = None
    commit_identifier: int | None = None
    dynamic_overwrite: bool = False
    checkpoint_location: str | None = None
    commit_mode: str = "sync"
    commit_empty_batches: bool = False
    maintenance: bool = True
    aggregator: bool = False
    table_options: dict[str, str] = field(default_factory=dict)
    fs_options: dict[str, str] = field(default_factory=dict)  # storage access: fs.s3.*, commit.lock, ...
    path: str | None = None
    query_name: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> WriteOptions:
        raw = _lower_map(options)
        known_paimon = paimon_option_keys()
        ours = {k.lower(): k for k in LAKESINK_OPTIONS}
        out = cls()
        for key, value in raw.items():
            low = key.lower()
            canonical = ours.get(low)
            if canonical == "partition":
                out.partition_keys = _columns(value)
            elif canonical == "primary-key":
                out.primary_keys = _columns(value)
            elif canonical == "commit.user":
                if not value.strip():
                    raise InvalidOptionError(key, value, "a non-empty string")
                out.commit_user = value.strip()
            elif canonical == "commit.identifier":
                out.commit_identifier = _int(key, value, minimum=0, maximum=MAX_COMMIT_IDENTIFIER)
            elif canonical == "partitionOverwriteMode":
                out.dynamic_overwrite = _choice(key, value, ("static", "dynamic")) == "dynamic"
            elif canonical == "checkpointLocation":
                out.checkpoint_location = value
            elif canonical == "commit.mode":
                out.commit_mode = _choice(key, value, ("sync", "pipelined"))
            elif canonical == "commit.empty-batches":
                out.commit_empty_batches = _bool(key, value)
            elif canonical == "maintenance.enabled":
                out.maintenance = _bool(key, value)
            elif canonical == "aggregator.enabled":
                out.aggregator = _bool(key, value)
            elif low == "path":
                out.path = value
            elif low == "queryname":
                out.query_name = value
            elif low in SPARK_SUPPLIED:
                continue
            elif key == "dynamic-partition-overwrite":
                out.dynamic_overwrite = _bool(key, value)
            elif is_storage_option(key):
                from .paimon.publish import canonical_storage_key
                out.fs_options[canonical_storage_key(key)] = value
            elif key in known_paimon:
                out.table_options[key] = value
            else:
                raise UnknownOptionError(key, list(LAKESINK_OPTIONS) + sorted(known_paimon))
        if (out.commit_identifier is None) != (out.commit_user is None) and out.commit_identifier is not None:
            raise InvalidOptionError("commit.identifier", out.commit_identifier,
                                     "to be given together with commit.user")
        return out


def _columns(value: str) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()]


def _int(key: str, value: str, minimum: int | None = None, maximum: int | None = None) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidOptionError(key, value, "an integer") from None
    if minimum is not None and number < minimum:
        raise InvalidOptionError(key, value, f"an integer >= {minimum}")
    if maximum is not None and number > maximum:
        raise InvalidOptionError(key, value, f"an integer <= {maximum}")
    return number


def _bool(key: str, value: str) -> bool:
    low = value.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise InvalidOptionError(key, value, "true or false")


def _choice(key: str, value: str, choices: tuple[str, ...]) -> str:
    low = value.strip().lower()
    if low not in choices:
        raise InvalidOptionError(key, value, "one of " + ", ".join(choices))
    return low
