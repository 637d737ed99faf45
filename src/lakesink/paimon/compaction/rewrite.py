"""Rewriting small files into one: the unit of work of the aggregator and of compaction jobs.

A `RewriteTask` copies the rows of some files of one partition and bucket, in
order, into one new Parquet file and describes it. Tasks are picklable, so an
engine can run them on its executors: a `Rewriter` runs a list of them
somewhere (the engine binding passes one in); `rewrite_on_driver` uses threads.
A task writes its file into the compaction's staging directory, or, given an
`InPlace`, straight to its table path (`paimon.compaction.outputs`). In a row-tracking table
the inputs are one run of row ids and the new file keeps every row's lineage
(`paimon.files.lineage`). In a table with deletion vectors the rows an input's vector marks
are left out (`paimon.files.deletion_vectors`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.parquet as pq

from ... import storage
from ...protocol import crashpoints
from ..table import parquet_layout
from .outputs import InPlace, placed
from ..files import deletion_vectors, lineage
from ..files.datafiles import StagedFile, TableLayout, describe_parquet

EXECUTOR_REWRITE_BYTES = 256 * 1024 * 1024  # from this volume on, rewrite distributed (an engine's executors)


@dataclass(frozen=True)
class RewriteTask:
    """Rewrite some files of one partition and bucket as one file. Picklable (Spark tasks)."""

    inputs: tuple          # paths of the files, oldest first
    partition: tuple
    bucket: int
    output: str | None     # staging path of the new file (None: written in place)
    layout: TableLayout
    compression: str = "snappy"
    fs_options: dict | None = None
    in_place: InPlace | None = None  # write the new file at its table path, named in an intent first
    # Row-tracking tables: (first_row_id, max_sequence_number) of each input, whose ids follow each
    # other; the new file stores every row's `_ROW_ID` and `_SEQUENCE_NUMBER`. None: no lineage.
    lineage: tuple | None = None
    # Tables with deletion vectors: per input, where its vector lies (`Vectors.deletions`), or None.
    deletions: tuple | None = None


def rewrite(task: RewriteTask) -> StagedFile:
    """Copy the rows of `task.inputs`, in order, into one new Parquet file and describe it."""
    file_io = storage.file_io(task.output or task.in_place.staging_dir, task.fs_options)
    name = None
    if task.in_place is not None:
        path, name = task.in_place.open(file_io, task.in_place.intent(file_io, "rewrite"), task.partition,
                                        task.bucket)
        stream = storage.new_output(file_io, path)
    else:
        path = task.output
        stream = file_io.new_output_stream(path)
    schema = task.layout.arrow_schema()
    if task.lineage is not None:
        schema = pa.schema([*schema, *lineage.lineage_fields()])
    ids, seqs = [], []
    try:
        # Laid out as Paimon's Java writer does, so that every Paimon reader accepts it.
        writer = pq.ParquetWriter(stream, schema, compression=task.compression,
                                  **parquet_layout.writer_options(schema))
        try:
            for i, path_in in enumerate(task.inputs):
                with file_io.new_input_stream(path_in) as source:
                    data = pq.ParquetFile(source).read()
                if task.deletions is not None and task.deletions[i] is not None:
                    data = deletion_vectors.drop_marked(data, deletion_vectors.read_vector(file_io,
                                                                                            task.deletions[i]))
                if task.lineage is not None:
                    data = lineage.with_lineage(data, *task.lineage[i])
                    ids.append(data.column(lineage.ROW_ID))
                    seqs.append(data.column(lineage.SEQUENCE_NUMBER))
                data = data.select(schema.names)
                writer.write_table(data if data.schema.equals(schema, check_metadata=False) else data.cast(schema))
                if i == 0:
                    crashpoints.reached("mid-rewrite")
        finally:
            writer.close()
        size = stream.tell()
    except BaseException:
        if name is not None:  # in the table's directories: do not leave it to a sweep
            stream.close()
            file_io.delete_quietly(path)
        raise
    finally:
        stream.close()
    if name is None:
        staged = describe_parquet(path, task.layout, file_io, partition=task.partition)
        return _with_lineage(replace(staged, bucket=task.bucket), task, ids, seqs)
    # Described from the footer just written: no read back from the store.
    metadata = getattr(getattr(writer, "writer", None), "metadata", None)
    staged = describe_parquet(path, task.layout, file_io, partition=task.partition, metadata=metadata,
                              file_size=size if metadata is not None else None)
    return placed(_with_lineage(replace(staged, bucket=task.bucket), task, ids, seqs), name)


def _with_lineage(staged: StagedFile, task: RewriteTask, ids: list, seqs: list) -> StagedFile:
    if task.lineage is None:
        return staged
    staged.meta = lineage.describe(staged.meta, pa.chunked_array(ids, pa.int64()).combine_chunks(),
                                   pa.chunked_array(seqs, pa.int64()).combine_chunks(), compaction=True)
    return staged


def run_task(task):
    """Run one picklable task: a `RewriteTask` (→ one StagedFile) or any task with a `run()`
    method, e.g. `lsm.KeyedCompactTask` (→ the list of files it wrote)."""
    return task.run() if hasattr(task, "run") else rewrite(task)


# Runs tasks somewhere (threads here, an engine's executors, ...) and returns their results in
# order (`run_task`): the engine binding passes one in; `rewrite_on_driver` is the default.
Rewriter = Callable[[Sequence], list]


def rewrite_on_driver(tasks: Sequence, threads: int = 4) -> list:
    if len(tasks) <= 1:
        return [run_task(t) for t in tasks]
    with ThreadPoolExecutor(min(threads, len(tasks))) as pool:
        return list(pool.map(run_task, tasks))
