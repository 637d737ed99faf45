"""Commit cost over many small commits: does it stay flat?

lakesink's commit core (PaimonTarget + Committer, manifest merging, background
maintenance with `snapshot.num-retained.max=50`) against pypaimon's own stream
commit and, when installed (`pip install 'lakesink[bench]'`), delta-rs and
pyiceberg. Each commit appends one 100-row batch.

What is timed: for lakesink and pypaimon the commit call alone (the Parquet
file is written before); delta-rs and pyiceberg have no separate commit call,
so their whole append is timed. Peers whose cost grows with every commit get
`peer_commits` (default 500) commits so the run ends in minutes.

Figures: p50 commit ms of an early window (commits 100-200) and of the last
100 commits, their ratio (target for lakesink: <= 1.25), and the number of
metadata files (snapshot/ + manifest/, or the peers' metadata directories) at
the end and at most during the run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

ROWS = 100
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def _batch(i: int) -> pa.Table:
    ids = list(range(i * ROWS, (i + 1) * ROWS))
    return pa.table({"id": ids, "name": [f"n{x}" for x in ids], "amount": [x * 0.5 for x in ids]}, schema=SCHEMA)


def _count_files(*dirs: str) -> int:
    return sum(len(files) for d in dirs if os.path.isdir(d) for _, _, files in os.walk(d))


def _windows(n: int) -> tuple[range, range]:
    if n >= 400:
        return range(100, 200), range(n - 100, n)
    tenth = max(n // 10, 1)
    return range(tenth, 2 * tenth), range(n - tenth, n)


def _summary(times_ms: list[float], meta_counts: list[int]) -> dict:
    early, late = _windows(len(times_ms))
    p_early = statistics.median(times_ms[i] for i in early)
    p_late = statistics.median(times_ms[i] for i in late)
    return {"commits": len(times_ms), "early_window": [early.start, early.stop],
            "late_window": [late.start, late.stop], "p50_early_ms": round(p_early, 2),
            "p50_late_ms": round(p_late, 2), "ratio": round(p_late / p_early, 2),
            "metadata_files_end": meta_counts[-1] if meta_counts else None,
            "metadata_files_max": max(meta_counts) if meta_counts else None}


def bench_lakesink(root: str, commits: int) -> dict:
    from lakesink.paimon import PaimonTarget, TableLayout, TableSpec, describe_parquet
    from lakesink.paimon import maintenance
    from lakesink.protocol.committer import Committer

    path = f"{root}/wh/db.db/lakesink"
    options = {"bucket": "-1", "snapshot.num-retained.min": "10", "snapshot.num-retained.max": "50"}
    target = PaimonTarget(path, TableSpec(SCHEMA, [], [], options))
    committer = Committer(target, "bench-stream")
    layout = TableLayout.for_new_table(SCHEMA, [])
    staging = f"{root}/staging"
    os.makedirs(staging, exist_ok=True)
    times, meta = [], []
    for i in range(commits):
        staged = f"{staging}/b{i}.parquet"
        pq.write_table(_batch(i), staged)
        committable = describe_parquet(staged, layout, target.file_io)
        start = time.perf_counter()
        committer.commit(i, [committable])
        times.append((time.perf_counter() - start) * 1000)
        if i % 50 == 49:
            meta.append(_count_files(f"{path}/snapshot", f"{path}/manifest"))
    maintenance.maintenance_for(path).wait(60)
    meta.append(_count_files(f"{path}/snapshot", f"{path}/manifest"))
    return _summary(times, meta)


def bench_pypaimon(root: str, commits: int) -> dict:
    from pypaimon import CatalogFactory, Schema

    catalog = CatalogFactory.create({"warehouse": f"{root}/pp"})
    catalog.create_database("db", True)
    catalog.create_table("db.t", Schema.from_pyarrow_schema(SCHEMA, options={"bucket": "-1"}), False)
    table = catalog.get_table("db.t")
    builder = table.new_stream_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    path = f"{root}/pp/db.db/t"
    times, meta = [], []
    for i in range(commits):
        write.write_arrow(_batch(i))
        messages = write.prepare_commit(i)
        start = time.perf_counter()
        commit.commit(messages, i)
        times.append((time.perf_counter() - start) * 1000)
        if i % 50 == 49:
            meta.append(_count_files(f"{path}/snapshot", f"{path}/manifest"))
    write.close()
    commit.close()
    return _summary(times, meta)


def bench_deltalake(root: str, commits: int) -> dict:
    from deltalake import write_deltalake

    path = f"{root}/delta"
    times, meta = [], []
    for i in range(commits):
        batch = _batch(i)
        start = time.perf_counter()
        write_deltalake(path, batch, mode="append")
        times.append((time.perf_counter() - start) * 1000)
        if i % 50 == 49:
            meta.append(_count_files(f"{path}/_delta_log"))
    return _summary(times, meta)


def bench_pyiceberg(root: str, commits: int) -> dict:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("bench", uri=f"sqlite:///{root}/iceberg.db", warehouse=f"file://{root}/iceberg")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    times, meta = [], []
    for i in range(commits):
        batch = _batch(i)
        start = time.perf_counter()
        table.append(batch)
        times.append((time.perf_counter() - start) * 1000)
        if i % 50 == 49:
            meta.append(_count_files(f"{root}/iceberg/db.db/t/metadata", f"{root}/iceberg/db/t/metadata"))
    return _summary(times, meta)


def run(commits: int = 2000, peer_commits: int = 500) -> dict:
    results: dict[str, dict] = {}
    contenders = [("lakesink", bench_lakesink, commits), ("pypaimon stream commit", bench_pypaimon, commits),
                  ("delta-rs", bench_deltalake, min(commits, peer_commits)),
                  ("pyiceberg", bench_pyiceberg, min(commits, peer_commits))]
    for name, fn, n in contenders:
        root = tempfile.mkdtemp(prefix="lakesink-bench-commit-")
        try:
            results[name] = fn(root, n)
        except ImportError as exc:
            results[name] = {"skipped": f"not installed ({exc.name}); pip install 'lakesink[bench]'"}
        finally:
            shutil.rmtree(root, ignore_errors=True)
        _print(name, results[name])
    lake = results["lakesink"]
    results["lakesink"]["flat"] = lake["ratio"] <= 1.25
    return results


def _print(name: str, r: dict) -> None:
    if "skipped" in r:
        print(f"[commit] {name:24s} skipped: {r['skipped']}")
        return
    print(f"[commit] {name:24s} {r['commits']:5d} commits  p50 ms {r['p50_early_ms']:8.2f} "
          f"(#{r['early_window'][0]}-{r['early_window'][1]}) -> {r['p50_late_ms']:8.2f} "
          f"(last {r['late_window'][1] - r['late_window'][0]})  x{r['ratio']:.2f}  "
          f"metadata files end {r['metadata_files_end']} max {r['metadata_files_max']}")


if __name__ == "__main__":
    run()
