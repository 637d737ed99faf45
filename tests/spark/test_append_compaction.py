"""Automatic compaction of append tables on Spark: many small `lakesink.write` jobs stay near the
ideal file count, every row read back exactly by pypaimon (issue #19)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

import lakesink
from lakesink.paimon.compaction.target import live_files
from lakesink.paimon.compaction.append_aggregator import target_file_size
from lakesink.paimon.table.tables import open_table
from tests.helpers import leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark

COLUMNS = ["id", "day", "amount", "note"]


def files_and_ideal(path: str) -> tuple[int, int]:
    """Live files, and the files the table's bytes need partition by partition."""
    table = open_table(path)
    per_partition = Counter()
    files = live_files(table)
    for f in files:
        per_partition[f.partition] += f.file_size
    return len(files), sum(math.ceil(b / target_file_size(table)) for b in per_partition.values())


# ./dev full: thirty jobs (the default run bounds the file count of repeated jobs with the aggregator, tests/spark/test_compaction.py)
@pytest.mark.full
def test_thirty_small_batch_jobs_keep_live_files_within_1_5_times_ideal(spark, table_path):
    jobs, rows = 30, 1200
    source = []
    for job in range(jobs):
        df = (spark.range(job * rows, (job + 1) * rows, numPartitions=4)
              .selectExpr("id", "cast(date_add(date'2026-01-01', cast(id % 2 as int)) as string) as day",
                          "cast(id * 7 % 10000 as double) / 100 as amount", "concat('order-', id) as note"))
        report = lakesink.write(df, table_path, partition_by=["day"],
                                options={"aggregator.enabled": "true", "target-file-size": "24kb"})
        assert "aggregation_error" not in report.extra, report.extra
        source += [(i, f"2026-01-0{1 + i % 2}", float(i * 7 % 10000) / 100, f"order-{i}")
                   for i in range(job * rows, (job + 1) * rows)]

    live, ideal = files_and_ideal(table_path)
    assert ideal >= 8, ideal  # 30 jobs x 8 files of a few KB: enough bytes for the bound to mean something
    assert live <= 1.5 * ideal, f"{live} live files for {ideal} ideal ones"
    # Read back with pypaimon, row for row (no row lost or doubled by the compactions).
    table = read_table(table_path)
    assert sorted(zip(*(table.column(c).to_pylist() for c in COLUMNS))) == sorted(source)
    kinds = Counter(s.commit_kind for s in snapshots(table_path))
    assert kinds["APPEND"] == jobs and kinds["COMPACT"] >= 5, kinds
    assert leftover_files(table_path) == set()
