"""Dynamic-bucket primary-key tables (bucket=-1, Paimon's default) on every lakesink write path:
keys assigned through Paimon's hash index, new buckets opened at `dynamic-bucket.target-row-num`,
no key ever in two buckets (the index decoded by pypaimon), other writers in the partition refused.
Java Paimon reads and continues such tables in tests/interop/test_dynamic_buckets.py."""

from __future__ import annotations

import os

import pytest

import lakesink
from lakesink.errors import CommitConflictError, ConfigurationError
from tests.helpers import latest_snapshot_id, leftover_files, read_table
from tests.interop.test_dynamic_buckets import check_index, hash_index
from tests.spark.test_keyed_stream_write import _source, _stream

pytestmark = pytest.mark.spark

SCHEMA = "id long, dt string, v string"


def _rows(ids, tag):
    return [(i, f"d{i % 2}", f"{tag}{i}") for i in ids]


def _want(*writes):
    out = {}
    for ids, tag in writes:
        out.update({(i, f"d{i % 2}"): f"{tag}{i}" for i in ids})
    return out


def _by_key(path):
    rows = read_table(path).to_pylist()
    keys = [(r["id"], r["dt"]) for r in rows]
    assert len(set(keys)) == len(keys), "a key was returned twice"
    return {(r["id"], r["dt"]): r["v"] for r in rows}


def test_small_target_row_num_opens_buckets_and_keeps_each_key_in_one(spark, tmp_path):
    path = str(tmp_path / "wh" / "db.db" / "t")
    df = spark.createDataFrame(_rows(range(40), "a"), SCHEMA)
    lakesink.write(df, path, primary_key=["id", "dt"], partition_by=["dt"],
                   options={"dynamic-bucket.target-row-num": "5", "dynamic-bucket.assigner-parallelism": "2"})
    counts = {key: count for key, (_, count) in hash_index(path).items()}
    assert all(count <= 5 for count in counts.values())  # the assigners count their keys exactly
    # 20 keys a partition over two assigners, each opening buckets of its own as 5 fill
    assert all(4 <= n <= 6 for n in check_index(path, _want((range(40), "a"))).values())
    assert all(b % 2 == 0 for (p, b) in counts) is False  # both assigners opened buckets
    # Upserts keep their keys' buckets; new keys fill buckets with room, then open new ones.
    lakesink.write(spark.createDataFrame(_rows(range(30, 70), "b"), SCHEMA).repartition(3), path)
    (spark.createDataFrame(_rows(range(60, 90), "c"), SCHEMA).repartition(3).write.format("paimon")
     .mode("append").save(path))
    want = _want((range(40), "a"), (range(30, 70), "b"), (range(60, 90), "c"))
    assert _by_key(path) == want
    buckets = check_index(path, want)
    # 35 keys a partition after the lakesink.write calls (exact), format("paimon")'s 10 more may
    # overshoot the buckets they land in (its tasks cannot count each other's keys)
    assert all(n >= 35 // 5 for n in buckets.values())
    # Buckets no key moved out of: every bucket of the first write still holds its keys.
    assert set(counts) <= set(hash_index(path))


def test_unpartitioned_and_through_format_paimon_alone(spark, tmp_path):
    path = str(tmp_path / "wh" / "db.db" / "u")
    (spark.createDataFrame([(i, f"a{i}") for i in range(20)], "id long, v string").repartition(2)
     .write.format("paimon").option("primary-key", "id").option("dynamic-bucket.target-row-num", "4")
     .mode("append").save(path))
    lakesink.write(spark.createDataFrame([(i, f"b{i}") for i in range(10, 30)], "id long, v string"), path)
    rows = read_table(path).to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == [(i, f"a{i}") for i in range(10)] + [
        (i, f"b{i}") for i in range(10, 30)]
    index = hash_index(path)
    seen = [h for hashes, _ in index.values() for h in hashes]
    assert len(seen) == len(set(seen)) == 30 and len(index) > 1


def test_another_writer_in_the_partition_meanwhile_is_a_conflict(spark, tmp_path, monkeypatch):
    """Two writers planned on one snapshot could give one new key two buckets: the later commit is
    refused, naming the table and partition, and changes nothing."""
    import lakesink.spark.keyed_write as keyed_write

    path = str(tmp_path / "wh" / "db.db" / "t")
    lakesink.write(spark.createDataFrame(_rows(range(10), "a"), SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={"dynamic-bucket.target-row-num": "3"})
    listed = keyed_write.list_parquet_files

    def another_writer_commits_first(*args, **kwargs):
        monkeypatch.setattr(keyed_write, "list_parquet_files", listed)
        lakesink.write(spark.createDataFrame([(21, "d1", "other")], SCHEMA), path)
        return listed(*args, **kwargs)

    monkeypatch.setattr(keyed_write, "list_parquet_files", another_writer_commits_first)
    before = latest_snapshot_id(path) + 1  # the other writer's
    with pytest.raises(CommitConflictError, match=r"dynamic-bucket table .*partition \('d1',\)"):
        lakesink.write(spark.createDataFrame([(21, "d1", "mine"), (23, "d1", "mine")], SCHEMA), path)
    assert latest_snapshot_id(path) == before
    assert _by_key(path) == {**_want((range(10), "a")), (21, "d1"): "other"}
    assert leftover_files(path) == set()
    lakesink.write(spark.createDataFrame([(21, "d1", "mine"), (23, "d1", "mine")], SCHEMA), path)
    want = {**_want((range(10), "a")), (21, "d1"): "mine", (23, "d1"): "mine"}
    assert _by_key(path) == want
    check_index(path, want)


# Shuffled micro-batches: ./dev full (the default run streams one-task batches; batch writes shuffle).
@pytest.mark.parametrize("shuffle", [pytest.param("true", marks=pytest.mark.full), "false"])
def test_a_stream_writes_a_dynamic_bucket_table(spark, tmp_path, shuffle):
    """lakesink.stream, micro-batches shuffled to their assigners or written by one task: each
    batch assigns its new keys over the index the previous batch committed."""
    source, path = tmp_path / "src", str(tmp_path / "wh" / "db.db" / "s")
    batches = [[(i, f"b{b}-{i}", "+I") for i in range(b * 7, b * 7 + 12)] for b in range(4)]
    _source(source, batches)
    _stream(spark, source, path, str(tmp_path / "chk"),
            {"primary-key": "id", "dynamic-bucket.target-row-num": "6", "write.keyed-shuffle": shuffle})
    rows = read_table(path).to_pylist()
    want = {}
    for b, batch in enumerate(batches):
        want.update({i: name for i, name, _ in batch})
    assert {r["id"]: r["name"] for r in rows} == want and len(rows) == len(want)
    index = hash_index(path)
    seen = [h for hashes, _ in index.values() for h in hashes]
    assert len(seen) == len(set(seen)) == len(want)
    if shuffle == "true":
        assert all(count <= 6 for _, count in index.values())


@pytest.mark.parametrize("case", ["bucket_key", "pipelined", "unstable_key"])
def test_what_dynamic_buckets_refuse_before_anything_is_written(spark, tmp_path, case):
    path = str(tmp_path / "wh" / "db.db" / "r")
    df = spark.createDataFrame(_rows(range(3), "a"), SCHEMA)
    if case == "bucket_key":
        with pytest.raises(ConfigurationError, match="bucket-key with bucket=-1"):
            lakesink.write(df, path, primary_key=["id", "dt"], options={"bucket-key": "id"})
    elif case == "unstable_key":
        # A table with changelog files reads its keys twice (for the assigners, then with the
        # rows): they must agree. (Without, the rows are read once: test_keys_read_once_may_be_random.)
        with pytest.raises(ConfigurationError, match="differs between two evaluations of the input"):
            lakesink.write(_random_keys(spark), path, primary_key=["id", "dt"], partition_by=["dt"],
                           options={"changelog-producer": "input"})
    else:
        source = tmp_path / "src"
        _source(source, [[(1, "a", "+I")]])
        with pytest.raises(Exception, match="commit.mode=pipelined into the dynamic-bucket table"):
            _stream(spark, source, path, str(tmp_path / "chk"), {"primary-key": "id", "commit.mode": "pipelined"})
    assert not os.path.exists(os.path.join(path, "snapshot"))


def _random_keys(spark, rows: int = 50):
    import random

    from pyspark.sql import functions as F
    coin = F.udf(lambda: random.randrange(1 << 40), "long").asNondeterministic()
    return spark.range(rows).select(coin().alias("id"), F.lit("d0").alias("dt"), F.lit("x").alias("v"))


def test_keys_read_once_may_be_random(spark, tmp_path):
    """Without changelog files a write reads its input once: each row's key hash routes it to its
    assigner's task, which gives it a bucket there. Keys drawn at random are written, each in one
    bucket, the index holding exactly the keys written."""
    path = str(tmp_path / "wh" / "db.db" / "u")
    lakesink.write(_random_keys(spark, 200), path, primary_key=["id", "dt"], partition_by=["dt"],
                   options={"dynamic-bucket.target-row-num": "30"})
    rows = lakesink.read(spark, path).collect()
    assert len(rows) == 200 == len({r["id"] for r in rows})
    index = hash_index(path)
    seen = [h for hashes, _ in index.values() for h in hashes]
    assert len(seen) == len(set(seen)) == 200 and len(index) >= 200 // 30


def test_an_overwrite_assigns_afresh_and_row_level_changes_keep_buckets(spark, tmp_path):
    """An overwrite replaces the partitions' keys, index included (Paimon's assigner ignores the
    old index then); a delete and an update find each key in the bucket the index gives it."""
    path = str(tmp_path / "wh" / "db.db" / "o")
    lakesink.write(spark.createDataFrame(_rows(range(40), "a"), SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={"dynamic-bucket.target-row-num": "5"})
    lakesink.write(spark.createDataFrame(_rows(range(20, 30), "o"), SCHEMA), path, mode="overwrite")
    want = _want((range(20, 30), "o"))
    assert _by_key(path) == want
    check_index(path, want)
    assert sum(count for _, count in hash_index(path).values()) == 10
    lakesink.write(spark.createDataFrame(_rows(range(25, 45), "b"), SCHEMA), path)
    lakesink.delete(spark, path, "id < 23")
    lakesink.update(spark, path, {"v": "concat(v, '!')"}, "id >= 40")
    rows = _by_key(path)
    assert rows == {**{k: v for k, v in want.items() if k[0] >= 23}, **_want((range(25, 40), "b")),
                    **{k: v + "!" for k, v in _want((range(40, 45), "b")).items()}}
    check_index(path, {**want, **_want((range(25, 45), "b"))})  # a deleted key keeps its hash (Paimon)


# ./dev full: max-buckets (the default run opens buckets by target-row-num)
@pytest.mark.full
def test_max_buckets_caps_each_partition_and_new_keys_share_the_full_buckets(spark, tmp_path):
    path = str(tmp_path / "wh" / "db.db" / "m")
    options = {"dynamic-bucket.target-row-num": "3", "dynamic-bucket.max-buckets": "2"}
    lakesink.write(spark.createDataFrame(_rows(range(30), "a"), SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options=options)
    (spark.createDataFrame(_rows(range(25, 50), "b"), SCHEMA).repartition(2).write.format("paimon")
     .mode("append").save(path))
    want = _want((range(30), "a"), (range(25, 50), "b"))
    assert _by_key(path) == want
    check_index(path, want)
    assert {bucket for _, bucket in hash_index(path)} == {0, 1}
