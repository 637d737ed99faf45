"""Compaction of postpone-bucket tables (bucket=-2): postpone rows assigned to real buckets.

Writers put a postpone table's rows into each partition's postpone bucket (bucket -2,
`paimon.keyed.postpone`), which readers skip. This compaction takes every partition holding
postpone files or real buckets not fully compacted (Paimon's fixed-bucket batch writers put
level-0 files there) and gives it a bucket count, as Paimon's postpone compaction does:

* a partition with files in real buckets keeps their count (their entries' `totalBuckets`);
* else `postpone.default-bucket-num`;
* else one bucket per `postpone.target-row-num-per-bucket` postpone rows, or per
  `postpone.target-size-per-bucket` bytes of postpone files (default 1 gb), at least one.

Each postpone row goes to the bucket Paimon's bucket function gives its bucket key
(`paimon.files.keyhash`, as fixed-bucket writes compute it), and every real bucket of the
partition is fully compacted: its files and its new rows merged by the merge engine into one
sorted run at the highest level (`lsm.write_run`). The new rows take sequence numbers above
everything the bucket held, in version order: postpone files by the snapshot that added them, then
sequence numbers, creation time and name (`version_order`), rows of a file by sequence number,
then position. (Paimon orders the files of one postpone writer by creation time and leaves
files of different writers unordered; commit order is what a later write expects.) Postpone
files are Parquet (lakesink's) or Avro (Paimon's own postpone writers).

One `PostponeCompactTask` per partition (picklable: an engine runs it on its executors; it
holds the partition's rows in memory while it merges them); the
job commits every task's outputs and the files they replace — the postpone files and the
buckets' old files — as one COMPACT snapshot (`target.PaimonCompactionTarget`). The new
files' entries carry the partition's bucket count.

With `deletion-vectors.enabled` this compaction is the table's merge on write: writers add plain
postpone files (readers skip them), and the buckets it writes are one run at the highest level
without retractions, as such a table's readers need. Rows the vectors of the buckets' old files
mark (another engine's writers may have left some) are not read, and those vectors leave the
index with their files in the same snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ... import options as registry, storage
from ...errors import UnsupportedTableError
from ..files.datafiles import StagedFile, TableLayout
from ..files.keyhash import bucket_ids
from ..keyed.layout import SEQUENCE, KeyedSpec, kv_schema
from ..keyed.rules import POSTPONE_BUCKET
from ..keyed.lsm_policy import LsmOptions, age_order
from ..keyed.merge_engines import FILE_RANK, merge
from . import lsm
from .outputs import InPlace

_POSITION = "_lakesink_position"


@dataclass(frozen=True)
class PostponeCompactTask:
    """Assign one partition's postpone rows to its real buckets and compact those buckets."""

    partition: tuple
    postpone: tuple        # paths of the partition's postpone files, in version order
    # ((bucket, paths of its live files oldest first, first free sequence number, where each file's
    # deletion vector lies or None / () without vectors), ...)
    buckets: tuple
    total_buckets: int     # the partition's bucket count
    output_dir: str
    layout: TableLayout
    spec: KeyedSpec
    lsm: LsmOptions
    fs_options: dict | None = None
    in_place: InPlace | None = None
    input_bytes: int = 0
    input_rows: int = 0

    def run(self) -> list[StagedFile]:
        return compact_partition(self)


def compact_partition(task: PostponeCompactTask) -> list[StagedFile]:
    schema = kv_schema(task.layout, task.spec)
    rows = _postpone_rows(task, schema)
    buckets = np.asarray(bucket_ids(rows, list(task.spec.bucket_keys), task.layout.fields, task.total_buckets))
    existing = {bucket: (paths, base, deletions) for bucket, paths, base, deletions in task.buckets}
    outputs: list[StagedFile] = []
    # Every real bucket of the partition is rewritten (the plan replaces all its files: which
    # buckets get rows is known only here), the ones without new rows too.
    for bucket in sorted(set(buckets.tolist()) | set(existing)):
        paths, base, deletions = existing.get(bucket, ((), 0, ()))
        new = rows.filter(pa.array(buckets == bucket))
        # Above everything the bucket holds, in version order; newer than any of its files.
        new = new.set_column(new.schema.get_field_index(SEQUENCE), schema.field(SEQUENCE),
                             pa.array(np.arange(base, base + new.num_rows, dtype=np.int64)))
        new = new.append_column(FILE_RANK, pa.array(np.full(new.num_rows, len(paths), np.int32)))
        bucket_task = lsm.KeyedCompactTask(tuple(paths), task.input_bytes, task.input_rows, tuple(task.partition),
                                           bucket, task.output_dir, task.layout, task.spec, task.lsm,
                                           task.fs_options, in_place=task.in_place, deletions=deletions)
        old = lsm.read_bucket(bucket_task, schema) if paths else None
        data = pa.concat_tables([old, new]) if old is not None else new
        merged = merge(data, task.spec, task.lsm, drop_deletes=True).combine_chunks()
        outputs.extend(replace(f, total_buckets=task.total_buckets)
                       for f in lsm.write_run(bucket_task, schema, merged.select(schema.names).cast(schema)))
    return outputs


def _postpone_rows(task: PostponeCompactTask, schema: pa.Schema) -> pa.Table:
    """The rows of the partition's postpone files as `schema`, in version order."""
    file_io = storage.file_io(task.output_dir, task.fs_options)
    parts = []
    for path in task.postpone:
        with file_io.new_input_stream(path) as source:
            if path.endswith(".avro"):  # Paimon's own postpone writers write Avro
                part = _read_avro(source, schema)
            elif path.endswith(".parquet"):
                part = pq.ParquetFile(source).read(columns=schema.names).select(schema.names)
            else:
                raise UnsupportedTableError(
                    f"postpone file {path}: lakesink's compaction reads Parquet and Avro postpone files only; "
                    "compact this table with Paimon's own compaction.")
        if not part.schema.equals(schema, check_metadata=False):
            part = part.cast(schema)
        part = part.append_column(_POSITION, pa.array(np.arange(part.num_rows, dtype=np.int64)))
        part = part.take(pc.sort_indices(part, [(SEQUENCE, "ascending"), (_POSITION, "ascending")]))
        parts.append(part.drop_columns([_POSITION]))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _read_avro(source, schema: pa.Schema) -> pa.Table:
    """A key-value Avro file as `schema` (Paimon writes the same fields, by name)."""
    import io

    import fastavro
    records = list(fastavro.reader(io.BytesIO(source.read())))
    return pa.Table.from_pylist([{name: r.get(name) for name in schema.names} for r in records], schema=schema)


def version_order(files: Sequence[StagedFile], added: dict[str, int] | None = None) -> list[StagedFile]:
    """Postpone files oldest first: by the snapshot that added them (`added`, file name ->
    snapshot id: commit order, whoever wrote them; unknown: first), then sequence numbers (within
    one commit: a Paimon writer numbers its files up from 0, a lakesink format("paimon") write its
    tasks by partition id), then creation time, then name."""
    added = added or {}

    def created(f):
        return f.meta.creation_time.get_millisecond() if f.meta.creation_time is not None else 0
    return sorted(files, key=lambda f: (added.get(f.meta.file_name, 0), f.meta.min_sequence_number, created(f),
                                        f.meta.max_sequence_number, f.meta.file_name))


def added_in(table, files: Sequence[StagedFile]) -> dict[str, int]:
    """{file name: id of the snapshot that added it} for `files`, walking snapshots back from the
    latest through their delta manifests until all are found (or the oldest one is read)."""
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager

    wanted = {f.meta.file_name for f in files}
    found: dict[str, int] = {}
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    earliest = manager.try_get_earliest_snapshot()
    lists, manifests = ManifestListManager(table), ManifestFileManager(table)
    snapshot_id = latest.id if latest is not None else 0
    while wanted - found.keys() and snapshot_id >= (earliest.id if earliest is not None else 1):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            break
        if snapshot.commit_kind != "COMPACT":  # compactions never add postpone files
            for meta in lists.read_delta(snapshot):
                for entry in manifests.read(meta.file_name, file_size=meta.file_size):
                    name = entry.file.file_name
                    if entry.kind == 0 and entry.bucket == POSTPONE_BUCKET and name in wanted:
                        found.setdefault(name, snapshot_id)
        snapshot_id -= 1
    return found


def bucket_count(table, partition: tuple, real: Sequence[StagedFile], postpone: Sequence[StagedFile]) -> int:
    """The bucket count of `partition`: its real buckets' (all alike), else Paimon's choice for
    a new partition (module docstring)."""
    counts = {f.total_buckets for f in real if f.total_buckets is not None and f.total_buckets > 0}
    if len(counts) > 1:
        raise UnsupportedTableError(
            f"partition {partition} of {table.table_path} has files of different bucket counts {sorted(counts)}; "
            "lakesink's compaction cannot tell which buckets its postpone rows belong to.", table=table.table_path)
    if counts:
        return counts.pop()
    raw = registry.table_options_of(table)
    default = registry.table_value(raw, "postpone.default-bucket-num")
    if default is not None:
        return int(default)
    rows_per_bucket = registry.table_value(raw, "postpone.target-row-num-per-bucket")
    if rows_per_bucket is not None:
        total, per = sum(f.row_count for f in postpone), int(rows_per_bucket)
    else:
        total = sum(f.file_size for f in postpone)
        per = int(registry.table_value(raw, "postpone.target-size-per-bucket"))
    return max(1, -(-total // per))


def plan(table, files: Sequence[StagedFile], output_dir: str, layout: TableLayout, spec: KeyedSpec,
         lsm_options: LsmOptions, table_path_of, fs_options: dict | None = None,
         in_place: InPlace | None = None,
         deletions: dict | None = None) -> list[tuple[PostponeCompactTask, list[StagedFile]]]:
    """One task per partition holding postpone files, or real buckets not fully compacted (files
    below the highest level: e.g. written straight into real buckets by Paimon's batch writers;
    with `deletions`, a deletion-vector table's {file name: where its vector lies}, files with a
    vector too), with the files its commit replaces (the partition's postpone files, and every
    file of its real buckets: any of them may get rows, so the task rewrites them all)."""
    by_partition: dict[tuple, tuple[list, list]] = {}
    for f in files:
        postpone, real = by_partition.setdefault(tuple(f.partition), ([], []))
        (postpone if f.bucket == POSTPONE_BUCKET else real).append(f)
    out = []
    added = added_in(table, [f for postpone, _ in by_partition.values() for f in postpone])
    for partition, (postpone, real) in by_partition.items():
        if not postpone and lsm_options.fully_compacted(real) and not any(
                f.meta.file_name in (deletions or {}) for f in real):
            continue
        if any(f.meta.schema_id != layout.schema_id for f in postpone + real):
            raise UnsupportedTableError(
                f"partition {partition} of {table.table_path} holds files of an older schema; lakesink's postpone "
                "compaction reads files of the table's current schema only.", table=table.table_path)
        count = bucket_count(table, partition, real, postpone)
        ordered = version_order(postpone, added)
        buckets = {}
        for f in real:
            buckets.setdefault(f.bucket, []).append(f)
        entries = tuple((bucket, tuple(table_path_of(f) for f in age_order(group)),
                         max(f.meta.max_sequence_number for f in group) + 1,
                         tuple((deletions or {}).get(f.meta.file_name) for f in age_order(group)) if deletions else ())
                        for bucket, group in sorted(buckets.items()))
        replaced = ordered + real
        task = PostponeCompactTask(partition, tuple(table_path_of(f) for f in ordered), entries, count, output_dir,
                                   layout, spec, lsm_options, fs_options, in_place,
                                   sum(f.file_size for f in replaced), sum(f.row_count for f in replaced))
        out.append((task, replaced))
    return out
