"""Primary-key and fixed-bucket tables: what a write must know, check and record.

A keyed table's data file is a key-value file, laid out as pypaimon's
KeyValueDataWriter (and Java's KeyValueDataFileWriter) write it:

    _KEY_<k> ...       the primary key minus partition columns ("trimmed" key), table order of the key
    _SEQUENCE_NUMBER   int64, NOT NULL: the row's version; readers keep the highest (first-row: lowest)
    _VALUE_KIND        int8, NOT NULL: 0 +I, 1 -U, 2 +U, 3 -D
    <every table column, table order>

Each key appears once per file and rows are sorted by key. Sequence numbers of
a write continue above the highest one of its (partition, bucket), read from the
manifests when the write is planned. Fixed-bucket append tables keep plain
Parquet files, only placed in their bucket.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pypaimon.manifest.schema.simple_stats import SimpleStats
from pypaimon.table.row.generic_row import GenericRow

from ... import options as registry
from ...errors import ConfigurationError, UnsupportedTableError
from ..files.datafiles import StagedFile, TableLayout, column_stats, describe_parquet

SEQUENCE = "_SEQUENCE_NUMBER"
VALUE_KIND = "_VALUE_KIND"
KEY_PREFIX = "_KEY_"
ROW_KINDS = {"+I": 0, "-U": 1, "+U": 2, "-D": 3}
RETRACT_KINDS = (1, 3)
MERGE_ENGINES = ("deduplicate", "first-row", "partial-update", "aggregation")
CHANGELOG_PRODUCERS = ("none", "input", "lookup", "full-compaction")
CHANGELOG_DIR = "lakesink_file=changelog"  # where Spark writes a keyed write's changelog files
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
_BUCKET_DIR = "lakesink_bucket"
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


@dataclass(frozen=True)
class KeyedSpec:
    """How rows of one keyed write are bucketed, merged and laid out (picklable, no I/O)."""

    primary_keys: tuple  # empty: a fixed-bucket append table
    trimmed_keys: tuple  # primary key minus partition columns: the file's key
    partition_keys: tuple
    bucket_keys: tuple
    num_buckets: int
    merge_engine: str = "deduplicate"
    sequence_fields: tuple = ()
    rowkind_field: str | None = None
    ignore_delete: bool = False
    # aggregation: ((column, function), ...) for every value column; listagg: ((column, delimiter), ...)
    aggregates: tuple = ()
    delimiters: tuple = ()
    changelog_producer: str = "none"  # none | input: the write's input rows also go to changelog files
    dynamic: DynamicOptions | None = None  # bucket=-1: keys assigned to buckets through the hash index
    # bucket=-2: rows go to the postpone bucket unbucketed; `lakesink.compact` assigns them to
    # real buckets (paimon.compaction.postpone). num_buckets stays -2.
    postpone: bool = False
    # bucket=-1 and a primary key without every partition column: Paimon's cross-partition mode.
    # A key lives in one (partition, bucket) of the whole table, found through the table's keys.
    cross_partition: bool = False

    def aggregate_of(self, column: str) -> str | None:
        return dict(self.aggregates).get(column)

    @property
    def retractable(self) -> bool:
        """Can a -U/-D row be merged into this table (rather than failing the write)?"""
        if self.merge_engine == "partial-update":
            return False
        if self.merge_engine == "aggregation":
            return all(f in RETRACTABLE_FUNCTIONS for _, f in self.aggregates)
        return True

    @property
    def has_primary_key(self) -> bool:
        return bool(self.primary_keys)

    def retraction_refusal(self) -> str:
        """Why a -U/-D row fails a write into this (not `retractable`) table: Paimon fails such a
        merge (partial-update: always; aggregation: functions without retraction), lakesink fails
        the write instead, before anything is visible. Both write paths raise this text."""
        if self.merge_engine == "partial-update":
            why = ("merge-engine=partial-update cannot merge them (Paimon refuses them too); drop the "
                   "-U/-D rows from the input")
        else:
            cannot = sorted({f"{c}: {f}" for c, f in self.aggregates if f not in RETRACTABLE_FUNCTIONS})
            why = (f"the aggregate functions {', '.join(cannot)} cannot retract (only "
                   f"{', '.join(RETRACTABLE_FUNCTIONS)} can, as in Paimon); set ignore-delete=true to drop "
                   "retractions, or drop the -U/-D rows from the input")
        return (f"rowkind.field {self.rowkind_field!r} holds a retraction (-U or -D) and {why}. "
                "Nothing was written.")

    @classmethod
    def resolve(cls, primary_keys, partition_keys, options: dict, column_names) -> KeyedSpec:
        """From a table's (or a table-to-be's) keys and options; every refusal names its option."""
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
        return cls(primary_keys, trimmed, partition_keys, bucket_keys, num_buckets, engine,
                   sequence_fields, rowkind, ignore_delete, aggregates, delimiters,
                   producer if primary_keys else "none",
                   DynamicOptions.of(options) if dynamic else None, postpone, cross)

    @classmethod
    def of_table(cls, table) -> KeyedSpec:
        return cls.resolve(table.primary_keys, table.partition_keys, dict(table.table_schema.options),
                           [f.name for f in table.table_schema.fields])


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


def row_kind_refusal(field: str, value) -> str:
    """The `rowkind.field` column holds `value`, which is no row kind (spark.keyed builds the same
    text in the JVM)."""
    shown = "null" if value is None else f"'{value}'"
    return f"rowkind.field {field!r} holds {shown}; row kinds are {', '.join(ROW_KINDS)}. Nothing was written."


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


def check_aggregate_types(spec: KeyedSpec, arrow_schema: pa.Schema) -> None:
    """Each aggregate function on a column type Paimon allows for it."""
    tests = {"numeric": lambda t: pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t),
             "boolean": pa.types.is_boolean,
             "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)}
    for column, function in spec.aggregates:
        need = _FUNCTION_TYPES.get(function)
        if need and not tests[need](arrow_schema.field(column).type):
            raise ConfigurationError(
                f"fields.{column}.aggregate-function={function} needs a {need} column; {column} is "
                f"{arrow_schema.field(column).type}.", option=f"fields.{column}.aggregate-function")


def is_keyed_table(table) -> bool:
    return table.is_primary_key_table or int(table.table_schema.options.get("bucket", "-1")) != -1


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


def sequences_and_buckets(table) -> tuple[dict[tuple, int], int | None]:
    """Over the table's latest snapshot: {(partition tuple, bucket): first free sequence number},
    and the table's bucket count if every file has it (else None). A commit planned on a
    snapshot whose files all had its count need not read them again for pypaimon's check
    that a partition keeps one bucket count (`PaimonTarget.commit`)."""
    from ..commit.live_files import live_entries  # manifests read once per stream, not per batch

    if table is None:
        return {}, None
    out: dict[tuple, int] = {}
    count = table.total_buckets
    uniform = count is not None and count > 0
    for entry in live_entries(table):
        key = (tuple(entry.partition.values), entry.bucket)
        top = entry.file.max_sequence_number + 1
        if top > out.get(key, 0):
            out[key] = top
        if entry.total_buckets > 0 and entry.total_buckets != count:  # pypaimon ignores counts <= 0
            uniform = False
    return out, count if uniform else None


def bucket_of_path(path: str) -> int:
    """The bucket of a staged file: Spark wrote it under `lakesink_bucket=<n>/` (an integer: exact)."""
    for part in path.split("/"):
        if part.startswith(_BUCKET_DIR + "="):
            return int(part.split("=", 1)[1])
    raise ValueError(f"{path} is not under a {_BUCKET_DIR}=<n> directory")


def describe_keyed(path: str, layout: TableLayout, spec: KeyedSpec, file_io,
                   metadata: pq.FileMetaData | None = None) -> StagedFile:
    """The committable of one staged file of a keyed write (key-value or fixed-bucket append)."""
    if metadata is None:
        with file_io.new_input_stream(path) as stream:
            metadata = pq.read_metadata(stream)
    staged = describe_parquet(path, layout, file_io, metadata=metadata)
    staged.bucket = bucket_of_path(path)
    if f"/{CHANGELOG_DIR}/" in path:  # changelog-producer=input: the write's input rows, by key
        staged.changelog = True
        staged.meta = dataclasses.replace(staged.meta, file_name="changelog-" + staged.meta.file_name[len("data-"):])
    if not spec.has_primary_key:
        # Fixed-bucket append file: sequence numbers count its rows from the bucket's next free one.
        return staged
    first, last, float_keys = _edge_keys(path, spec, file_io, metadata)
    deletes = _retractions(path, file_io) if spec.rowkind_field else 0
    return with_key_value_meta(staged, metadata, layout, spec, first, last, float_keys, deletes)


def with_key_value_meta(staged: StagedFile, metadata: pq.FileMetaData, layout: TableLayout, spec: KeyedSpec,
                        first: list, last: list, float_keys: dict, deletes: int, level: int = 0,
                        file_source: int = 0) -> StagedFile:
    """`staged` (described as a plain file) with what a key-value file's metadata holds besides:
    first and last key, key stats (footer min/max; `float_keys` {key: (min, max, nulls)} for keys
    the footer cannot tell), sequence-number range, retractions, LSM level and file source
    (Paimon's FileSource: 0 APPEND, 1 COMPACT)."""
    fields = {f.name: f for f in layout.fields}
    key_fields = [fields[k] for k in spec.trimmed_keys]
    key_stats = _key_stats(metadata, key_fields, float_keys)
    seq = column_stats(metadata, [_long_field(SEQUENCE)], {SEQUENCE: pa.int64()})[SEQUENCE]
    staged.meta = dataclasses.replace(
        staged.meta,
        min_key=GenericRow(first, key_fields), max_key=GenericRow(last, key_fields), key_stats=key_stats,
        min_sequence_number=seq[0], max_sequence_number=seq[1], delete_row_count=deletes,
        level=level, file_source=file_source)
    return staged


def _long_field(name: str):
    from pypaimon.schema.data_types import AtomicType, DataField
    return DataField(-1, name, AtomicType("BIGINT", nullable=False))


def _edge_keys(path, spec: KeyedSpec, file_io, metadata):
    """First and last key of a sorted file: read from its first and last row groups only.

    Float keys carry no safe footer min/max; their stats come from the key columns read here.
    """
    columns = [KEY_PREFIX + k for k in spec.trimmed_keys]
    with file_io.new_input_stream(path) as stream:
        reader = pq.ParquetFile(stream)
        head = reader.read_row_group(0, columns=columns)
        tail = head if metadata.num_row_groups == 1 else reader.read_row_group(metadata.num_row_groups - 1,
                                                                               columns=columns)
        float_keys = {}
        floats = [c for c in columns if pa.types.is_floating(head.schema.field(c).type)]
        if floats:
            whole = reader.read(columns=floats)
            for c in floats:
                mm = pc.min_max(whole.column(c))
                float_keys[c[len(KEY_PREFIX):]] = (mm["min"].as_py(), mm["max"].as_py(), whole.column(c).null_count)
    first = [head.column(c)[0].as_py() for c in columns]
    last = [tail.column(c)[tail.num_rows - 1].as_py() for c in columns]
    return first, last, float_keys


def _key_stats(metadata, key_fields, float_keys) -> SimpleStats:
    from pypaimon.schema.data_types import PyarrowFieldParser
    renamed = [dataclasses.replace(f, name=KEY_PREFIX + f.name) for f in key_fields]
    types = {f.name: PyarrowFieldParser.from_paimon_type(f.type) for f in renamed}
    stats = column_stats(metadata, renamed, types)
    mins, maxs, nulls = [], [], []
    for f, r in zip(key_fields, renamed):
        lo, hi, n = float_keys.get(f.name) or stats.get(r.name, (None, None, 0))
        mins.append(lo)
        maxs.append(hi)
        nulls.append(n)
    return SimpleStats(GenericRow(mins, key_fields), GenericRow(maxs, key_fields), nulls)


def _retractions(path: str, file_io) -> int:
    with file_io.new_input_stream(path) as stream:
        kinds = pq.read_table(stream, columns=[VALUE_KIND]).column(VALUE_KIND)
    return int(pc.sum(pc.is_in(kinds, pa.array(RETRACT_KINDS, pa.int8()))).as_py() or 0)


def kv_schema(layout: TableLayout, spec: KeyedSpec) -> pa.Schema:
    """The key-value file schema: `_KEY_<k>`..., `_SEQUENCE_NUMBER`, `_VALUE_KIND`, table columns."""
    values = layout.arrow_schema()
    keys = [pa.field(KEY_PREFIX + k, values.field(k).type, nullable=False) for k in spec.trimmed_keys]
    return pa.schema(keys + [pa.field(SEQUENCE, pa.int64(), nullable=False),
                             pa.field(VALUE_KIND, pa.int8(), nullable=False)] + list(values))
