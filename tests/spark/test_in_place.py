"""format("paimon") writing data files in place (write.in-place; the default on object stores).

On the local disk with the option forced: failed and zombie attempts leave nothing, found
through their intents. On the test S3 server behind the counting proxy: a job of 5 and of 25
files copies none of them, and its metadata writes do not grow with the files. Every table is
read back with pypaimon.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.helpers import data_files_on_disk, latest_snapshot_id, leftover_files, read_table
from tests.s3proxy import proxied_s3
from tests.staged import read_back, snapshot_list

pytestmark = pytest.mark.spark

IN_PLACE = {"write.in-place": "true"}


def _write(df, path: str, mode: str = "append", **options) -> None:
    writer = df.write.format("paimon").mode(mode)
    for key, value in {**IN_PLACE, **options}.items():
        writer = writer.option(key, value)
    writer.save(path)


def _seed(spark, path: str) -> set[str]:
    _write(spark.createDataFrame([(1, "a"), (2, "a")], "id long, p string"), path, partition="p")
    return data_files_on_disk(path)


def _assert_unchanged(path: str, before: set[str]) -> None:
    assert latest_snapshot_id(path) == 1
    assert sorted(read_table(path).column("id").to_pylist()) == [1, 2]
    assert data_files_on_disk(path) == before
    assert leftover_files(path) == set()
    staging = os.path.join(path, "_lakesink", "staging")
    assert not os.path.exists(staging) or os.listdir(staging) == []


def test_files_written_in_place_sit_in_their_buckets_and_nothing_is_staged(spark, table_path):
    before = _seed(spark, table_path)
    assert before and all("/p=a/bucket-0/data-" in p for p in before)
    _write(spark.range(10, 20, 1, 2).selectExpr("id", "'b' as p"), table_path)
    assert sorted(read_table(table_path).column("id").to_pylist()) == [1, 2, *range(10, 20)]
    assert leftover_files(table_path) == set()
    assert os.listdir(os.path.join(table_path, "_lakesink", "staging")) == []


def _fail_in_partition_1(batches):
    from pyspark import TaskContext
    for batch in batches:
        yield batch
        if TaskContext.get().partitionId() == 1:
            raise ValueError("boom: a task fails past its retries")


def test_a_task_failing_past_its_retries_leaves_none_of_the_files_written_in_place(spark, table_path):
    before = _seed(spark, table_path)
    df = (spark.range(0, 2000, 1, 2).selectExpr("id", "'b' as p")
          .mapInArrow(_fail_in_partition_1, "id long, p string"))
    with pytest.raises(Exception, match="boom: a task fails past its retries"):
        _write(df, table_path, **{"target-file-size": "1kb"})
    _assert_unchanged(table_path, before)


def _slow_partition_1(table: str):
    """Partition 1 holds its task until the job's staging is gone, then writes like a zombie."""
    def run(batches):
        import glob

        from pyspark import TaskContext
        yield from batches
        if TaskContext.get().partitionId() == 1:
            started = time.time()
            while time.time() - started < 60:
                if time.time() - started > 5 and not glob.glob(f"{table}/_lakesink/staging/*"):
                    break
                time.sleep(0.1)
    return run


def test_a_cancelled_job_leaves_none_of_the_files_written_in_place_even_by_a_late_task(spark, table_path):
    before = _seed(spark, table_path)
    df = (spark.range(0, 2000, 1, 2).selectExpr("id", "'b' as p")
          .mapInArrow(_slow_partition_1(table_path), "id long, p string"))

    def cancel_once_files_appear():
        deadline = time.time() + 60
        while time.time() < deadline and not (data_files_on_disk(table_path) - before):
            time.sleep(0.05)
        spark.sparkContext.cancelAllJobs()

    canceller = threading.Thread(target=cancel_once_files_appear)
    canceller.start()
    try:
        with pytest.raises(Exception, match="(?i)cancel"):
            _write(df, table_path)
    finally:
        canceller.join()
    time.sleep(6)  # the held task ends ~5 s after the abort and writes: it must not leave files
    _assert_unchanged(table_path, before)


# -- on S3, through the counting proxy ------------------------------------------------------
BUCKET = "lakesink-in-place"


@pytest.fixture(scope="module")
def s3():
    with proxied_s3(BUCKET) as both:
        yield both


def _job_requests(spark, s3, name: str, files: int, options: dict):
    server, proxy = s3
    path = f"s3://{BUCKET}/{name}/db.db/t"
    fs = proxy.fs_options(server)
    seed = spark.createDataFrame([(-1, "seed")], "id long, part string")
    _write_s3(seed, path, {**fs, **options})  # the table exists; its first snapshot
    df = spark.range(0, files * 10, 1, 1).selectExpr("id", f"cast(id % {files} as string) as part")
    proxy.reset()
    _write_s3(df, path, {**fs, **options})
    counts, metadata = proxy.counts(), proxy.counts("/snapshot/") + proxy.counts("/manifest/")
    assert len(snapshot_list(path, fs)) == 2
    assert read_back(path, fs).num_rows == files * 10 + 1
    return counts, metadata


def _write_s3(df, path: str, options: dict) -> None:
    writer = df.write.format("paimon").mode("append").option("partition", "part").option("maintenance.enabled",
                                                                                            "false")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(path)


# ./dev full: the S3 case (tests/unit/test_s3_requests.py counts a commit's requests in the default run)
@pytest.mark.full
def test_a_job_on_s3_copies_none_of_its_files_and_its_metadata_writes_do_not_grow_with_them(spark, s3):
    measured = {}
    for mode, options in (("in-place", {}), ("staged", {"write.in-place": "false"})):
        for files in (5, 25):
            measured[mode, files] = _job_requests(spark, s3, f"job-{mode}-{files}", files, options)
            counts, metadata = measured[mode, files]
            print(f"\n{mode} (default)" if not options else f"\n{mode}", f"{files} files: job requests "
                  f"{dict(sorted(counts.items()))}; snapshot/manifest requests {dict(sorted(metadata.items()))}")
    small, large = measured["in-place", 5], measured["in-place", 25]
    assert small[0]["COPY"] == large[0]["COPY"] == 0
    assert small[1] == large[1], "snapshot and manifest requests grew with the files"
    assert measured["staged", 25][0]["COPY"] - measured["staged", 5][0]["COPY"] == 20


def test_a_keyed_table_written_in_place_merges_updates_and_keeps_no_stray_file(spark, table_path):
    keyed = {"primary-key": "id", "bucket": "2", "changelog-producer": "input"}
    _write(spark.createDataFrame([(i, f"v1-{i}") for i in range(20)], "id long, name string").repartition(2),
           table_path, **keyed)
    _write(spark.createDataFrame([(i, f"v2-{i}") for i in range(0, 20, 2)], "id long, name string")
           .repartition(2), table_path, **keyed)
    rows = {r["id"]: r["name"] for r in read_table(table_path).to_pylist()}
    assert rows == {i: (f"v2-{i}" if i % 2 == 0 else f"v1-{i}") for i in range(20)}
    files = data_files_on_disk(table_path)
    assert any("/bucket-1/changelog-" in p for p in files) and any("/bucket-0/data-" in p for p in files)
    assert leftover_files(table_path) == set()
