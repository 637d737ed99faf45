"""Cross-partition primary-key tables (bucket=-1, a primary key without every partition column:
Paimon's CROSS_PARTITION mode) on every lakesink write path. A key lives in one partition of the
whole table: deduplicate moves it (a -D to its old partition), partial-update and aggregation
merge its row into the old partition, first-row ignores it. Every table is read back with
pypaimon, key for key and partition by partition; Java Paimon reads and continues such tables in
tests/interop/test_cross_partition.py."""

from __future__ import annotations

import os

import pytest

import lakesink
from lakesink.errors import CommitConflictError, ConfigurationError, UnsupportedOptionError
from tests.helpers import latest_snapshot_id, leftover_files, read_table

pytestmark = pytest.mark.spark

SCHEMA = "user_id long, region string, name string, score long"
REGIONS = ("eu", "us")


def _by_key(path) -> dict:
    """{user_id: (region, name, score)} read by pypaimon; a key read twice (in two partitions) fails."""
    rows = read_table(path).to_pylist()
    keys = [r["user_id"] for r in rows]
    assert len(set(keys)) == len(keys), f"keys read twice: {sorted(k for k in set(keys) if keys.count(k) > 1)}"
    return {r["user_id"]: (r["region"], r["name"], r["score"]) for r in rows}


def _partition(path, region) -> set:
    """The keys pypaimon reads from one partition alone (its buckets' files merged)."""
    from pypaimon.table.file_store_table import FileStoreTable
    builder = FileStoreTable.from_path(path).new_read_builder()
    builder = builder.with_filter(builder.new_predicate_builder().equal("region", region))
    rows = builder.new_read().to_arrow(builder.new_scan().plan().splits()).to_pylist()
    assert {r["region"] for r in rows} <= {region}
    return {r["user_id"] for r in rows}


def _first(n):
    return [(i, REGIONS[i % 2], f"a{i}", i) for i in range(n)]


def test_a_user_moving_region_leaves_the_old_partition(spark, tmp_path):
    """deduplicate: the row goes to its new partition, a -D of the key to its old one. Rows of one
    key in several partitions of a write count in input order: the last one's partition wins."""
    from pypaimon.index.index_file_handler import IndexFileHandler

    from lakesink.paimon.table.tables import open_table
    path = str(tmp_path / "wh" / "shop.db" / "profiles")
    lakesink.write(spark.createDataFrame(_first(10), SCHEMA), path, primary_key=["user_id"],
                   partition_by=["region"], options={"dynamic-bucket.target-row-num": "3"})
    table = open_table(path)
    assert table.table_schema.options["bucket"] == "-1" and table.table_schema.cross_partition_update()
    moves = [(0, "us", "b0", 100), (1, "eu", "b1", 101), (2, "eu", "b2", 102), (20, "ap", "b20", 120),
             (5, "eu", "c5", 5), (5, "ap", "d5", 6),      # an existing key in two partitions: ap, the later
             (30, "eu", "x", 1), (30, "us", "y", 2)]      # a new key in two partitions: us
    lakesink.write(spark.createDataFrame(moves, SCHEMA), path)
    want = {i: (REGIONS[i % 2], f"a{i}", i) for i in range(10)}
    want.update({0: ("us", "b0", 100), 1: ("eu", "b1", 101), 2: ("eu", "b2", 102), 20: ("ap", "b20", 120),
                  5: ("ap", "d5", 6), 30: ("us", "y", 2)})
    assert _by_key(path) == want
    for region in ("eu", "us", "ap"):
        assert _partition(path, region) == {k for k, v in want.items() if v[0] == region}
    buckets = {(tuple(e.partition.values), e.bucket) for e in open_table(path).new_read_builder().new_scan()
               .plan().splits()}
    assert len([b for p, b in buckets if p == ("eu",)]) >= 2  # 3 keys a bucket: eu's 6 keys opened buckets
    # As in Paimon, no hash index: the keys' index is bootstrapped from the table by every write.
    assert IndexFileHandler(open_table(path)).scan(None, lambda e: True) == []

    # An overwrite of some partitions would keep the keys it writes in the other partitions too.
    before = latest_snapshot_id(path)
    with pytest.raises(ConfigurationError, match="overwrite of some of its partitions"):
        lakesink.write(spark.createDataFrame([(3, "eu", "o", 0)], SCHEMA), path, mode="overwrite",
                       options={"partitionOverwriteMode": "dynamic"})
    assert latest_snapshot_id(path) == before


@pytest.mark.full  # the default run refuses another writer in the partition (tests/spark/test_dynamic_buckets.py)
def test_another_writer_anywhere_in_the_table_meanwhile_is_a_conflict(spark, tmp_path, monkeypatch):
    """A write places keys from the whole table's keys as of its snapshot: another writer's commit
    into any partition since then fails it, and nothing of it lands."""
    import lakesink.spark.keyed_write as keyed_write
    path = str(tmp_path / "wh" / "shop.db" / "raced")
    spark.createDataFrame(_first(4), SCHEMA).write.format("paimon").option("primary-key", "user_id") \
        .option("partition", "region").mode("append").save(path)
    listed = keyed_write.list_parquet_files

    def another_writer_commits_first(*args, **kwargs):
        monkeypatch.setattr(keyed_write, "list_parquet_files", listed)
        spark.createDataFrame([(40, "ap", "other", 0)], SCHEMA).write.format("paimon").mode("append").save(path)
        return listed(*args, **kwargs)

    monkeypatch.setattr(keyed_write, "list_parquet_files", another_writer_commits_first)
    before = latest_snapshot_id(path) + 1  # the other writer's
    with pytest.raises(CommitConflictError, match="cross-partition table takes one writer at a time"):
        lakesink.write(spark.createDataFrame([(3, "eu", "mine", 0)], SCHEMA), path)
    assert latest_snapshot_id(path) == before and leftover_files(path) == set()
    assert _by_key(path) == {**{i: (REGIONS[i % 2], f"a{i}", i) for i in range(4)}, 40: ("ap", "other", 0)}


@pytest.mark.parametrize("engine", ["partial-update", pytest.param("aggregation", marks=pytest.mark.full)])
def test_a_row_of_a_key_in_another_partition_merges_into_the_old_one(spark, tmp_path, engine):
    """partial-update / aggregation: the row takes the old partition (and bucket) and merges there;
    a new key with rows in two partitions stays in its first row's partition."""
    path = str(tmp_path / "wh" / "shop.db" / "totals")
    options = {"merge-engine": engine}
    if engine == "aggregation":
        options["fields.score.aggregate-function"] = "sum"
    lakesink.write(spark.createDataFrame(_first(6), SCHEMA), path, primary_key=["user_id"],
                   partition_by=["region"], options=options)
    rows = [(0, "us", None, 10), (1, "eu", "b1", 20), (2, "eu", "b2", None),
            (30, "ap", "x", 1), (30, "eu", None, 2)]
    lakesink.write(spark.createDataFrame(rows, SCHEMA), path)
    if engine == "partial-update":  # nulls fill nothing
        want = {0: ("eu", "a0", 10), 1: ("us", "b1", 20), 2: ("eu", "b2", 2), 30: ("ap", "x", 2)}
    else:  # name: last_non_null_value, score: sum
        want = {0: ("eu", "a0", 10), 1: ("us", "b1", 21), 2: ("eu", "b2", 2), 30: ("ap", "x", 3)}
    want.update({i: (REGIONS[i % 2], f"a{i}", i) for i in range(3, 6)})
    assert _by_key(path) == want
    assert _partition(path, "ap") == {30} and _partition(path, "us") == {1, 3, 5}


def test_format_paimon_writes_a_first_row_table_and_refuses_a_key_spread_over_tasks(spark, tmp_path):
    """first-row: a row of a key living in another partition is ignored. format("paimon")'s tasks
    place keys alone: rows of one key in two tasks are refused at commit, nothing committed (the
    error names the remedy, df.repartition by the primary key)."""
    path = str(tmp_path / "wh" / "shop.db" / "first_seen")
    (spark.createDataFrame(_first(8), SCHEMA).repartition(2, "user_id").write.format("paimon")
     .option("primary-key", "user_id").option("partition", "region").option("merge-engine", "first-row")
     .mode("append").save(path))
    rows = [(0, "us", "late", 0), (1, "us", "late", 1), (9, "ap", "first", 9), (9, "eu", "second", 9)]
    spark.createDataFrame(rows, SCHEMA).coalesce(1).write.format("paimon").mode("append").save(path)
    want = {i: (REGIONS[i % 2], f"a{i}", i) for i in range(8)}
    want[9] = ("ap", "first", 9)
    assert _by_key(path) == want
    before = latest_snapshot_id(path)
    spread = spark.createDataFrame(spark.sparkContext.parallelize(
        [(10, "eu", "a", 0), (11, "eu", "b", 0), (10, "us", "c", 0), (12, "eu", "d", 0)], 2), SCHEMA)
    with pytest.raises(Exception, match=r"reached more than one Spark task.*repartition\('user_id'\)"):
        spread.write.format("paimon").mode("append").save(path)
    assert latest_snapshot_id(path) == before and leftover_files(path) == set()


@pytest.mark.parametrize("shuffle", ["false", pytest.param("true", marks=pytest.mark.full)])
def test_a_stream_moves_keys_between_partitions(spark, tmp_path, shuffle):
    """lakesink.stream, micro-batches written by one task or shuffled: each batch reads the keys
    the previous one committed."""
    from tests.spark.test_keyed_stream_write import _source, _stream
    source, path = tmp_path / "src", str(tmp_path / "wh" / "shop.db" / "stream")
    batches = [[(i, REGIONS[i % 2], "+I") for i in range(6)],
               [(0, "us", "+I"), (1, "ap", "+I"), (4, "eu", "+I"), (7, "us", "+I"), (3, "us", "-D")]]
    _source(source, batches)
    _stream(spark, source, path, str(tmp_path / "chk"),
            {"primary-key": "id", "partition": "name", "rowkind.field": "op", "write.keyed-shuffle": shuffle})
    rows = read_table(path).to_pylist()
    assert sorted((r["id"], r["name"]) for r in rows) == [(0, "us"), (1, "ap"), (2, "eu"), (4, "eu"), (5, "us"),
                                                          (7, "us")]


@pytest.mark.parametrize("case", ["sequence_field", "ignore_delete", "index_ttl", "pipelined"])
def test_what_cross_partition_tables_refuse_before_anything_is_written(spark, tmp_path, case):
    path = str(tmp_path / "wh" / "shop.db" / "r")
    df = spark.createDataFrame(_first(3), SCHEMA)
    options = {"sequence_field": {"sequence.field": "score"}, "ignore_delete": {"ignore-delete": "true"},
               "index_ttl": {"cross-partition-upsert.index-ttl": "1 d"}}.get(case)
    expected = {"sequence_field": (ConfigurationError, "where Paimon refuses a sequence.field"),
                "ignore_delete": (ConfigurationError, "ignore-delete would drop"),
                "index_ttl": (UnsupportedOptionError, "forget keys whose files are older than the TTL")}.get(case)
    if case == "pipelined":
        from tests.spark.test_keyed_stream_write import _source, _stream
        _source(tmp_path / "src", [[(1, "eu", "+I")]])
        with pytest.raises(Exception, match="commit.mode=pipelined into the dynamic-bucket table"):
            _stream(spark, tmp_path / "src", path, str(tmp_path / "chk"),
                    {"primary-key": "id", "partition": "name", "commit.mode": "pipelined"})
    else:
        with pytest.raises(expected[0], match=expected[1]):
            lakesink.write(df, path, primary_key=["user_id"], partition_by=["region"], options=options)
    assert not os.path.exists(os.path.join(path, "snapshot"))


@pytest.mark.full
def test_row_level_changes_find_a_moved_key_in_its_new_partition(spark, tmp_path):
    """delete / update read the table merged per bucket (a moved key's -D in its old partition and
    its row in the new one are versions of different buckets) and write their -D / +U rows into
    the partition the key lives in."""
    path = str(tmp_path / "wh" / "shop.db" / "changes")
    lakesink.write(spark.createDataFrame(_first(6), SCHEMA), path, primary_key=["user_id"], partition_by=["region"])
    lakesink.write(spark.createDataFrame([(0, "us", "b0", 0), (1, "eu", "b1", 1)], SCHEMA), path)
    lakesink.delete(spark, path, "user_id = 1")
    lakesink.update(spark, path, {"name": "'u0'"}, "user_id = 0")
    want = {i: (REGIONS[i % 2], f"a{i}", i) for i in range(2, 6)}
    want[0] = ("us", "u0", 0)
    assert _by_key(path) == want
    assert _partition(path, "eu") == {2, 4}


@pytest.mark.full
def test_a_format_paimon_stream_and_a_key_holding_a_partition_column(spark, tmp_path):
    """writeStream.format("paimon") moves keys too; a primary key holding one of two partition
    columns (dt) is one key per day: user 1 of day d1 moves region, user 1 of day d2 stays; with
    changelog-producer=input the moved key's -D is in the changelog."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    schema = "user_id long, region string, dt string, name string"
    path = str(tmp_path / "wh" / "shop.db" / "daily")
    lakesink.write(spark.createDataFrame([(1, "eu", "d1", "a"), (1, "eu", "d2", "b"), (2, "us", "d1", "c")], schema),
                   path, primary_key=["user_id", "dt"], partition_by=["region", "dt"],
                   options={"changelog-producer": "input"})
    source = tmp_path / "src"
    source.mkdir()
    pq.write_table(pa.table({"user_id": [1, 2], "region": ["us", "us"], "dt": ["d1", "d1"], "name": ["x", "y"]}),
                   source / "0.parquet")
    query = (spark.readStream.schema(schema).parquet(str(source)).coalesce(1).writeStream.format("paimon")
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start(path))
    query.awaitTermination()
    assert sorted((r["user_id"], r["region"], r["dt"], r["name"]) for r in read_table(path).to_pylist()) == [
        (1, "eu", "d2", "b"), (1, "us", "d1", "x"), (2, "us", "d1", "y")]
    from lakesink.paimon.table.tables import open_table
    assert open_table(path).snapshot_manager().get_latest_snapshot().changelog_record_count == 3  # x, y, -D


# Default: lakesink.write; ./dev full: format("paimon") (each key's rows in one task).
@pytest.mark.parametrize("path_kind", ["fast", pytest.param("native", marks=pytest.mark.full)])
def test_a_dv_table_key_moving_twice_is_found_where_it_lives(spark, tmp_path, path_kind):
    """deletion-vectors.enabled: a moved key's old row is marked deleted, not retracted by a -D
    row, so the keys' index is read as Paimon's readers read the table (level >= 1, marked rows
    left out). A key moving twice (eu -> us -> eu) and a deleted key coming back elsewhere are
    found where they live; every reader reads each key once, in its partition."""
    from tests.helpers import write
    from tests.spark.test_deletion_vectors import live_files
    from tests.unpatched import read_unpatched

    schema = "user_id long, region string, name string, score long, op string"
    path = str(tmp_path / "wh" / "shop.db" / "dv")
    want = {i: (REGIONS[i % 2], f"a{i}", i) for i in range(12)}
    lakesink.write(spark.createDataFrame([(i, *want[i]) for i in range(12)], SCHEMA), path,
                   primary_key=["user_id"], partition_by=["region"],
                   options={"deletion-vectors.enabled": "true", "dynamic-bucket.target-row-num": "3"})
    rounds = [[(0, "us", "b0", 100, "+I"), (1, "eu", "b1", 101, "+I"), (4, "eu", None, None, "-D"),
               (7, "ap", "b7", 107, "+I")],
              [(0, "eu", "c0", 200, "+I"), (1, "us", "c1", 201, "+I"), (4, "us", "c4", 204, "+I"),
               (6, "eu", None, None, "-D"), (7, "us", "c7", 207, "+I")],
              [(1, "us", None, None, "-D"), (6, "ap", "d6", 306, "+I"), (7, "eu", "d7", 307, "+I")]]
    dv_seen = False
    for changes in rounds:
        df = spark.createDataFrame(changes, schema)
        # rowkind.field names the op column for each write, never stored (row-level changes below)
        write(df.repartition(2, "user_id") if path_kind == "native" else df, path, path_kind,
              **{"rowkind.field": "op"})
        for key, region, name, score, op in changes:
            if op == "-D":
                want.pop(key, None)
            else:
                want[key] = (region, name, score)
        assert _by_key(path) == want
        files, vectors = live_files(path)
        assert files and all(level > 0 for level, _ in files)
        dv_seen = dv_seen or bool(vectors)
    assert dv_seen, "no deletion vector was written: moved keys' old rows were all rewritten"
    rows = read_unpatched(path).to_pylist()
    assert sorted(r["user_id"] for r in rows) == sorted(want)
    assert {r["user_id"]: (r["region"], r["name"], r["score"]) for r in rows} == want
    ours = lakesink.read(spark, path).collect()
    assert {r["user_id"]: (r["region"], r["name"], r["score"]) for r in ours} == want and len(ours) == len(want)
    for region in ("eu", "us", "ap"):
        assert _partition(path, region) == {k for k, v in want.items() if v[0] == region}
    assert not leftover_files(path)
    if path_kind == "native":  # ./dev full: row-level changes find a twice-moved key where it lives
        lakesink.delete(spark, path, "user_id = 7")
        lakesink.update(spark, path, {"name": "'u0'"}, "user_id = 0")
        want.pop(7)
        want[0] = ("eu", "u0", 200)
        assert _by_key(path) == want
        assert {r["user_id"] for r in read_unpatched(path).to_pylist()} == set(want)
        lakesink.compact(spark, path, progress=False)  # the vectors applied and dropped
        files, vectors = live_files(path)
        assert {level for level, _ in files} == {5} and not vectors
        assert _by_key(path) == want
        lakesink.write(spark.createDataFrame([(0, "us", "e0", 400)], SCHEMA), path)  # moves once more
        want[0] = ("us", "e0", 400)
        assert _by_key(path) == want
