"""The changelog of a table, snapshot by snapshot, for streaming reads (engine-neutral).

A stream of a primary-key table is its changelog: every row with its row kind
(`+I`, `-U`, `+U`, `-D`) in a first column `rowkind`, as Paimon's audit log and
Spark connector (`read.readChangeLog`) show it. Which files hold the changes of
a snapshot follows Paimon's streaming semantics:

* `changelog-producer` `none` (the default): the data files an APPEND snapshot
  added, read as they were written (level 0: the rows of that write with their
  row kinds; updates carry no `-U` before-image). COMPACT snapshots rewrite rows
  already delivered and are skipped; OVERWRITE snapshots as for append streams
  (`streaming-read-overwrite`).
* any other producer (`input`, `lookup`, `full-compaction`): the changelog files
  of every snapshot (its changelog manifest list), whatever its kind.

A snapshot's full contents (a stream starting `latest-full`) are the merged rows,
each `+I`; with a `lookup` changelog of the files above level 0, with a
`full-compaction` changelog of the highest level only (`full_state_levels`), so
that no change is delivered twice. Append tables stream the same way (each row `+I`).

Change files are read as stored (no merging), by column name: a column the file's
schema lacks is null; Parquet only (other formats are refused by name).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...errors import UnsupportedTableError
from ..keyed.layout import VALUE_KIND

ROW_KIND = "rowkind"
ROW_KIND_TEXT = ("+I", "-U", "+U", "-D")


@dataclass(frozen=True)
class ChangeFile:
    """One file of a snapshot's changes (picklable: Spark tasks read it)."""

    path: str
    snapshot: int


def producer(table) -> str:
    return str(table.table_schema.options.get("changelog-producer", "none")).strip().lower()


def full_state_levels(table):
    """Which levels a stream's first, full read takes (None: all), as Java's stream scan: with a
    `lookup` changelog no level-0 file (its changes come with the compaction after it), with a
    `full-compaction` changelog only the highest level (the last full compaction's state)."""
    kind = producer(table)
    if kind == "lookup":
        return lambda level: level > 0
    if kind == "full-compaction":
        from ..keyed.lsm_policy import LsmOptions
        top = LsmOptions.of_table(table).max_level
        return lambda level: level == top
    return None


def check_changelog_readable(table) -> None:
    """Refuse tables whose changes lakesink cannot read as stored, naming why."""
    if ROW_KIND in [f.name for f in table.fields]:
        raise UnsupportedTableError(
            f"{table.table_path} has a column named {ROW_KIND!r}, the name of the changelog's row-kind "
            "column; rename the column to stream the table's changelog.")
    fmt = (table.options.file_format() or "parquet").lower()
    if fmt != "parquet":
        raise UnsupportedTableError(f"{table.table_path} stores {fmt} files; lakesink streams the changelog of "
                                    "Parquet tables only. Read it in batch (lakesink.read).")
    if table.is_primary_key_table and table.total_buckets == -2:
        raise UnsupportedTableError(
            f"{table.table_path} has postpone buckets (bucket=-2): its writes wait unbucketed, invisible to "
            "readers, until a compaction assigns them to buckets, and lakesink's streaming read does not "
            "follow those compactions. Read it in batch (lakesink.read) after lakesink.compact.",
            table=table.table_path, option="bucket")
    if table.options.deletion_vectors_enabled() and producer(table) == "none":
        raise UnsupportedTableError(
            f"{table.table_path} has deletion-vectors.enabled=true and no changelog producer: its added "
            "files do not tell the changes. Set changelog-producer (e.g. lookup) on the table.")


def plan_changes(table, after: int, up_to: int, read_overwrite: bool) -> list[ChangeFile]:
    """The change files of snapshots after+1 .. up_to, in snapshot order."""
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager

    from ..files.datafiles import canonical_data_file_path
    from .scan import expired, streaming_reads

    check_changelog_readable(table)
    manager, lists = table.snapshot_manager(), ManifestListManager(table)
    entries_of = ManifestFileManager(table)
    with_changelog = producer(table) != "none"
    out = []
    for snapshot_id in range(after + 1, up_to + 1):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise expired(table, snapshot_id)
        if with_changelog:
            manifests = lists.read_changelog(snapshot)
        elif streaming_reads(table, snapshot, read_overwrite):
            manifests = lists.read_delta(snapshot)
        else:
            continue
        entries = entries_of.read_entries_parallel(manifests) if manifests else []
        # A write's files in the order of their buckets; rows inside a file in file order.
        for e in sorted(entries, key=lambda e: (tuple(map(str, e.partition.values)), e.bucket, e.file.file_name)):
            path = e.file.external_path or canonical_data_file_path(table, tuple(e.partition.values), e.bucket,
                                                                  e.file.file_name)
            out.append(ChangeFile(path, snapshot_id))
    return out


def read_change_file(table, change: ChangeFile, schema: pa.Schema) -> pa.Table:
    """The rows of one change file as `schema` (`rowkind` first, then table columns)."""
    with table.file_io.new_input_stream(change.path) as stream:
        data = pq.read_table(stream)
    return as_changes(data, schema)


def as_changes(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """Stored rows (key-value layout or plain) as changelog rows of `schema`."""
    n = data.num_rows
    if VALUE_KIND in data.column_names:
        kinds = pc.take(pa.array(ROW_KIND_TEXT), data.column(VALUE_KIND).cast(pa.int32()))
    else:
        kinds = pa.array(["+I"] * n, pa.string())
    columns = [kinds]
    for field in list(schema)[1:]:
        if field.name in data.column_names:
            column = data.column(field.name)
            columns.append(column.cast(field.type) if column.type != field.type else column)
        else:  # added after the file was written
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def with_insert_kind(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch of merged rows (a full snapshot) as `+I` changes of `schema`."""
    kinds = pa.array(["+I"] * batch.num_rows, pa.string())
    return pa.RecordBatch.from_arrays([kinds, *batch.columns], schema=schema)
