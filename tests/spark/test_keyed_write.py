"""Primary-key and fixed-bucket tables written by `lakesink.write`, read back with pypaimon."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lakesink
from lakesink.errors import ConfigurationError, SchemaMismatchError
from tests.helpers import latest_snapshot_id, leftover_files, pypaimon_append, read_table

SCHEMA = "id long, name string, dt string"


def _df(spark, rows, schema=SCHEMA, partitions=1):
    return spark.createDataFrame(rows, schema).coalesce(partitions)


def _by_key(path, key="id"):
    rows = read_table(path).to_pylist()
    keys = [tuple(r[k] for k in ([key] if isinstance(key, str) else key)) for r in rows]
    assert len(keys) == len(set(keys)), "a key was returned twice"
    return {k: r for k, r in zip(keys, rows)}


def _files_by_bucket(path):
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(path)
    out = []
    for split in table.new_read_builder().new_scan().plan().splits():
        out += [(tuple(split.partition.values), split.bucket, f) for f in split.files]
    return table, out


def _check_buckets(path):
    """Every row sits in the bucket pypaimon's own extractor assigns to it."""
    import pyarrow.parquet as pq
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path
    from pypaimon.write.row_key_extractor import FixedBucketRowKeyExtractor
    table, files = _files_by_bucket(path)
    extractor = FixedBucketRowKeyExtractor(table.table_schema)
    names = [f.name for f in table.table_schema.fields]
    for partition, bucket, meta in files:
        data = pq.ParquetFile(canonical_data_file_path(table, partition, bucket, meta.file_name)).read(columns=names)
        _, buckets = extractor.extract_partition_bucket_batch(data.combine_chunks().to_batches()[0])
        assert set(buckets) == {bucket}


def test_upserts_across_writes(spark, table_path):
    rows1 = [(i, f"a{i}", "d1" if i % 2 else "d2") for i in range(200)]
    rows1 += [(5, "a5-later", "d1"), (6, "a6-later", "d2")]  # same input partition: the later row wins
    r1 = lakesink.write(_df(spark, rows1), table_path, primary_key=["id", "dt"], partition_by=["dt"],
                        options={"bucket": "8"})
    assert r1.snapshot_id == 1
    got = _by_key(table_path, ["id", "dt"])
    assert len(got) == 200 and got[(5, "d1")]["name"] == "a5-later" and got[(6, "d2")]["name"] == "a6-later"

    lakesink.write(_df(spark, [(i, f"b{i}", "d1" if i % 2 else "d2") for i in range(150, 300)], partitions=3),
                   table_path)
    lakesink.write(_df(spark, [(i, f"c{i}", "d1" if i % 2 else "d2") for i in range(0, 300, 7)]), table_path)
    expected = {}
    for rows in (rows1, [(i, f"b{i}", "d1" if i % 2 else "d2") for i in range(150, 300)],
                 [(i, f"c{i}", "d1" if i % 2 else "d2") for i in range(0, 300, 7)]):
        for i, name, dt in rows:
            expected[(i, dt)] = name
    got = _by_key(table_path, ["id", "dt"])
    assert {k: r["name"] for k, r in got.items()} == expected
    _check_buckets(table_path)
    table, files = _files_by_bucket(table_path)
    assert table.primary_keys == ["id", "dt"] and table.options.bucket() == 8
    # Sequence numbers of a (partition, bucket) grow with each write; every file is level 0 with real key ranges.
    by_bucket = {}
    for partition, bucket, meta in files:
        assert meta.level == 0 and meta.min_key.values[0] <= meta.max_key.values[0]
        by_bucket.setdefault((partition, bucket), []).append((meta.min_sequence_number, meta.max_sequence_number))
    for ranges in by_bucket.values():
        ranges.sort()
        assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), ranges
    assert leftover_files(table_path) == set()


def test_key_file_layout_matches_pypaimon(spark, table_path):
    import pyarrow.parquet as pq
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path
    lakesink.write(_df(spark, [(3, "x", "d"), (1, "y", "d"), (2, "z", "d")]), table_path, primary_key=["id"],
                   partition_by=["dt"], options={"bucket": "1"})
    table, files = _files_by_bucket(table_path)
    (partition, bucket, meta), = files
    data = pq.ParquetFile(canonical_data_file_path(table, partition, bucket, meta.file_name)).read()
    assert data.schema.names == ["_KEY_id", "_SEQUENCE_NUMBER", "_VALUE_KIND", "id", "name", "dt"]
    assert data.schema.field("_SEQUENCE_NUMBER").type == pa.int64()
    assert data.schema.field("_VALUE_KIND").type == pa.int8()
    assert data.column("_KEY_id").to_pylist() == [1, 2, 3]  # sorted by key
    assert meta.min_key.values == [1] and meta.max_key.values == [3]
    assert (meta.min_sequence_number, meta.max_sequence_number) == (0, 2)
    assert meta.key_stats.min_values.get_field(0) == 1 and meta.key_stats.max_values.get_field(0) == 3


def test_unpartitioned_files_are_sorted_by_key_with_one_open_file_per_bucket(spark, table_path):
    """Unpartitioned tables: each task sorts by key first and writes its buckets' files at once
    (Spark's concurrent writers): still one file per bucket, sorted, each key once, in the bucket
    Paimon computes; the session's setting is put back."""
    import pyarrow.parquet as pq
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path
    key = "spark.sql.maxConcurrentOutputFileWriters"
    rows = [((i * 7919) % 500, f"v{i}", "d") for i in range(3000)]  # every key 6 times, scattered
    for preset in (None, "2"):
        if preset is not None:
            spark.conf.set(key, preset)
        try:
            lakesink.write(_df(spark, rows, partitions=4), table_path, primary_key=["id"], options={"bucket": "8"})
            assert spark.conf.get(key, None) == preset
        finally:
            spark.conf.unset(key)
    table, files = _files_by_bucket(table_path)
    assert sorted({b for _, b, _ in files}) == list(range(8))
    for partition, bucket, meta in files:
        data = pq.ParquetFile(canonical_data_file_path(table, partition, bucket, meta.file_name)).read()
        keys = data.column("_KEY_id").to_pylist()
        assert keys == sorted(set(keys)), f"bucket {bucket}: keys not sorted or repeated"
        assert (meta.min_key.values[0], meta.max_key.values[0]) == (keys[0], keys[-1])
    _check_buckets(table_path)
    got = _by_key(table_path)
    last = {k: name for k, name, _ in rows}  # input slices in order: a later row is later in the input
    assert {k[0]: r["name"] for k, r in got.items()} == last


def test_overlapping_keyed_writes_keep_the_open_files_setting_until_the_last_ends(spark):
    """Two writes of one session in threads: the first to end must not take the setting from
    the other (whose files would lose their key order)."""
    import threading
    from lakesink.spark.keyed_write import concurrent_writers
    key = "spark.sql.maxConcurrentOutputFileWriters"
    first_in, second_done = threading.Event(), threading.Event()
    seen = {}

    def first():
        with concurrent_writers(spark, 8):
            first_in.set()
            second_done.wait(30)
            seen["first, after the second ended"] = spark.conf.get(key, None)

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(30)
    with concurrent_writers(spark, 16):
        seen["second"] = spark.conf.get(key, None)
    second_done.set()
    thread.join(30)
    assert seen == {"second": "16", "first, after the second ended": "16"}
    assert spark.conf.get(key, None) is None


def test_a_rewrites_open_writers_get_row_groups_that_fit_in_the_heap_together(spark):
    """Parquet's writers share 95% of a JVM's heap at a full row group each: past it they shrink
    row groups and log a warning per writer, so a rewrite with open files asks for smaller ones."""
    from lakesink.spark.session import cores
    from lakesink.spark.settings import _mib, row_group_bytes, row_group_mib
    assert row_group_mib(16, heap_mib=1024, tasks=2) == 0.9 * 1024 / 34  # 17 writers a task: ~27 MiB
    assert row_group_mib(16, heap_mib=65536, tasks=2) == 128  # Parquet's default fits
    assert row_group_mib(16, heap_mib=65536, tasks=2, block_mib=256) == 256
    heap = _mib(spark.conf.get("spark.driver.memory", "1g"))
    assert row_group_bytes(spark, 16) == int(row_group_mib(16, heap, cores(spark)) * (1 << 20))
    key = "spark.hadoop.parquet.block.size"
    spark.conf.set(key, str(1 << 20))
    try:
        assert row_group_bytes(spark, 16) == 1 << 20  # the session's own smaller row groups stay
    finally:
        spark.conf.unset(key)


def test_row_kinds_delete_and_update(spark, table_path):
    schema = "id long, v string, op string"
    opts = {"bucket": "4", "rowkind.field": "op"}
    lakesink.write(_df(spark, [(i, f"v{i}", "+I") for i in range(20)], schema), table_path,
                   primary_key=["id"], options=opts)
    lakesink.write(_df(spark, [(1, "v1", "-U"), (1, "new1", "+U"), (2, "v2", "-D"), (3, "x", "+I"),
                               (3, "x", "-D"), (30, "v30", "+I")], schema), table_path)
    got = _by_key(table_path)
    assert (2,) not in got and (3,) not in got
    assert got[(1,)]["v"] == "new1" and got[(30,)]["v"] == "v30" and len(got) == 19
    _, files = _files_by_bucket(table_path)
    assert sum(f.delete_row_count for _, _, f in files) == 2  # the -D of key 2 and of key 3


def test_first_row_keeps_the_first(spark, table_path):
    """Paimon readers (pypaimon's, Java's batch scan) skip level-0 files of first-row tables: like
    Paimon's writers, lakesink compacts them above level 0 after each write, so rows are readable
    at once. The first row of a key has the lowest sequence number."""
    opts = {"bucket": "2", "merge-engine": "first-row"}
    lakesink.write(_df(spark, [(1, "first", "d"), (1, "second", "d"), (2, "a", "d")]), table_path,
                   primary_key=["id"], options=opts)
    assert {k[0]: r["name"] for k, r in _by_key(table_path).items()} == {1: "first", 2: "a"}
    lakesink.write(_df(spark, [(1, "third", "d"), (3, "b", "d")]), table_path)
    table, files = _files_by_bucket(table_path)
    assert table.table_schema.options["merge-engine"] == "first-row"
    assert {f.level for _, _, f in files} == {5}
    assert {k[0]: r["name"] for k, r in _by_key(table_path).items()} == {1: "first", 2: "a", 3: "b"}


def test_sequence_field_orders_versions(spark, table_path):
    schema = "id long, v string, ts long"
    opts = {"bucket": "2", "sequence.field": "ts"}
    lakesink.write(_df(spark, [(1, "new", 10), (1, "old", 5), (2, "a", 1)], schema), table_path,
                   primary_key=["id"], options=opts)
    assert _by_key(table_path)[(1,)]["v"] == "new"
    lakesink.write(_df(spark, [(1, "stale", 7), (2, "b", 2)], schema), table_path)
    got = _by_key(table_path)
    assert got[(1,)]["v"] == "new" and got[(2,)]["v"] == "b"


def test_fixed_bucket_append_table(spark, table_path):
    schema = "user_id long, amount long"
    rows = [(i % 37, i) for i in range(500)]
    lakesink.write(_df(spark, rows, schema, partitions=2), table_path, options={"bucket": "4", "bucket-key": "user_id"})
    lakesink.write(_df(spark, rows[:100], schema), table_path)
    data = read_table(table_path)
    assert sorted(zip(data.column("user_id").to_pylist(), data.column("amount").to_pylist())) == sorted(rows + rows[:100])
    table, files = _files_by_bucket(table_path)
    assert not table.is_primary_key_table and {b for _, b, _ in files} <= {0, 1, 2, 3}
    _check_buckets(table_path)


def test_mixed_writers_one_row_per_key(spark, table_path):
    lakesink.write(_df(spark, [(i, f"lake{i}", "d") for i in range(0, 100)]), table_path, primary_key=["id"],
                   options={"bucket": "3"})
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(table_path)
    pypaimon_append(table, pa.table({"id": pa.array(range(50, 150), pa.int64()),
                                     "name": [f"py{i}" for i in range(50, 150)], "dt": ["d"] * 100},
                                    schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                      ("name", pa.string()), ("dt", pa.string())])))
    lakesink.write(_df(spark, [(i, f"lake2-{i}", "d") for i in range(120, 200)]), table_path)
    got = _by_key(table_path)
    expected = {(i,): (f"lake{i}" if i < 50 else f"py{i}" if i < 120 else f"lake2-{i}") for i in range(200)}
    assert {k: r["name"] for k, r in got.items()} == expected
    _check_buckets(table_path)


def test_another_writer_committing_to_the_same_buckets_meanwhile_is_a_conflict(spark, table_path, monkeypatch):
    """Sequence numbers are planned on a snapshot: a commit landing in the same buckets after it
    would be overtaken by ours (its later update lost). Paimon's rule: one writer per bucket."""
    from pypaimon.table.file_store_table import FileStoreTable

    import lakesink.spark.keyed_write as keyed_write
    from lakesink.errors import CommitConflictError

    lakesink.write(_df(spark, [(i, f"v1-{i}", "d") for i in range(20)]), table_path, primary_key=["id"],
                   options={"bucket": "1"})
    listed = keyed_write.list_parquet_files

    def another_writer_commits_first(*args, **kwargs):
        pypaimon_append(FileStoreTable.from_path(table_path),
                        pa.table({"id": pa.array([3], pa.int64()), "name": ["other"], "dt": ["d"]},
                                 schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                   ("name", pa.string()), ("dt", pa.string())])))
        return listed(*args, **kwargs)

    monkeypatch.setattr(keyed_write, "list_parquet_files", another_writer_commits_first)
    with pytest.raises(CommitConflictError, match="bucket"):
        lakesink.write(_df(spark, [(3, "mine", "d"), (4, "mine", "d")]), table_path)
    got = {k[0]: r["name"] for k, r in _by_key(table_path).items()}
    assert got[3] == "other" and got[4] == "v1-4" and len(got) == 20  # nothing of ours, nothing lost
    assert leftover_files(table_path) == set()
    monkeypatch.undo()
    lakesink.write(_df(spark, [(3, "mine", "d")]), table_path)  # a re-run plans on the new state
    assert _by_key(table_path)[(3,)]["name"] == "mine"


def _while_another_writer_commits(spark, table_path, rows, keys, marker):
    """A DataFrame of `rows` whose task first lets another writer (pypaimon's own) commit `keys`
    into the table: after the write reading it was planned, before its commit (once: `marker`)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("dt", pa.string())])
    others = pa.table({"id": pa.array(list(keys), pa.int64()), "name": ["b"] * len(keys), "dt": ["d"] * len(keys)},
                      schema=schema)

    def task(batches):
        for batch in batches:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                from pypaimon.table.file_store_table import FileStoreTable
                pypaimon_append(FileStoreTable.from_path(table_path), others)
            yield batch

    return _df(spark, rows).mapInArrow(task, SCHEMA)


@pytest.mark.parametrize("path_kind", ["fast", pytest.param("native", marks=pytest.mark.full)])
def test_two_writers_of_one_bucket_with_keys_apart_both_commit_and_later_writes_win(spark, table_path, tmp_path,
                                                                                  path_kind):
    """Another writer commits into the bucket while a write runs (both planned on the same
    snapshot, so with the same sequence numbers): the write's keys do not meet the other's, so it
    commits after it. Keys meeting: a KeyRangeConflictError naming the bucket, the keys and the
    other writer, and the table is as the other writer left it."""
    from lakesink.errors import KeyRangeConflictError
    from tests.helpers import snapshots, write

    lakesink.write(_df(spark, [(i, f"v1-{i}", "d") for i in range(100)]), table_path, primary_key=["id"],
                   options={"bucket": "1"})
    apart = _while_another_writer_commits(spark, table_path, [(3, "a", "d"), (50, "a", "d")], range(200, 210),
                                          str(tmp_path / "apart"))
    write(apart, table_path, path_kind)  # keys 3..50; the other's 200..209
    users = [s.commit_user for s in snapshots(table_path)]
    assert len(users) == 3 and users[0] != users[1] != users[2]
    expected = {i: f"v1-{i}" for i in range(100)} | {3: "a", 50: "a"} | {k: "b" for k in range(200, 210)}
    assert {k[0]: r["name"] for k, r in _by_key(table_path).items()} == expected

    meeting = _while_another_writer_commits(spark, table_path, [(10, "a2", "d"), (60, "a2", "d")], [40, 300],
                                            str(tmp_path / "meeting"))
    with pytest.raises(Exception) as caught:  # keys 10..60 meet the other's 40..300
        write(meeting, table_path, path_kind)
    other = snapshots(table_path)[-1].commit_user
    assert other != users[-1] and len(snapshots(table_path)) == 4  # the other's snapshot, none of ours
    assert "keys 40 to 60 to partition (), bucket 0" in str(caught.value) and repr(other) in str(caught.value)
    if path_kind == "fast":
        assert isinstance(caught.value, KeyRangeConflictError)
        assert caught.value.other_commit_user == other and caught.value.key_range == ((40,), (60,))
    expected |= {40: "b", 300: "b"}
    assert {k[0]: r["name"] for k, r in _by_key(table_path).items()} == expected
    assert leftover_files(table_path) == set()
    # Later writes over keys of both writers win: they plan above every file of the bucket.
    write(_df(spark, [(3, "c", "d"), (205, "c", "d"), (40, "c", "d")]), table_path, path_kind)
    expected |= {3: "c", 205: "c", 40: "c"}
    assert {k[0]: r["name"] for k, r in _by_key(table_path).items()} == expected


def test_replay_of_committed_identity_is_skipped(spark, table_path):
    df = _df(spark, [(i, "x", "d") for i in range(10)])
    kw = dict(primary_key=["id"], options={"bucket": "2"}, commit_user="nightly", commit_identifier=7)
    first = lakesink.write(df, table_path, **kw)
    again = lakesink.write(df, table_path, **kw)
    assert first.snapshot_id == 1 and again.skipped_replay and latest_snapshot_id(table_path) == 1
    assert leftover_files(table_path) == set()


def _unchanged(table_path, before_snapshot):
    assert latest_snapshot_id(table_path) == before_snapshot
    assert leftover_files(table_path) == set()


@pytest.mark.parametrize("case", ["missing_key", "null_key", "other_key", "other_buckets", "bad_kind",
                                  "cross_partition_sequence", "postpone_bucket", "unknown_engine"])
def test_bad_input_changes_nothing(spark, table_path, case):
    schema = "id long, name string, op string"
    lakesink.write(_df(spark, [(1, "a", "+I")], schema), table_path, primary_key=["id"],
                   options={"bucket": "2", "rowkind.field": "op"})
    before = latest_snapshot_id(table_path)
    expected = {
        "missing_key": (SchemaMismatchError, "missing column"),
        "null_key": (ConfigurationError, "primary-key column 'id' is null"),
        "other_key": (ConfigurationError, "differs from the table's primary key"),
        "other_buckets": (ConfigurationError, "bucket"),
        "bad_kind": (ConfigurationError, "'+X'"),
        "cross_partition_sequence": (ConfigurationError, "cross-partition mode.*where Paimon refuses a sequence.field"),
        "postpone_bucket": (ConfigurationError, "changelog-producer=input on a postpone-bucket table"),
        "unknown_engine": (ConfigurationError, "merge-engine='partial_update' is not a Paimon merge engine"),
    }[case]
    other = table_path + "_new"
    with pytest.raises(expected[0], match=expected[1].replace("+", r"\+").replace("(", r"\(")):
        if case == "missing_key":
            lakesink.write(spark.createDataFrame([("b", "+I")], "name string, op string"), table_path)
        elif case == "null_key":
            lakesink.write(_df(spark, [(2, "b", "+I"), (None, "c", "+I")], schema), table_path)
        elif case == "other_key":
            lakesink.write(_df(spark, [(2, "b", "+I")], schema), table_path, primary_key=["name"])
        elif case == "other_buckets":
            lakesink.write(_df(spark, [(2, "b", "+I")], schema), table_path, options={"bucket": "4"})
        elif case == "bad_kind":
            lakesink.write(_df(spark, [(2, "b", "+I"), (3, "c", "+X")], schema), table_path)
        elif case == "cross_partition_sequence":  # a dynamic-bucket key without the partition column
            lakesink.write(_df(spark, [(2, "b", "+I")], schema), other, primary_key=["id"], partition_by=["op"],
                           options={"sequence.field": "name"})
        elif case == "postpone_bucket":
            lakesink.write(_df(spark, [(2, "b", "+I")], schema), other, primary_key=["id"],
                           options={"bucket": "-2", "changelog-producer": "input"})
        else:
            lakesink.write(_df(spark, [(2, "b", "+I")], schema), other, primary_key=["id"],
                           options={"bucket": "2", "merge-engine": "partial_update"})
    _unchanged(table_path, before)
    assert not os.path.exists(other)
    assert _by_key(table_path) == {(1,): {"id": 1, "name": "a", "op": "+I"}}


@pytest.mark.parametrize("key", [["id"], []], ids=["primary-key", "fixed-bucket-append"])
def test_unpartitioned_buckets_are_spread_evenly_over_the_write_tasks(spark, table_path, key):
    """One shuffle gives each write task whole buckets (bucket % tasks), up to four tasks per core
    of the cluster and at most one per bucket: a small micro-batch is not coalesced into one task."""
    from lakesink.options import WriteOptions
    from lakesink.paimon.write.keyed_plan import prepare_keyed_target
    from lakesink.spark.arrow import spark_to_arrow
    from lakesink.spark.keyed import BUCKET, keyed_frame
    options = {"bucket": "8", **({"primary-key": "id"} if key else {"bucket-key": "id"})}
    df = _df(spark, [(i, f"v{i}", "d") for i in range(400)], partitions=3)
    lakesink.write(df, table_path, options=options)  # the second plan continues sequence numbers
    _, layout, spec, next_sequence = prepare_keyed_target(table_path, spark_to_arrow(df.schema),
                                                          WriteOptions.parse(options))
    frame, _, _ = keyed_frame(df, spec, list(layout.fields), next_sequence)
    plan = frame._jdf.queryExecution().executedPlan().toString()  # before it runs: the initial plan
    assert plan.count("Exchange") == 1, plan
    tasks = min(8, 4 * spark.sparkContext.defaultParallelism)
    placed = frame.rdd.mapPartitionsWithIndex(lambda task, rows: {(task, r[BUCKET]) for r in rows}).collect()
    assert frame.rdd.getNumPartitions() == tasks == 8
    assert sorted(b for _, b in placed) == list(range(8)), "a bucket in two tasks, or missing"
    assert all(b % tasks == task for task, b in placed)
