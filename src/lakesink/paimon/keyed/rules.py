"""Which keyed tables and table options lakesink writes, as Apache Paimon reads them, and the
refusals that name the option.

A keyed write's `KeyedSpec` (the layout of its files: `layout`) comes from a table's keys and
options through `spec_fields`; what lakesink does not merge exactly as Paimon is refused there, by
name, before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ... import options as registry
from ...errors import ConfigurationError, UnsupportedTableError

MERGE_ENGINES = ("deduplicate", "first-row", "partial-update", "aggregation")
CHANGELOG_PRODUCERS = ("none", "input", "lookup", "full-compaction")
# The aggregate functions lakesink merges (in Spark for a write, in compaction), as Apache Paimon
# defines them; `fields.<f>.aggregate-function` / `fields.default-aggregate-function`.
AGGREGATE_FUNCTIONS = ("sum", "min", "max", "last_value", "last_non_null_value", "first_value",
                       "first_non_null_value", "bool_and", "bool_or", "listagg")
# Of those, the ones that take retractions (-U/-D) as Paimon does; the rest fail on one.
RETRACTABLE_FUNCTIONS = ("sum", "last_value", "last_non_null_value")
_FUNCTION_TYPES = {"sum": "numeric", "bool_and": "boolean", "bool_or": "boolean", "listagg": "string"}
# Per-field and delete-handling options lakesink does not merge (pypaimon, its keyed-table
# reader, cannot read such tables either): refused by name.
_UNMERGED_OPTIONS = ("partial-update.remove-record-on-delete", "partial-update.remove-record-on-sequence-group",
                     "aggregation.remove-record-on-delete")
_IGNORE_DELETE_KEYS = ("ignore-delete", "first-row.ignore-delete", "deduplicate.ignore-delete",
                       "partial-update.ignore-delete")
POSTPONE_BUCKET = -2  # Paimon's bucket id of rows not yet assigned to a bucket (bucket=-2 tables)


@dataclass(frozen=True)
class DynamicOptions:
    """A dynamic-bucket table's assignment options (Paimon's names and defaults)."""

    target_rows: int = 2_000_000  # dynamic-bucket.target-row-num: keys a bucket takes before another opens
    max_buckets: int = -1         # dynamic-bucket.max-buckets: per partition, -1 unlimited
    assigners: int | None = None  # dynamic-bucket.assigner-parallelism, capped by dynamic-bucket.initial-buckets
    initial_buckets: int | None = None

    @classmethod
    def of(cls, options: dict) -> DynamicOptions:
        values = {key: registry.table_value(options, key) for key in _DYNAMIC_KEYS}
        return cls(values["dynamic-bucket.target-row-num"], values["dynamic-bucket.max-buckets"],
                   values["dynamic-bucket.assigner-parallelism"], values["dynamic-bucket.initial-buckets"])

    def assigner_count(self, default: int) -> int:
        """How many assigners share a write's keys: Paimon's rule (assigner parallelism, else the
        write's parallelism, at most `initial-buckets`), and never more than `max-buckets` (each
        assigner opens buckets of its own)."""
        count = self.assigners or default
        if self.initial_buckets:
            count = min(count, self.initial_buckets)
        if self.max_buckets > 0:
            count = min(count, self.max_buckets)
        return max(1, count)


_DYNAMIC_KEYS = ("dynamic-bucket.target-row-num", "dynamic-bucket.max-buckets",
                 "dynamic-bucket.assigner-parallelism", "dynamic-bucket.initial-buckets")


def spec_fields(primary_keys, partition_keys, options: dict, column_names) -> dict:
    """The fields of a `KeyedSpec` (paimon.keyed.layout) from a table's (or a table-to-be's) keys and
    options; every refusal names its option."""
    primary_keys = tuple(primary_keys)
    partition_keys = tuple(partition_keys)
    # Paimon's default: a primary-key table without `bucket` is dynamic-bucket (bucket=-1).
    raw_bucket = str(options.get("bucket", "-1")).strip() or "-1"
    try:
        num_buckets = int(raw_bucket)
    except ValueError:
        raise ConfigurationError(f"bucket={raw_bucket!r} is not an integer.") from None
    postpone = num_buckets == POSTPONE_BUCKET
    if postpone:
        _check_postpone(primary_keys, options)
    if num_buckets < 1 and not (num_buckets == -1 and primary_keys) and not postpone:
        kind = "unaware-bucket" if num_buckets == -1 else "an invalid"
        raise ConfigurationError(
            f"bucket={num_buckets} ({kind} bucket mode) is not supported for keyed writes: a fixed-bucket "
            "append table needs a fixed bucket count >= 1.", option="bucket")
    dynamic = num_buckets == -1
    # A key without every partition column: Paimon's cross-partition mode (CROSS_PARTITION), one
    # global key -> (partition, bucket) index (paimon.keyed.cross_partition).
    cross = dynamic and any(k not in primary_keys for k in partition_keys)
    if dynamic and options.get("bucket-key"):
        raise ConfigurationError(
            "bucket-key with bucket=-1 (dynamic buckets): Paimon assigns a dynamic-bucket table's keys "
            "by the whole primary key and refuses a bucket-key; remove it or set a fixed bucket count.",
            option="bucket-key")
    missing = [k for k in primary_keys if k not in column_names]
    if missing:
        raise ConfigurationError(f"primary-key column(s) {missing} are not among the data's columns {list(column_names)}.")
    trimmed = tuple(k for k in primary_keys if k not in partition_keys)
    if primary_keys and not trimmed:
        raise ConfigurationError(
            f"primary-key {list(primary_keys)} consists of partition columns only; Paimon needs at "
            "least one primary-key column that is not a partition column."
        )
    bucket_key_opt = options.get("bucket-key")
    bucket_keys = tuple(c.strip() for c in bucket_key_opt.split(",") if c.strip()) if bucket_key_opt else trimmed
    if not bucket_keys:
        raise ConfigurationError(
            f"bucket-key: a fixed-bucket append table (bucket={num_buckets}) needs a bucket key, "
            "e.g. options={'bucket-key': 'user_id'}."
        )
    bad = [k for k in bucket_keys if k not in column_names]
    if bad:
        raise ConfigurationError(f"bucket-key column(s) {bad} are not among the data's columns.")
    if primary_keys and not set(bucket_keys) <= set(trimmed):
        raise ConfigurationError(
            f"bucket-key {list(bucket_keys)} must be a subset of the primary key minus partition columns "
            f"{list(trimmed)} (a key's rows must all land in one bucket)."
        )
    if set(bucket_keys) & set(partition_keys):
        raise ConfigurationError(f"bucket-key {list(bucket_keys)} must not contain partition columns.")
    engine = str(options.get("merge-engine", "deduplicate")).strip().lower()
    if primary_keys and engine not in MERGE_ENGINES:
        raise ConfigurationError(
            f"merge-engine={engine!r} is not a Paimon merge engine lakesink knows; Paimon's merge "
            f"engines are {', '.join(MERGE_ENGINES)}.", option="merge-engine")
    sequence_fields = tuple(c.strip() for c in str(options.get("sequence.field") or "").split(",") if c.strip())
    bad = [c for c in sequence_fields if c not in column_names]
    if bad:
        raise ConfigurationError(f"sequence.field column(s) {bad} are not among the data's columns.")
    rowkind = options.get("rowkind.field")
    if rowkind is not None and rowkind not in column_names:
        raise ConfigurationError(f"rowkind.field={rowkind!r} is not among the data's columns.")
    if not primary_keys:
        for key in ("sequence.field", "rowkind.field"):
            if options.get(key):
                raise ConfigurationError(f"{key} applies to primary-key tables only; this table has none.")
    producer = str(options.get("changelog-producer", "none")).strip().lower()
    if primary_keys and producer not in CHANGELOG_PRODUCERS:
        raise ConfigurationError(
            f"changelog-producer={producer!r} is not one of {', '.join(CHANGELOG_PRODUCERS)}.",
            option="changelog-producer")
    if producer == "input" and engine == "first-row":
        raise ConfigurationError(
            "changelog-producer=input with merge-engine=first-row: Paimon produces a first-row "
            "table's changelog by lookup; set changelog-producer=lookup.", option="changelog-producer")
    if producer == "full-compaction" and engine == "first-row":
        raise ConfigurationError(
            "changelog-producer=full-compaction with merge-engine=first-row is not supported by lakesink "
            "yet; set changelog-producer=lookup (inserts of new keys), as Paimon recommends.",
            option="changelog-producer")
    if producer == "lookup" and options.get("full-compaction.delta-commits"):
        raise ConfigurationError(
            "full-compaction.delta-commits with changelog-producer=lookup: Paimon refuses the pair "
            "(a full compaction would skip the lookup); use changelog-producer=full-compaction for "
            "periodic full compactions with a changelog.", option="full-compaction.delta-commits")
    if rowkind and engine == "first-row":
        raise ConfigurationError(
            "rowkind.field with merge-engine=first-row: first-row tables take inserts only "
            "(Paimon ignores or refuses their retractions); drop rowkind.field."
        )
    ignore_delete = any(str(options.get(k, "")).strip().lower() == "true" for k in _IGNORE_DELETE_KEYS)
    if cross and primary_keys:
        _check_cross_partition(primary_keys, partition_keys, engine, sequence_fields, ignore_delete)
    aggregates, delimiters = (), ()
    if primary_keys:
        _check_merge_options(engine, options, ignore_delete)
    if primary_keys and engine == "aggregation":
        aggregates, delimiters = _aggregates(options, [c for c in column_names if c not in primary_keys],
                                             sequence_fields)
    return {"primary_keys": primary_keys, "trimmed_keys": trimmed, "partition_keys": partition_keys,
            "bucket_keys": bucket_keys, "num_buckets": num_buckets, "merge_engine": engine,
            "sequence_fields": sequence_fields, "rowkind_field": rowkind, "ignore_delete": ignore_delete,
            "aggregates": aggregates, "delimiters": delimiters,
            "changelog_producer": producer if primary_keys else "none",
            "dynamic": DynamicOptions.of(options) if dynamic else None, "postpone": postpone,
            "cross_partition": cross}


def _check_postpone(primary_keys, options: dict) -> None:
    """What lakesink cannot honour on a postpone-bucket table (bucket=-2), refused by name."""
    if not primary_keys:
        raise ConfigurationError(
            "bucket=-2 (postpone buckets) applies to primary-key tables only, as in Paimon; give "
            "primary_key=[...] or a fixed bucket count with a bucket-key.", option="bucket")
    producer = str(options.get("changelog-producer", "none")).strip().lower()
    if producer != "none":
        raise ConfigurationError(
            f"changelog-producer={producer} on a postpone-bucket table (bucket=-2) is not supported by "
            "lakesink: its changelog would have to come from the compaction that assigns buckets. Use "
            "changelog-producer=none, or a fixed bucket count.", option="changelog-producer")
    if options.get("full-compaction.delta-commits"):
        raise ConfigurationError("full-compaction.delta-commits on a postpone-bucket table (bucket=-2): its "
                                 "writers never compact; run lakesink.compact.", option="full-compaction.delta-commits")
    function = str(options.get("bucket-function.type", "default")).strip().lower()
    if function != "default":
        raise ConfigurationError(f"bucket-function.type={function}: lakesink assigns postpone rows to buckets "
                                 "with Paimon's default bucket function only.", option="bucket-function.type")


def _check_cross_partition(primary_keys, partition_keys, engine: str, sequence_fields, ignore_delete: bool) -> None:
    """What lakesink cannot honour on a cross-partition table, refused by name."""
    outside = [k for k in partition_keys if k not in primary_keys]
    mode = (f"primary-key {list(primary_keys)} without the partition column(s) {outside} and bucket=-1 is "
            "Paimon's cross-partition mode (a key moves between partitions)")
    if sequence_fields:
        raise ConfigurationError(
            f"sequence.field: {mode}, where Paimon refuses a sequence.field (a key's versions in two "
            "partitions could not be ordered); drop sequence.field, or add the partition columns to the "
            "primary key.", option="sequence.field")
    if ignore_delete and engine == "deduplicate":
        raise ConfigurationError(
            f"ignore-delete=true with merge-engine=deduplicate: {mode}, and a key that moves is deleted from "
            "its old partition by a -D row, which ignore-delete would drop (readers too): the key would stay "
            "in both partitions. Drop ignore-delete, or add the partition columns to the primary key.",
            option="ignore-delete")


def _check_merge_options(engine: str, options: dict, ignore_delete: bool) -> None:
    """Refuse, by name, merge options lakesink does not merge exactly as Paimon."""
    for key in _UNMERGED_OPTIONS:
        if str(options.get(key, "")).strip().lower() == "true":
            raise ConfigurationError(f"{key}=true is not supported by lakesink yet (nor by pypaimon 2.1, which "
                                     "reads its keyed tables); write this table with Paimon's Java writers.",
                                     option=key)
    for key, value in options.items():
        if key.startswith("fields.") and key.endswith(".sequence-group"):
            raise ConfigurationError(f"{key}: sequence groups are not supported by lakesink yet (nor read by "
                                     "pypaimon 2.1); use sequence.field for the whole row.", option=key)
        if key.startswith("fields.") and key.endswith(".ignore-retract") and str(value).strip().lower() == "true":
            raise ConfigurationError(f"{key}=true is not supported by lakesink yet (pypaimon 2.1, which reads "
                                     "keyed tables, refuses such tables); filter the retractions out of the "
                                     "input, or set ignore-delete=true to drop all of them.", option=key)
        if key.startswith("fields.") and key.endswith(".aggregate-function") and engine != "aggregation":
            raise ConfigurationError(f"{key} applies to merge-engine=aggregation only; this table's merge "
                                     f"engine is {engine}.", option=key)
    if engine == "partial-update" and ignore_delete:
        raise ConfigurationError(
            "ignore-delete=true with merge-engine=partial-update is not supported by lakesink yet (pypaimon "
            "2.1, which reads keyed tables, refuses it); drop the retractions from the input instead.",
            option="ignore-delete")


def _aggregates(options: dict, value_columns, sequence_fields) -> tuple[tuple, tuple]:
    """((column, function), ...) for every value column, and listagg delimiters, as Paimon picks
    them: sequence fields keep their last value; then `fields.<c>.aggregate-function`, then
    `fields.default-aggregate-function`, then last_non_null_value."""
    default = options.get("fields.default-aggregate-function")
    aggregates, delimiters = [], []
    for column in value_columns:
        if column in sequence_fields:
            if options.get(f"fields.{column}.aggregate-function"):
                raise ConfigurationError(f"fields.{column}.aggregate-function: {column} is a sequence.field "
                                         "column, which Paimon never aggregates.",
                                         option=f"fields.{column}.aggregate-function")
            aggregates.append((column, "last_value"))
            continue
        key = f"fields.{column}.aggregate-function"
        function = str(options.get(key) or default or "last_non_null_value").strip().lower()
        if function not in AGGREGATE_FUNCTIONS:
            named = key if options.get(key) else "fields.default-aggregate-function"
            why = (" (Apache Paimon removed `count` because it cannot be merged correctly; keep a column of "
                   "ones with `sum`)" if function == "count" else " (not supported by lakesink yet)")
            raise ConfigurationError(f"{named}={function!r}{why}: lakesink merges the aggregate functions "
                                     f"{', '.join(AGGREGATE_FUNCTIONS)}.", option=named)
        aggregates.append((column, function))
        if function == "listagg":
            delimiters.append((column, str(options.get(f"fields.{column}.list-agg-delimiter", ","))))
    unknown = [k for k in options if k.startswith("fields.") and k.endswith(".aggregate-function")
               and k[len("fields."):-len(".aggregate-function")] not in value_columns]
    if unknown:
        raise ConfigurationError(f"{unknown[0]} names no value column of the table (value columns: "
                                 f"{list(value_columns)}).", option=unknown[0])
    return tuple(aggregates), tuple(delimiters)


def check_aggregate_types(spec, arrow_schema: pa.Schema) -> None:
    """Each aggregate function of `spec` (a `KeyedSpec`) on a column type Paimon allows for it."""
    tests = {"numeric": lambda t: pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t),
             "boolean": pa.types.is_boolean,
             "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)}
    for column, function in spec.aggregates:
        need = _FUNCTION_TYPES.get(function)
        if need and not tests[need](arrow_schema.field(column).type):
            raise ConfigurationError(
                f"fields.{column}.aggregate-function={function} needs a {need} column; {column} is "
                f"{arrow_schema.field(column).type}.", option=f"fields.{column}.aggregate-function")


def check_keyed_table(table, requested_primary_keys) -> None:
    """A write with `primary_key=` must match the existing table's key; the table must be Parquet."""
    if requested_primary_keys and list(requested_primary_keys) != list(table.primary_keys):
        have = list(table.primary_keys) or "none (an append table)"
        raise ConfigurationError(
            f"primary-key {list(requested_primary_keys)} differs from the table's primary key {have}; "
            "the key of an existing table cannot be changed by a write."
        )
    if (table.options.file_format() or "parquet").lower() != "parquet":
        raise UnsupportedTableError(f"{table.table_path} stores {table.options.file_format()} files; "
                                    "lakesink writes Parquet tables only.")
    registry.check_honoured(table.table_schema.options, str(table.table_path), table.primary_keys)
    changelog = str(table.table_schema.options.get("changelog-producer", "none")).lower()
    if changelog not in CHANGELOG_PRODUCERS:
        raise UnsupportedTableError(
            f"{table.table_path} has changelog-producer={changelog}, which lakesink does not write "
            f"(it writes {', '.join(CHANGELOG_PRODUCERS)}).")
