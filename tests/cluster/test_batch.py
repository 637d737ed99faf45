"""Batch work on the cluster: both write paths, CTAS, compaction and pruned reads.

Tables on the S3 server take their credentials only as options; the fast path,
which has Spark's JVM write the files, writes a directory every process reaches
(the pip pyspark has no S3 connector) and refuses S3 clearly. Every table is read
back with pypaimon in the test process, not with lakesink.
"""

from __future__ import annotations

import pytest

from tests.staged import read_back, snapshot_list

from .remote import ScenarioError
from .scenarios import expected_rows
from .tables import objects, table_rows

pytestmark = [pytest.mark.cluster, pytest.mark.full]  # the cluster tier: ./dev full


def test_the_fast_path_writes_a_shared_directory_and_refuses_s3_naming_the_way_that_works(
        driver, local_table, s3_table, s3, s3_options):
    report = driver.run("write", path=local_table, via="fast", start=0, stop=300, partitions=3,
                        partition_by=["grp"])
    assert report["rows_added"] == 300
    assert table_rows(local_table) == expected_rows(0, 300)
    # read back on the cluster by Spark's own Parquet reader, given only the partition's files
    everything = driver.run("read", path=local_table, how="lakesink")
    one_group = driver.run("read", path=local_table, how="lakesink", filter="grp = 1")
    assert one_group["rows"] == [list(r) for r in expected_rows(0, 300) if r[2] == 1]
    assert 0 < one_group["input_files"] < everything["input_files"]

    with pytest.raises(ScenarioError) as refused:
        driver.run("write", path=s3_table, via="fast", start=0, stop=10, options=s3_options)
    assert refused.value.type == "UnsupportedTableError"
    assert s3_table in refused.value.message
    assert "format('paimon')" in refused.value.message and "hadoop-aws" in refused.value.message
    assert objects(s3, s3_table) == [], "the refusal must come before anything is written"


def test_the_native_path_writes_s3_with_credentials_only_in_options(driver, s3_table, s3_options):
    driver.run("write", path=s3_table, via="native", start=0, stop=200, partitions=2,
               partition_by=["grp"], options=s3_options)
    driver.run("write", path=s3_table, via="native", start=200, stop=260, partitions=2,
               partition_by=["grp"], options=s3_options)
    assert table_rows(s3_table, s3_options) == expected_rows(0, 260)
    assert [s.commit_kind for s in snapshot_list(s3_table, s3_options)] == ["APPEND", "APPEND"]


def test_create_table_as_on_both_paths(driver, local_table, s3_table, s3, s3_options):
    report = driver.run("create_table_as", path=local_table, via="fast", start=0, stop=90,
                        partition_by=["grp"])
    assert report["rows_added"] == 90
    assert table_rows(local_table) == expected_rows(0, 90)
    # S3 has no atomic directory rename: atomic CTAS is refused before anything is written ...
    with pytest.raises(ScenarioError, match="ctas.atomicity-enabled=false"):
        driver.run("create_table_as", path=s3_table, via="native", start=0, stop=90, options=s3_options)
    assert objects(s3, s3_table) == []
    # ... and, asked for, done in place
    driver.run("create_table_as", path=s3_table, via="native", start=0, stop=90,
               options={**s3_options, "ctas.atomicity-enabled": "false"})
    assert table_rows(s3_table, s3_options) == expected_rows(0, 90)


def test_compaction_rewrites_small_s3_files_on_the_executors(driver, s3_table, s3_options):
    for k in range(3):
        driver.run("write", path=s3_table, via="native", start=k * 50, stop=(k + 1) * 50, partitions=2,
                   options=s3_options)
    before = read_back(s3_table, s3_options)
    report = driver.run("compact", path=s3_table, options=s3_options)
    assert report["snapshot_id"] == 4
    snaps = snapshot_list(s3_table, s3_options)
    assert [s.commit_kind for s in snaps] == ["APPEND"] * 3 + ["COMPACT"]
    assert table_rows(s3_table, s3_options) == expected_rows(0, 150)
    assert before.num_rows == 150


def test_reads_of_an_s3_table_prune_files_by_the_filter(driver, s3_table, s3_options):
    # three files, ids [0, 100), [100, 200), [200, 300); a split per file, so Spark's partitions count files
    for k in range(3):
        driver.run("write", path=s3_table, via="native", start=k * 100, stop=(k + 1) * 100, partitions=1,
                   options={**s3_options, "source.split.target-size": "1kb"})
    wanted = [list(r) for r in expected_rows(0, 300) if r[0] >= 250]
    for how, pushdown in (("lakesink", False), ("format", True)):
        everything = driver.run("read", path=s3_table, how=how, options=s3_options, pushdown=pushdown)
        assert everything["rows"] == [list(r) for r in expected_rows(0, 300)]
        assert everything["partitions"] == 3
        pruned = driver.run("read", path=s3_table, how=how, filter="id >= 250", options=s3_options,
                            pushdown=pushdown)
        assert pruned["rows"] == wanted, how
        assert pruned["partitions"] == 1, f"{how}: the filter must leave one file of three to read"
