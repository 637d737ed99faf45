"""Parquet files → Paimon data-file metadata, and moving them into the table.

Both write paths end with Parquet files in a staging directory; this module
turns each into a `StagedFile` (Paimon's `DataFileMeta` plus where the file
is now). Statistics come from the Parquet footer, so describing a file reads a
few KB whatever its size. Columns whose footer statistics are incomplete or
unsafe for pruning are left out of the file's stats (Paimon's dense
`value_stats_cols`), so a reader never skips a file it should have read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import struct
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
from pypaimon.data.timestamp import Timestamp
from pypaimon.manifest.schema.data_file_meta import DataFileMeta
from pypaimon.manifest.schema.simple_stats import SimpleStats
from pypaimon.schema.data_types import DataField, PyarrowFieldParser
from pypaimon.table.row.binary_row import BinaryRow
from pypaimon.table.row.generic_row import GenericRow
from pypaimon.utils.file_store_path_factory import canonical_data_file_path

from ... import storage
from ...errors import SchemaMismatchError
from .rowbytes import row_bytes

_EPOCH_DAY = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_UNAWARE_BUCKET = 0  # unaware-bucket append tables keep all files in bucket-0


@dataclass(frozen=True)
class TableLayout:
    """What describing a data file needs to know of its table (picklable, no I/O)."""

    fields: tuple  # pypaimon DataFields, table order
    partition_keys: tuple
    schema_id: int
    # Schema evolution (write.merge-schema): the table's next schema (a pypaimon TableSchema, id
    # `schema_id`) when the files are written for it before the table has it. Every file described
    # with this layout carries it to the commit, which writes it before the snapshot (table/evolution.py).
    pending_schema: object = None

    @classmethod
    def of(cls, table) -> TableLayout:
        return cls(tuple(table.table_schema.fields), tuple(table.partition_keys), table.table_schema.id)

    @classmethod
    def evolved(cls, table, schema) -> TableLayout:
        """The layout of files written for `schema`, the table's next schema (not written yet)."""
        return cls(tuple(schema.fields), tuple(table.partition_keys), schema.id, schema)

    @classmethod
    def for_new_table(cls, schema: pa.Schema, partition_keys) -> TableLayout:
        return cls(tuple(PyarrowFieldParser.to_paimon_schema(schema)), tuple(partition_keys), 0)

    def arrow_schema(self) -> pa.Schema:
        return PyarrowFieldParser.from_paimon_schema(list(self.fields))

    @property
    def not_null(self) -> tuple[str, ...]:
        """The columns the table declares NOT NULL: every write checks each row's values in them."""
        return tuple(f.name for f in self.fields if not getattr(f.type, "nullable", True))

    @property
    def partition_fields(self) -> list:
        """The partition columns' fields in partition-key order (not table order), as commit
        messages serialize a partition."""
        by_name = {f.name: f for f in self.fields}
        return [by_name[k] for k in self.partition_keys]


@dataclass
class StagedFile:
    """The Paimon committable: one data file, written but not yet in any snapshot."""

    partition: tuple
    bucket: int
    meta: DataFileMeta
    staged_path: str | None  # where the file is now; None once it sits at its table path
    # The table schema the file was written for when the table may not have it yet
    # (schema evolution); the commit makes it the table's first. None: the file's schema id exists.
    schema: object = None
    changelog: bool = False  # a changelog file (changelog-producer=input): in the snapshot's changelog
    # (encoding_key, message) of this description as a pypaimon commit message, made where it was
    # described (a task) or decoded: the driver's state saves then serialize nothing again.
    encoded: tuple | None = field(default=None, compare=False, repr=False)
    # The bucket count its manifest entry records (None: the table's). A postpone-bucket table's
    # files in real buckets carry their partition's count; the table's is -2.
    total_buckets: int | None = field(default=None, compare=False)

    @property
    def row_count(self) -> int:
        return self.meta.row_count

    @property
    def file_size(self) -> int:
        return self.meta.file_size


def encoding_key(staged: StagedFile) -> tuple:
    """What a file's commit-message encoding depends on besides what never changes once it is
    written: its level and schema (both set again at commit), where it sits and which list."""
    meta = staged.meta
    return (tuple(staged.partition), staged.bucket, meta.file_name, meta.level, staged.changelog, meta.schema_id,
            tuple(meta.value_stats_cols or ()), getattr(meta, "external_path", None))


def encode_message(staged: StagedFile, partition_fields) -> str:
    """The file as pypaimon's serialized commit message (base64), its committable encoding."""
    import base64
    return base64.b64encode(message_bytes(staged, partition_fields)).decode("ascii")


def message_bytes(staged: StagedFile, partition_fields) -> bytes:
    """pypaimon's `serialize_commit_message` (Java's CommitMessageSerializer v14 body) of a message
    holding this one file, its rows laid out by `rowbytes`: pypaimon's serializer decides each
    field's layout per value, ~1 ms a file, paid for every file of every keyed micro-batch (tests
    hold the bytes equal to pypaimon's)."""
    if len(staged.partition) != len(partition_fields):
        raise ValueError("partition arity does not match partition fields")
    partition = row_bytes(list(staged.partition), partition_fields)
    file_row = _file_row(staged.meta)
    lists = (0, 0, 1) if staged.changelog else (1, 0, 0)  # new, deleted, changelog files
    parts = [_I32.pack(len(partition)), partition, _I32.pack(staged.bucket), b"\x00"]  # no total_buckets
    for count in lists:
        parts.append(_I32.pack(count))
        if count:
            parts += [_I32.pack(len(file_row)), file_row]
    parts.append(_I32.pack(0) * 7)  # index adds/deletes, compaction before/after/changelog, its index
    parts.append(b"\x00")  # no check_from_snapshot
    return b"".join(parts)


_I32 = struct.Struct(">i")


def _row_of(row) -> bytes:
    if row is None:
        return row_bytes([], [])
    if isinstance(row, BinaryRow):
        return row.data
    return row_bytes(row.values, row.fields, row.row_kind.value)


def _stats_row(stats) -> bytes:
    from pypaimon.read.split_serializer import _SIMPLE_STATS_FIELDS, _encode_long_array
    if stats is None:
        return row_bytes([_row_of(None), _row_of(None), _encode_long_array([])], _SIMPLE_STATS_FIELDS)[4:]
    return row_bytes([_row_of(stats.min_values), _row_of(stats.max_values),
                      _encode_long_array(stats.null_counts or [])], _SIMPLE_STATS_FIELDS)[4:]


def _file_row(meta: DataFileMeta) -> bytes:
    """pypaimon's `_serialize_data_file_meta` of `meta` without its local file path, as its
    commit-message serializer writes a file."""
    from pypaimon.read.split_serializer import _DFM_FIELDS, _encode_long_array, _encode_str_array
    values = [meta.file_name, meta.file_size, meta.row_count, _row_of(meta.min_key), _row_of(meta.max_key),
              _stats_row(meta.key_stats), _stats_row(meta.value_stats), meta.min_sequence_number,
              meta.max_sequence_number, meta.schema_id, meta.level, _encode_str_array(meta.extra_files),
              meta.creation_time.get_millisecond() if meta.creation_time is not None else None,
              meta.delete_row_count, meta.embedded_index, meta.file_source,
              _encode_str_array(meta.value_stats_cols) if meta.value_stats_cols is not None else None,
              meta.external_path, meta.first_row_id,
              _encode_str_array(meta.write_cols) if meta.write_cols is not None else None,
              _encode_long_array(meta.write_cols_sequences) if meta.write_cols_sequences is not None else None]
    return row_bytes(values, _DFM_FIELDS)[4:]


def with_encoding(staged: StagedFile, layout: TableLayout) -> StagedFile:
    """`staged` carrying its encoding (tasks: made in parallel, not on the committing driver),
    its key and stats rows in binary form, which the commit's manifest then takes as they are."""
    meta = staged.meta
    staged.meta = dataclasses.replace(
        meta, min_key=EncodedRow.of(meta.min_key), max_key=EncodedRow.of(meta.max_key),
        key_stats=_encoded_stats(meta.key_stats), value_stats=_encoded_stats(meta.value_stats))
    staged.encoded = (encoding_key(staged), encode_message(staged, layout.partition_fields))
    return staged


class EncodedRow(BinaryRow, GenericRow):
    """A row with its binary form made once (`rowbytes`): pypaimon's serializers take a
    BinaryRow's bytes as they are, where they would serialize a GenericRow again for the task's
    commit message and again for the commit's manifest (six rows per file of a keyed write).
    It reads and compares as the GenericRow it was made from."""

    def __init__(self, values: list, fields: list, data: bytes):
        BinaryRow.__init__(self, data, fields)
        self.values = values

    @classmethod
    def of(cls, row):
        if row is None or isinstance(row, BinaryRow):
            return row
        return cls(row.values, row.fields, row_bytes(row.values, row.fields, row.row_kind.value))

    def get_field(self, pos: int):
        return GenericRow.get_field(self, pos)

    def __reduce__(self):  # pickled into and out of tasks: the bytes once, not twice
        return EncodedRow, (self.values, self.fields, self.data)


def _encoded_stats(stats):
    if stats is None:
        return None
    return dataclasses.replace(stats, min_values=EncodedRow.of(stats.min_values),
                               max_values=EncodedRow.of(stats.max_values))


def new_data_file_name() -> str:
    return f"data-{uuid.uuid4()}-0.parquet"


_PER_SECOND = {"milliseconds": 1_000, "microseconds": 1_000_000, "nanoseconds": 1_000_000_000}
_CONVERTED_PER_SECOND = {"TIMESTAMP_MILLIS": 1_000, "TIMESTAMP_MICROS": 1_000_000}


def _timestamp_per_second(column) -> int | None:
    """Units per second of a Parquet timestamp column, from the file's own schema (None: unknown).

    The footer is the only authority: the table's type does not tell. pypaimon maps
    TIMESTAMP(0) to Arrow seconds, which Parquet cannot store, so its values lie in the file
    as milliseconds (as Paimon's Java writer stores precision 0-3); INT96 has no unit.
    """
    if column is None or column.physical_type != "INT64":
        return None
    logical = column.logical_type
    if logical is not None and logical.type == "TIMESTAMP":
        unit = json.loads(logical.to_json()).get("timeUnit")
        return _PER_SECOND.get(unit)
    return _CONVERTED_PER_SECOND.get(column.converted_type)


def _from_raw(raw, arrow_type: pa.DataType, column=None):
    """Footer statistic (physical value) → the Python value pypaimon stores for the type.

    `column`: the Parquet column (its unit decides how a timestamp's raw value reads).
    None when the value cannot be stated exactly: the column then carries no stats.
    """
    if raw is None:
        return None
    if pa.types.is_decimal(arrow_type):
        unscaled = int.from_bytes(raw, "big", signed=True) if isinstance(raw, bytes) else int(raw)
        return Decimal(unscaled).scaleb(-arrow_type.scale)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return bytes(raw)
    if pa.types.is_date32(arrow_type):
        return _EPOCH_DAY + dt.timedelta(days=int(raw))
    if pa.types.is_timestamp(arrow_type):
        per_second = _timestamp_per_second(column)
        if per_second is None or isinstance(raw, bytes):
            return None
        micros, rest = divmod(int(raw) * 1_000_000, per_second)
        if rest:
            # Sub-microsecond digits: a datetime (what pypaimon stores) cannot hold them, and a
            # max rounded down would let a reader skip rows it must return.
            return None
        try:
            return _EPOCH + dt.timedelta(microseconds=micros)  # naive UTC, as pypaimon stores both kinds
        except OverflowError:  # beyond datetime's years 1..9999
            return None
    if pa.types.is_boolean(arrow_type):
        return bool(raw)
    if pa.types.is_integer(arrow_type):
        return int(raw)
    return None


def _prunable(arrow_type: pa.DataType) -> bool:
    # Floats may hold NaN, which Parquet leaves out of min/max: a `!=` filter could
    # then skip rows it must return. Nested types have no single min/max.
    return not (pa.types.is_floating(arrow_type) or pa.types.is_nested(arrow_type))


def column_stats(metadata: pq.FileMetaData, fields: list[DataField], arrow_types: dict[str, pa.DataType]):
    leaf_index = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    stats = {}
    for field in fields:
        index = leaf_index.get(field.name)
        arrow_type = arrow_types[field.name]
        if index is None or not _prunable(arrow_type):
            continue
        leaf = metadata.schema.column(index)
        lo = hi = None
        nulls = 0
        complete = True
        for rg in range(metadata.num_row_groups):
            column = metadata.row_group(rg).column(index)
            st = column.statistics
            if st is None or not st.has_null_count:
                complete = False
                break
            nulls += st.null_count
            if st.has_min_max:
                a, b = _from_raw(st.min_raw, arrow_type, leaf), _from_raw(st.max_raw, arrow_type, leaf)
                if a is None or b is None:
                    complete = False
                    break
                lo = a if lo is None or a < lo else lo
                hi = b if hi is None or b > hi else hi
            elif st.null_count != metadata.row_group(rg).num_rows:
                complete = False  # values present but no min/max (e.g. long strings)
                break
        if complete:
            stats[field.name] = (lo, hi, nulls)
    return stats


def describe_parquet(path: str, layout: TableLayout, file_io, partition: tuple | None = None,
                     metadata: pq.FileMetaData | None = None, file_size: int | None = None) -> StagedFile:
    """Build the committable for one Parquet file of `table` lying at `path` (not yet placed).

    For a partitioned table the partition values are read from the file itself
    (its partition columns hold one value each), never from directory names.
    """
    if metadata is None:
        with file_io.new_input_stream(path) as stream:
            metadata = pq.read_metadata(stream)
    if file_size is None:
        file_size = file_io.get_file_size(path)
    fields = list(layout.fields)
    arrow_types = {f.name: PyarrowFieldParser.from_paimon_type(f.type) for f in fields}
    stats = column_stats(metadata, fields, arrow_types)

    if partition is None:
        partition = _partition_of(path, layout.partition_keys, stats, metadata, file_io)

    stat_fields = [f for f in fields if f.name in stats]
    value_stats = SimpleStats(
        GenericRow([stats[f.name][0] for f in stat_fields], stat_fields),
        GenericRow([stats[f.name][1] for f in stat_fields], stat_fields),
        [stats[f.name][2] for f in stat_fields],
    )
    rows = metadata.num_rows
    meta = DataFileMeta.create(
        file_name=new_data_file_name(), file_size=file_size, row_count=rows,
        min_key=GenericRow([], []), max_key=GenericRow([], []),
        key_stats=SimpleStats.empty_stats(), value_stats=value_stats,
        min_sequence_number=0, max_sequence_number=max(rows - 1, 0),
        schema_id=layout.schema_id, level=0, extra_files=[],
        creation_time=Timestamp.now(), delete_row_count=0, file_source=0,
        value_stats_cols=None if len(stat_fields) == len(fields) else [f.name for f in stat_fields],
    )
    return StagedFile(partition=partition, bucket=_UNAWARE_BUCKET, meta=meta, staged_path=path,
                      schema=layout.pending_schema)


def _partition_of(path, keys, stats, metadata, file_io) -> tuple:
    if not keys:
        return ()
    values = []
    missing = []
    for key in keys:
        lo, hi, nulls = stats.get(key, (None, None, None))
        if nulls is not None and nulls == metadata.num_rows:
            values.append(None)
        elif lo is not None and lo == hi and nulls == 0:
            values.append(lo)
        else:
            values.append(None)
            missing.append(key)
    if missing:
        # Footer cannot tell (e.g. a float key): read the key columns themselves.
        with file_io.new_input_stream(path) as stream:
            columns = pq.read_table(stream, columns=list(keys))
        values = []
        for key in keys:
            distinct = columns.column(key).unique()
            if len(distinct) != 1:
                raise SchemaMismatchError(f"{path} holds {len(distinct)} values of partition column {key!r}; "
                                 "each data file must belong to one partition")
            values.append(distinct[0].as_py())
    return tuple(values)


def table_path_of(table, staged: StagedFile) -> str:
    return canonical_data_file_path(table, staged.partition, staged.bucket, staged.meta.file_name)


class PathsOf:
    """`table` as `table_path_of` reads it, its path factory made once: pypaimon makes one per
    call, twice a file (a keyed micro-batch places a file per bucket and task)."""

    def __init__(self, table):
        self._factory = table.path_factory()

    def path_factory(self):
        return self._factory


def _move_local(source: str, final: str) -> None:
    """Rename `source` to `final` (its directory made if missing); a source already gone whose
    final file exists was moved by an earlier attempt (a restore after a crash)."""
    try:
        os.rename(source, final)
    except FileNotFoundError:
        if os.path.exists(source):  # the final directory is missing
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.rename(source, final)
        elif not os.path.exists(final):
            raise


def place(table, files: list[StagedFile], threads: int = 8) -> None:
    """Move staged files to their table paths (idempotent: a file already moved is fine)."""
    file_io = table.file_io
    # A local table: one rename per file, not the file IO's five existence checks around it (a
    # keyed micro-batch moves a file per bucket and task: ~0.6 ms each through the file IO).
    local = storage.is_local(table.table_path)
    remote = not local and getattr(file_io, "filesystem", None) is not None
    paths = PathsOf(table)

    def move(staged: StagedFile) -> None:
        if staged.staged_path is None:
            return
        final = table_path_of(paths, staged)
        if remote:
            # An object store has no directories to make and no rename: one COPY and one
            # DELETE, without the existence checks around them (a HEAD and a LIST each).
            try:
                file_io.filesystem.move(file_io.to_filesystem_path(staged.staged_path),
                                        file_io.to_filesystem_path(final))
            except OSError:  # pyarrow's S3 reports a missing source as a plain OSError (NO_SUCH_KEY)
                if file_io.exists(staged.staged_path) or not file_io.exists(final):
                    raise
                # moved by an earlier attempt of this commit (a restore after a crash)
            return
        if local and storage.is_local(staged.staged_path):
            _move_local(storage.local_path(staged.staged_path), storage.local_path(final))
            return
        if file_io.exists(staged.staged_path):
            parent = final.rsplit("/", 1)[0]
            file_io.check_or_mkdirs(parent)
            if not file_io.rename(staged.staged_path, final):
                raise OSError(f"could not move {staged.staged_path} to {final}")
        elif not file_io.exists(final):
            raise FileNotFoundError(staged.staged_path)

    if len(files) <= 1 or not remote:  # a local rename takes microseconds: threads cost more
        for f in files:
            move(f)
    else:
        with ThreadPoolExecutor(min(threads, len(files))) as pool:
            list(pool.map(move, files))
