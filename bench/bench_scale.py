"""The driver's work as a job grows: 1, 10 and 100 simulated tasks × 1,000 files each.

No Spark: what the driver does with what tasks hand it is the part that grows with
the number of files, tasks and partitions, so it is measured alone. Each task's
committables are built as a task builds them (`describe_parquet` of a real Parquet
file, then one committable per file with its own name and statistics), in an
append table partitioned over `partitions` values. The files themselves are not
written: the committables say they already sit at their table paths (as the in-place
writes on object stores leave them), so only metadata work is timed:

* committables: Python memory held on the driver (tracemalloc peak while building);
* pending state: encoding every committable for the durable pending document
  (pypaimon's commit-message serializer), its time and size;
* commit: the one snapshot (manifest files written, manifest list, snapshot), its time
  and the manifest bytes it wrote;
* the next commit of one file on top (does a huge commit slow later ones?);
* planning a full scan and a scan pruned to one partition (pypaimon, manifests only).

Figures are single runs per size (the sizes differ by 10×, far above the noise).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def _template(root: str, layout, file_io, partition: str):
    from lakesink.paimon import describe_parquet

    path = f"{root}/template-{partition}.parquet"
    ids = list(range(1000))
    pq.write_table(pa.table({"p": [partition] * 1000, "id": ids, "name": [f"n{i}" for i in ids],
                             "amount": [i * 0.5 for i in ids]}, schema=SCHEMA), path)
    return describe_parquet(path, layout, file_io)


def _committables(template, tasks: int, files_per_task: int, partitions: int):
    """What `tasks` tasks hand the driver: one committable per file, spread over the partitions."""
    from pypaimon.table.row.generic_row import GenericRow

    from lakesink.paimon.files.datafiles import new_data_file_name

    fields = [f for f in template.meta.value_stats.min_values.fields]
    out = []
    for n in range(tasks * files_per_task):
        partition = f"p{n % partitions:05d}"
        stats = dataclasses.replace(
            template.meta.value_stats,
            min_values=GenericRow([partition, n * 1000, f"n{n}", 0.0], fields),
            max_values=GenericRow([partition, n * 1000 + 999, f"n{n}z", 499.5], fields))
        meta = dataclasses.replace(template.meta, file_name=new_data_file_name(), value_stats=stats)
        out.append(dataclasses.replace(template, partition=(partition,), meta=meta, staged_path=None))
    return out


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _plan(path: str, partition: str | None) -> tuple[float, int]:
    from pypaimon.table.file_store_table import FileStoreTable

    start = time.perf_counter()
    table = FileStoreTable.from_path(path)
    builder = table.new_read_builder()
    if partition is not None:
        predicate = builder.new_predicate_builder().equal("p", partition)
        builder = builder.with_filter(predicate)
    splits = builder.new_scan().plan().splits()
    return time.perf_counter() - start, sum(len(s.files) for s in splits)


def one(root: str, tasks: int, files_per_task: int, partitions: int) -> dict:
    from lakesink.paimon import PaimonTarget, TableLayout, TableSpec
    from lakesink.protocol.committer import Committer

    path = f"{root}/wh/db.db/t_{tasks}_{partitions}"
    target = PaimonTarget(path, TableSpec(SCHEMA, ["p"], [], {"bucket": "-1"}))
    target.table_or_create()
    layout = TableLayout.for_new_table(SCHEMA, ["p"])
    template = _template(root, layout, target.file_io, "p00000")

    tracemalloc.start()
    start = time.perf_counter()
    files = _committables(template, tasks, files_per_task, min(partitions, tasks * files_per_task))
    build_s = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    start = time.perf_counter()
    encoded = [target.encode(f) for f in files]
    document = json.dumps(encoded).encode()
    encode_s = time.perf_counter() - start

    committer = Committer(target, "bench-scale")
    before = _dir_bytes(f"{path}/manifest") if os.path.isdir(f"{path}/manifest") else 0
    start = time.perf_counter()
    committer.commit(1, files)
    commit_s = time.perf_counter() - start
    manifest_bytes = _dir_bytes(f"{path}/manifest") - before

    one_more = _committables(template, 1, 1, 1)
    start = time.perf_counter()
    committer.commit(2, one_more)
    next_s = time.perf_counter() - start

    full_s, full_files = _plan(path, None)
    pruned_s, pruned_files = _plan(path, "p00001" if partitions > 1 else "p00000")
    assert full_files == len(files) + 1, (full_files, len(files))
    return {"tasks": tasks, "files": len(files), "partitions": min(partitions, len(files)),
            "committables_mb": peak / 2**20, "committables_s": build_s,
            "pending_doc_mb": len(document) / 2**20, "encode_s": encode_s,
            "commit_s": commit_s, "manifest_mb": manifest_bytes / 2**20, "next_commit_s": next_s,
            "plan_full_s": full_s, "plan_one_partition_s": pruned_s, "pruned_files": pruned_files}


def run(task_counts=(1, 10, 100), files_per_task: int = 1_000, partitions=(100, 10_000)) -> dict:
    root = tempfile.mkdtemp(prefix="lakesink-bench-scale-")
    rows = []
    try:
        for parts in partitions:
            for tasks in task_counts:
                r = one(root, tasks, files_per_task, parts)
                rows.append(r)
                print(f"  {r['tasks']:>4} tasks {r['files']:>7,} files {r['partitions']:>6,} partitions | "
                      f"committables {r['committables_mb']:7.1f} MB | pending doc {r['pending_doc_mb']:7.1f} MB "
                      f"({r['encode_s']:5.2f} s) | commit {r['commit_s']:6.2f} s, manifests "
                      f"{r['manifest_mb']:6.1f} MB | next 1-file commit {r['next_commit_s']:5.2f} s | plan full "
                      f"{r['plan_full_s']:5.2f} s, one partition {r['plan_one_partition_s']:5.2f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"rows": rows}
