import pytest

import lakesink
from tests.helpers import leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark


def test_both_batch_paths_commit_one_snapshot_each(spark, table_path):
    df = spark.range(100).selectExpr("id", "cast(id % 3 as string) as p")
    report = lakesink.write(df, table_path, partition_by=["p"])
    assert report.snapshot_id == 1 and report.rows_added == 100
    df.write.format("paimon").mode("append").save(table_path)
    rows = read_table(table_path)
    assert sorted(rows.column("id").to_pylist()) == sorted(list(range(100)) * 2)
    assert [s.commit_kind for s in snapshots(table_path)] == ["APPEND", "APPEND"]
    assert leftover_files(table_path) == set()
