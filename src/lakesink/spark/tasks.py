"""What a Spark task of the Spark-native path does: Arrow batches → Parquet data files.

Files go into the job's staging directory (the commit moves them into the table), or, when
the spec carries the table's path factory (`write.in-place`, the default on object stores),
straight to their table paths, each named in the attempt's intent first (paimon.commit.intents)."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from .. import storage
from ..errors import JobAbortedError, NullValueError
from ..paimon.commit import intents
from ..paimon.table import parquet_layout
from ..paimon.files.datafiles import StagedFile, TableLayout, describe_parquet, new_data_file_name, with_encoding
from .arrow import conform, split_by_partition

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
UNAWARE_BUCKET = 0  # unaware-bucket append tables keep all files in bucket-0
# A batch job's driver writes this into the job's staging directory; the job's abort removes the
# directory, marker included. A task still running after the abort (Spark aborts as soon as the
# job fails, while its other tasks are being killed) finds it gone and removes what it wrote.
JOB_MARKER = "_lakesink_job"
# Spark hands Python ~10k-row Arrow batches; writing each as its own row group
# halves encoding speed and bloats footers, so rows are buffered into big groups.
ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 64 * 1024 * 1024


@dataclass
class TaskSpec:
    """Everything a task needs; pickled into every task by Spark."""

    staging_dir: str
    layout: TableLayout
    compression: str = "snappy"
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    fs_options: dict | None = None  # to reach object stores (fs.s3.endpoint, ...)
    # Batch jobs: the driver creates the staging directory and abort removes it, so a
    # task still running after an abort (a zombie of a cancelled job) must not recreate it.
    create_dir: bool = True
    # In place (paimon.commit.intents): the table's path factory; files are written at their table
    # paths and named in the attempt's intent first. None: files are staged and moved at commit.
    paths: object = None


@dataclass
class _OpenFile:
    path: str
    writer: pq.ParquetWriter
    partition: tuple
    bytes: int = 0  # uncompressed bytes written or buffered, for rolling at the target size
    buffer: list = field(default_factory=list)
    buffered_rows: int = 0
    buffered_bytes: int = 0
    name: str | None = None  # written in place: its data file name (else staged, named at commit)

    def flush(self) -> None:
        if self.buffer:
            self.writer.write_table(pa.concat_tables(self.buffer))
            self.buffer, self.buffered_rows, self.buffered_bytes = [], 0, 0


def check_not_null(data: pa.Table, columns, primary_keys=()) -> None:
    """A NullValueError for the first of `columns` (NOT NULL) holding a null in `data`."""
    for name in columns:
        if name in data.column_names and data.column(name).null_count:
            raise NullValueError.of(name, name in primary_keys)


@dataclass
class StagingWriter:
    """Writes one task's rows into per-partition Parquet files, rolling at the target size."""

    spec: TaskSpec
    prefix: str
    _open: dict = field(default_factory=dict)
    _done: list = field(default_factory=list)

    def __post_init__(self):
        self.schema = self.spec.layout.arrow_schema()
        self.file_io = storage.file_io(self.spec.staging_dir, self.spec.fs_options)
        self.intent = (intents.Intent(self.file_io, self.spec.staging_dir, self.prefix)
                       if self.spec.paths is not None else None)
        if self.spec.create_dir:
            if self.intent is None or storage.is_local(self.spec.staging_dir):
                self.file_io.check_or_mkdirs(self.spec.staging_dir)  # object stores need no directories
        else:
            check_job_alive(self.file_io, self.spec.staging_dir)

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        data = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if data.num_rows == 0:
            return
        check_not_null(data, self.spec.layout.not_null)
        data = conform(data, self.schema)
        for partition, rows in split_by_partition(data, list(self.spec.layout.partition_keys)):
            current = self._open.get(partition)
            if current is None:
                current = self._new_file(partition)
            current.buffer.append(rows)
            current.buffered_rows += rows.num_rows
            current.buffered_bytes += rows.nbytes
            current.bytes += rows.nbytes
            if current.buffered_rows >= ROW_GROUP_ROWS or current.buffered_bytes >= ROW_GROUP_BYTES:
                current.flush()
            if current.bytes >= self.spec.target_file_size:
                self._close(partition)

    def _new_file(self, partition: tuple) -> _OpenFile:
        name = None
        if self.intent is not None:
            name = new_data_file_name()
            path = intents.data_file_path(self.spec.paths, partition, UNAWARE_BUCKET, name)
            self.intent.declare([path])  # before a byte of it exists: whoever cleans up finds it
        else:
            path = f"{self.spec.staging_dir}/{self.prefix}-{uuid.uuid4().hex}.parquet"
        if not self.spec.create_dir:
            check_job_alive(self.file_io, self.spec.staging_dir, written=self._intent_paths())
        stream = (storage.new_output(self.file_io, path) if self.intent is not None
                  else self.file_io.new_output_stream(path))
        # Laid out as Paimon's Java writer does, so that every Paimon reader accepts it.
        writer = pq.ParquetWriter(stream, self.schema, compression=self.spec.compression,
                                  **parquet_layout.writer_options(self.schema))
        opened = _OpenFile(path, writer, partition, name=name)
        opened.stream = stream
        self._open[partition] = opened
        return opened

    def _intent_paths(self) -> list[str]:
        return [self.intent.path] if self.intent is not None else []

    def _close(self, partition: tuple) -> None:
        opened = self._open.pop(partition)
        opened.flush()
        opened.writer.close()
        size = opened.stream.tell()
        opened.stream.close()
        metadata = getattr(getattr(opened.writer, "writer", None), "metadata", None)  # the footer written
        self._done.append((opened.path, opened.partition, opened.name, metadata, size))
        if not self.spec.create_dir:
            check_job_alive(self.file_io, self.spec.staging_dir,
                            written=[d[0] for d in self._done] + self._intent_paths())

    def finish(self) -> list[StagedFile]:
        for partition in list(self._open):
            self._close(partition)
        out = []
        for path, partition, name, metadata, size in self._done:
            # Described from the footer just written: no read of the file back from the store.
            staged = describe_parquet(path, self.spec.layout, self.file_io, partition=partition,
                                      metadata=metadata, file_size=size if metadata is not None else None)
            if name is not None:  # written in place: already at its table path, under this name
                staged.meta = dataclasses.replace(staged.meta, file_name=name)
                staged.staged_path = None
            out.append(with_encoding(staged, self.spec.layout))
        return out

    def abort(self) -> None:
        for opened in self._open.values():
            try:
                opened.writer.close()
                opened.stream.close()
            except Exception:
                pass
            self.file_io.delete_quietly(opened.path)
        for path, *_ in self._done:
            self.file_io.delete_quietly(path)
        for path in self._intent_paths():  # everything it named is gone
            self.file_io.delete_quietly(path)


def mark_job_staging(file_io, staging_dir: str) -> None:
    """The driver of a batch job: make its staging directory, with the job's marker."""
    file_io.check_or_mkdirs(staging_dir)
    stream = file_io.new_output_stream(f"{staging_dir}/{JOB_MARKER}")
    stream.close()


def check_job_alive(file_io, staging_dir: str, written=()) -> None:
    """A batch job's task: raise `JobAbortedError` once the job was aborted (its staging directory
    and marker removed), after removing the files it `written` (a write after the abort's removal
    recreates the directory, without the marker)."""
    if file_io.exists(f"{staging_dir}/{JOB_MARKER}"):
        return
    for path in written:
        file_io.delete_quietly(path)
    raise JobAbortedError(f"staging directory {staging_dir} is gone: the job was aborted")


def task_prefix() -> str:
    """partition-attempt of the running Spark task, to name its files."""
    try:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        if ctx is not None:
            return f"part{ctx.partitionId():05d}-attempt{ctx.taskAttemptId()}"
    except Exception:
        pass
    return f"task-{uuid.uuid4().hex[:8]}"
