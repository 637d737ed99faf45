"""Primary-key and fixed-bucket tables: what a write must know and record (what it refuses: `rules`).

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

from ..files.datafiles import StagedFile, TableLayout, column_stats, describe_parquet
from .rules import RETRACTABLE_FUNCTIONS, DynamicOptions, spec_fields

SEQUENCE = "_SEQUENCE_NUMBER"
VALUE_KIND = "_VALUE_KIND"
KEY_PREFIX = "_KEY_"
ROW_KINDS = {"+I": 0, "-U": 1, "+U": 2, "-D": 3}
RETRACT_KINDS = (1, 3)
CHANGELOG_DIR = "lakesink_file=changelog"  # where Spark writes a keyed write's changelog files
_BUCKET_DIR = "lakesink_bucket"


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
        """From a table's (or a table-to-be's) keys and options; every refusal names its option
        (`rules.spec_fields`)."""
        return cls(**spec_fields(primary_keys, partition_keys, options, column_names))

    @classmethod
    def of_table(cls, table) -> KeyedSpec:
        return cls.resolve(table.primary_keys, table.partition_keys, dict(table.table_schema.options),
                           [f.name for f in table.table_schema.fields])


def row_kind_refusal(field: str, value) -> str:
    """The `rowkind.field` column holds `value`, which is no row kind (spark.keyed builds the same
    text in the JVM)."""
    shown = "null" if value is None else f"'{value}'"
    return f"rowkind.field {field!r} holds {shown}; row kinds are {', '.join(ROW_KINDS)}. Nothing was written."


def is_keyed_table(table) -> bool:
    return table.is_primary_key_table or int(table.table_schema.options.get("bucket", "-1")) != -1


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
