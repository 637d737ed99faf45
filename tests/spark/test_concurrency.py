"""Several writers on one table through Spark, and which Spark paths reach an S3 store.

* A streaming query (`writeStream.format("paimon")`, processing-time trigger) into
  partition `s`, while one thread appends batches into partition `b` and another
  overwrites partition `o` (dynamic partition overwrite), all through lakesink, on
  one table. Afterwards, read with pypaimon: `s` holds every row the query
  processed exactly once, `b` every appended batch, `o` exactly the last overwrite.
  A short version runs in CI; `-m soak` runs it for minutes.
* On an S3-compatible server: the Spark-native path writes (its tasks use pyarrow),
  the fast path is refused before anything is written (pip pyspark has no S3
  connector).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

import lakesink
from lakesink.errors import UnsupportedTableError
from lakesink.paimon.table import tables
from tests.s3server import S3Server
from tests.staged import PARTITION_KEYS, SCHEMA, read_back, snapshot_list

pytestmark = pytest.mark.spark

APPEND_BASE = 1_000_000_000
OVERWRITE_BASE = 2_000_000_000
PAUSE = 1.0  # seconds between a writer thread's writes


def _rows(spark, ids, part, writer):
    from pyspark.sql import functions as F
    return (spark.createDataFrame([(i,) for i in ids], "id long")
            .withColumn("part", F.lit(part)).withColumn("writer", F.lit(writer)))


class _Writer(threading.Thread):
    """Repeats `one(k)` until `stop` is set; keeps what each successful write committed."""

    def __init__(self, one, stop):
        super().__init__(daemon=True)
        self.one, self.stop, self.done, self.error = one, stop, [], None

    def run(self):
        k = 0
        try:
            while not self.stop.is_set():
                self.done.append(self.one(k))
                k += 1
                self.stop.wait(PAUSE)  # leave the 2 local cores to the stream now and then
        except BaseException as exc:  # reported by the test
            self.error = exc


def stream_with_concurrent_batch_writers(spark, tmp_path, seconds: float) -> dict:
    path = str(tmp_path / "wh" / "db.db" / "t")
    tables.create_table(path, SCHEMA, PARTITION_KEYS, [], {"bucket": "-1"})
    from pyspark.sql import functions as F
    source = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
              .select(F.col("value").alias("id"), F.lit("s").alias("part"), F.lit("stream").alias("writer")))
    query = (source.writeStream.format("paimon").option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(processingTime="2 seconds").start(path))

    def append(k):
        ids = [APPEND_BASE + k * 100 + i for i in range(20)]
        report = lakesink.write(_rows(spark, ids, "b", "append"), path, mode="append")
        assert report.committed
        return ids, report

    def overwrite(k):
        ids = [OVERWRITE_BASE + k * 100 + i for i in range(10)]
        report = lakesink.write(_rows(spark, ids, "o", "overwrite"), path, mode="overwrite",
                                options={"partitionOverwriteMode": "dynamic"})
        assert report.committed
        return ids, report

    deadline = time.monotonic() + 180
    while not [p for p in query.recentProgress if p["numInputRows"] > 0]:  # the stream runs first
        assert query.isActive and time.monotonic() < deadline, f"stream made no progress: {query.status}"
        time.sleep(0.5)
    stop = threading.Event()
    writers = [_Writer(append, stop), _Writer(overwrite, stop)]
    for w in writers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in writers:
        w.join(300)
    query.stop()
    if query.exception() is not None:
        raise query.exception()
    for w in writers:
        if w.error is not None:
            raise w.error
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    return {"path": path, "appends": writers[0].done, "overwrites": writers[1].done, "progress": progress}


def _check(run: dict) -> None:
    table = read_back(run["path"])
    by_part = {}
    for part, id_ in zip(table.column("part").to_pylist(), table.column("id").to_pylist()):
        by_part.setdefault(part, []).append(id_)

    # The stream: rows 0..n-1 without gap or duplicate, one snapshot per micro-batch with
    # rows, and every batch Spark reports as done has its snapshot. (A query stopped
    # mid-batch may have committed one batch more than its progress reports.)
    snapshots = snapshot_list(run["path"])
    streamed = sorted(by_part.get("s", []))
    assert streamed == list(range(len(streamed)))
    stream_batches = [int(s.properties["lakesink.batch-id"]) for s in snapshots
                      if s.commit_user.startswith("lakesink-stream-")]
    assert stream_batches == sorted(set(stream_batches))
    reported = {p["batchId"] for p in run["progress"]}
    assert reported and reported <= set(stream_batches)
    processed = sum(p["numInputRows"] for p in run["progress"])
    assert processed <= len(streamed)

    appended = sorted(i for ids, _ in run["appends"] for i in ids)
    assert run["appends"] and sorted(by_part.get("b", [])) == appended

    assert run["overwrites"], "no overwrite finished"
    last_ids, _ = run["overwrites"][-1]
    assert sorted(by_part.get("o", [])) == sorted(last_ids)

    # One snapshot per commit: every micro-batch with rows, every append, every overwrite.
    kinds = [s.commit_kind for s in snapshots]
    assert kinds.count("OVERWRITE") == len(run["overwrites"])
    assert kinds.count("APPEND") == len(stream_batches) + len(run["appends"])
    retries = sum(r.attempts - 1 for _, r in run["appends"] + run["overwrites"])
    print(f"\nstream batches={len(stream_batches)} rows={len(streamed)}; appends={len(run['appends'])}; "
          f"overwrites={len(run['overwrites'])}; batch-write publication retries={retries}")


def test_a_stream_a_batch_append_and_an_overwrite_of_another_partition_lose_nothing(spark, tmp_path):
    _check(stream_with_concurrent_batch_writers(spark, tmp_path, seconds=float(os.environ.get(
        "LAKESINK_CONCURRENCY_SECONDS", "12"))))


@pytest.mark.soak
def test_a_stream_a_batch_append_and_an_overwrite_of_another_partition_lose_nothing_for_minutes(spark, tmp_path):
    _check(stream_with_concurrent_batch_writers(spark, tmp_path, seconds=float(os.environ.get(
        "LAKESINK_SOAK_SECONDS", "300"))))


# -- S3 ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        server.create_bucket("lakesink-spark")
        yield server


def test_the_spark_native_path_writes_a_table_on_an_s3_store(spark, s3):
    path = "s3://lakesink-spark/wh/db.db/native"
    df = _rows(spark, range(100), "a", "native").repartition(2)
    writer = df.write.format("paimon").mode("append").option("partition", "part")
    for key, value in s3.fs_options().items():
        writer = writer.option(key, value)
    writer.save(path)
    writer.save(path)
    ids = read_back(path, s3.fs_options()).column("id").to_pylist()
    assert sorted(ids) == sorted(list(range(100)) * 2)
    assert len(snapshot_list(path, s3.fs_options())) == 2


# ./dev full: reads on S3 with options-only credentials (the default run writes S3 through the native path)
@pytest.mark.full
def test_an_s3_table_is_read_with_credentials_given_only_as_options(spark, s3):
    credentials = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
    assert not [k for k in credentials if k in os.environ], "credentials must come from the options only"
    path = "s3://lakesink-spark/wh/db.db/read-options"
    writer = (_rows(spark, range(50), "a", "native").repartition(2).write.format("paimon").mode("append")
              .options(**s3.fs_options()))
    writer.save(path)
    expected = list(range(50))
    native = spark.read.format("paimon").options(**s3.fs_options()).load(path)
    assert sorted(r.id for r in native.select("id").collect()) == expected
    fast = lakesink.read(spark, path, options=s3.fs_options(), filter="id < 10")
    assert sorted(r.id for r in fast.select("id").collect()) == list(range(10))
    streamed = []
    query = (lakesink.read_stream(spark, path, options=s3.fs_options()).writeStream
             .foreachBatch(lambda df, _: streamed.extend(r.id for r in df.select("id").collect()))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert sorted(streamed) == expected


def test_the_fast_path_refuses_an_s3_table_when_spark_has_no_s3_connector(spark, s3):
    path = "s3://lakesink-spark/wh/db.db/fast"
    with pytest.raises(UnsupportedTableError, match=r"no file system for s3://.*format\('paimon'\)"):
        lakesink.write(_rows(spark, range(10), "a", "fast"), path, options=s3.fs_options())
    listed = s3.client().list_objects_v2(Bucket="lakesink-spark", Prefix="wh/db.db/fast")
    assert listed.get("KeyCount", 0) == 0  # nothing written
