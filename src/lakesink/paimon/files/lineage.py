"""Row lineage of row-tracking tables (`row-tracking.enabled`): each row's `_ROW_ID` and
`_SEQUENCE_NUMBER`, and the layout that keeps them when a file is rewritten.

Paimon gives a row of a row-tracking table a stable `_ROW_ID`: a new file gets a range of ids
at commit (its `first_row_id`; the snapshot's `nextRowId` is the next free one), and the row at
position `i` of the file has `first_row_id + i`, unless the file stores `_ROW_ID` itself (Paimon
reads a stored value first). `_SEQUENCE_NUMBER` is the snapshot that last wrote the row: a stored
value, else the file's `max_sequence_number`.

pypaimon 2.1 reads only `first_row_id + position` (a stored `_ROW_ID` is ignored, a file without
`first_row_id` reads as null ids), so lakesink rewrites lineage in the one layout every reader
agrees on: a rewritten file holds one run of consecutive ids in id order, `first_row_id` is its
first id, and it also stores both columns, as Paimon's own compaction does, so per-row sequence
numbers survive and Paimon's Java readers (which read stored values first, by name) read the same
ids. `write_cols` stays unset: Paimon lists the two columns there, but paimon-rust 0.4 takes such
a list for a data-evolution file and fails on `_ROW_ID`, and no reader needs it to find them.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

ROW_ID = "_ROW_ID"
SEQUENCE_NUMBER = "_SEQUENCE_NUMBER"
COLUMNS = (ROW_ID, SEQUENCE_NUMBER)
_APPEND, _COMPACT = 0, 1  # DataFileMeta.file_source


def tracks_rows(table_options) -> bool:
    """`row-tracking.enabled`: every row has a stable `_ROW_ID`."""
    return str((table_options or {}).get("row-tracking.enabled", "false")).strip().lower() == "true"


def lineage_fields() -> list[pa.Field]:
    return [pa.field(ROW_ID, pa.int64()), pa.field(SEQUENCE_NUMBER, pa.int64())]


def with_lineage(data: pa.Table, first_row_id: int | None, max_sequence_number: int) -> pa.Table:
    """`data` (one file's rows, in file order, perhaps with stored lineage columns) with its rows'
    `_ROW_ID` and `_SEQUENCE_NUMBER` as Paimon reads them: the stored value, else
    `first_row_id + position` and `max_sequence_number`."""
    rows = data.num_rows
    ids = data.column(ROW_ID) if ROW_ID in data.column_names else pa.nulls(rows, pa.int64())
    seqs = data.column(SEQUENCE_NUMBER) if SEQUENCE_NUMBER in data.column_names else pa.nulls(rows, pa.int64())
    if ids.null_count:
        if first_row_id is None:
            raise ValueError("a row-tracking file without first_row_id and without stored _ROW_IDs")
        ids = pc.coalesce(ids, pa.array(range(first_row_id, first_row_id + rows), pa.int64()))
    seqs = pc.fill_null(seqs.cast(pa.int64()), pa.scalar(max_sequence_number, pa.int64()))
    data = data.drop_columns([c for c in COLUMNS if c in data.column_names])
    return data.append_column(lineage_fields()[0], ids.cast(pa.int64())).append_column(lineage_fields()[1], seqs)


def adjacent(files) -> bool:
    """Whether the files (StagedFile or DataFileMeta), in this order, are one run of ids."""
    metas = [getattr(f, "meta", f) for f in files]
    if any(m.first_row_id is None for m in metas):
        return False
    return all(b.first_row_id == a.first_row_id + a.row_count for a, b in zip(metas, metas[1:]))


def ids_of(meta) -> tuple[int, int] | None:
    """(first id, id after the last) of a file, None if it has no `first_row_id`."""
    return None if meta.first_row_id is None else (meta.first_row_id, meta.first_row_id + meta.row_count)


def describe(meta, ids: pa.Array, seqs: pa.Array, compaction: bool):
    """`meta` of a rewritten file whose stored lineage is `ids` / `seqs`, in the lineage layout:
    `first_row_id` set, sequence range from the stored values.
    Refuses (ValueError) a file whose ids are not one run in order: readers would misplace them.

    A null sequence number marks an updated row: the commit gives it its snapshot (Paimon's
    rule: `max_sequence_number` 0 is set to the snapshot id, the stored null reads as it)."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    rows = len(ids)
    if rows != meta.row_count or ids.null_count:
        raise ValueError(f"{meta.file_name}: {ids.null_count} of {rows} rows have no _ROW_ID")
    first = ids[0].as_py() if rows else None
    if rows and not pc.all(pc.equal(ids, pa.array(range(first, first + rows), pa.int64()))).as_py():
        raise ValueError(f"{meta.file_name}: its _ROW_IDs are not one run of consecutive ids in order")
    present = pc.drop_null(seqs)
    low = pc.min(present).as_py() if len(present) else 0
    high = 0 if seqs.null_count else (pc.max(present).as_py() if len(present) else 0)
    return dataclasses.replace(
        meta, first_row_id=first, min_sequence_number=int(low or 0), max_sequence_number=int(high or 0),
        file_source=_COMPACT if compaction else _APPEND)


def read_stored(file_io, path: str) -> tuple[pa.Array, pa.Array] | None:
    """The stored `_ROW_ID` and `_SEQUENCE_NUMBER` of a Parquet file; None if it stores no
    `_ROW_ID` or only nulls (rows new to the table: the commit gives them ids)."""
    import pyarrow.parquet as pq

    with file_io.new_input_stream(path) as stream:
        parquet = pq.ParquetFile(stream)
        names = set(parquet.schema_arrow.names)
        if ROW_ID not in names:
            return None
        data = parquet.read(columns=[c for c in COLUMNS if c in names])
    ids = data.column(ROW_ID).combine_chunks()
    if ids.null_count == len(ids):
        return None
    seqs = (data.column(SEQUENCE_NUMBER).combine_chunks() if SEQUENCE_NUMBER in data.column_names
            else pa.nulls(len(ids), pa.int64()))
    return ids, seqs


def describe_rewritten(files, file_io) -> list:
    """Staged files of a row-level change (StagedFile), each holding rows that keep their ids
    (one run, in the lineage layout: `describe`) or only new rows (left to the commit's ids)."""
    for staged in files:
        stored = read_stored(file_io, staged.staged_path)
        if stored is not None:
            staged.meta = describe(staged.meta, *stored, compaction=False)
    return files
