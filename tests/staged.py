"""Committing small Parquet files through lakesink's commit core, without Spark.

What the engines do, minus the engine: write Parquet into the table's staging
directory with pyarrow, describe each file (`describe_parquet`), and commit the
`StagedFile`s with a `Committer` over a `PaimonTarget`. Also reading tables
back with pypaimon directly, for local and S3 paths alike.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from lakesink.paimon import PaimonTarget, StagedFile, TableLayout, TableSpec, describe_parquet
from lakesink.protocol import Committer

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("writer", pa.string())])
PARTITION_KEYS = ["part"]


def new_target(path: str, fs_options: dict | None = None) -> PaimonTarget:
    spec = TableSpec(SCHEMA, PARTITION_KEYS, [], {"bucket": "-1"})
    target = PaimonTarget(path, create=spec, fs_options=fs_options)
    # No background expiry: these tests count snapshots, and stop their S3 server
    # right after the last commit.
    target.maintenance = False
    return target


def stage(target: PaimonTarget, ids, part: str, writer: str) -> list[StagedFile]:
    """One Parquet file of rows `ids` in partition `part`, staged and described."""
    rows = pa.table({"id": pa.array(list(ids), pa.int64()), "part": [part] * len(ids),
                     "writer": [writer] * len(ids)}, schema=SCHEMA)
    path = f"{target.lakesink_dir()}/staging/{uuid.uuid4().hex}.parquet"
    file_io = target.file_io
    with file_io.new_output_stream(path) as out:
        pq.write_table(rows, out)
    layout = TableLayout.for_new_table(SCHEMA, PARTITION_KEYS)
    return [describe_parquet(path, layout, file_io)]


def commit(target: PaimonTarget, user: str, identifier: int, files, overwrite=None):
    return Committer(target, user).commit(identifier, files, overwrite)


def read_back(path: str, fs_options: dict | None = None) -> pa.Table:
    """The table's rows as pypaimon itself reads them."""
    from pypaimon.table.file_store_table import FileStoreTable

    table = FileStoreTable.from_path(path, fs_options)
    builder = table.new_read_builder()
    return builder.new_read().to_arrow(builder.new_scan().plan().splits())


def snapshot_list(path: str, fs_options: dict | None = None):
    from pypaimon.table.file_store_table import FileStoreTable

    return FileStoreTable.from_path(path, fs_options).snapshot_manager().list_snapshots()
