"""Postpone-bucket primary-key tables (bucket=-2): writes on every path put unbucketed key-value
files into `bucket-postpone`, which readers skip (pypaimon's scan and `lakesink.read` show what
Paimon's readers show: only compacted rows); `lakesink.compact` assigns the rows to real buckets
by Paimon's bucket function and merges them with those buckets' files in one COMPACT snapshot.
Java Paimon reads the compacted tables in tests/interop/test_postpone_buckets.py."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest

import lakesink
from lakesink.errors import ConfigurationError, UnsupportedTableError
from lakesink.paimon.table.tables import open_table
from tests.helpers import leftover_files, read_table, snapshots
from tests.spark.test_keyed_stream_write import SCHEMA as SOURCE_SCHEMA, _source, _stream
from tests.spark.test_streaming import source_stream

pytestmark = pytest.mark.spark

SCHEMA = "id long, dt string, v string"
# Paimon's postpone writer names: data--u-<commit user>-s-<writer id>-w-<uuid>-<n>.<format>
POSTPONE_NAME = re.compile(r"^data--u-(.+)-s-(\d+)-w-[0-9a-f-]{36}-\d+\.parquet$")


def _rows(ids, tag):
    return [(i, f"d{i % 2}", f"{tag}{i}") for i in ids]


def _want(*writes):
    out = {}
    for ids, tag in writes:
        out.update({(i, f"d{i % 2}"): f"{tag}{i}" for i in ids})
    return out


def _by_key(spark, path):
    """{(id, dt): v} as pypaimon reads it, checked equal to lakesink.read's, no key twice."""
    rows = read_table(path).to_pylist()
    py = {(r["id"], r["dt"]): r["v"] for r in rows}
    assert len(py) == len(rows), "pypaimon read a key twice"
    lake = [((r.id, r.dt), r.v) for r in lakesink.read(spark, path).collect()]
    assert len(dict(lake)) == len(lake), "lakesink.read read a key twice"
    assert dict(lake) == py
    return py


def _entries(path):
    """The latest snapshot's live manifest entries."""
    from lakesink.paimon.commit.live_files import live_entries
    return list(live_entries(open_table(path)))


def _check_buckets(path, count):
    """No postpone file is live; every file is in a real bucket of `count` (its entry says so),
    and every key lies in the bucket Paimon's bucket function gives it."""
    import pyarrow.parquet as pq

    from lakesink.paimon.files.keyhash import bucket_ids
    table = open_table(path)
    for e in _entries(path):
        assert 0 <= e.bucket < count and e.total_buckets == count, (e.bucket, e.total_buckets)
        file_path = f"{path}/dt={e.partition.values[0]}/bucket-{e.bucket}/{e.file.file_name}"
        data = pq.ParquetFile(file_path).read()
        assert set(bucket_ids(data, ["id"], table.table_schema.fields, count).tolist()) <= {e.bucket}


def test_writes_wait_in_the_postpone_bucket_until_compaction(spark, tmp_path):
    path = str(tmp_path / "wh" / "db.db" / "t")
    lakesink.write(spark.createDataFrame(_rows(range(20), "a"), SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={"bucket": "-2"})
    (spark.createDataFrame(_rows(range(10, 30), "b"), SCHEMA).repartition(2).write.format("paimon")
     .mode("append").save(path))
    table = open_table(path)
    assert table.total_buckets == -2 and table.table_schema.options["bucket"] == "-2"
    entries = _entries(path)
    assert entries and all(e.bucket == -2 and e.total_buckets == -2 and e.file.level == 0 for e in entries)
    writers = set()
    for e in entries:
        name = POSTPONE_NAME.match(e.file.file_name)
        assert name, e.file.file_name
        writers.add(name.group(1))
        assert os.path.exists(f"{path}/dt={e.partition.values[0]}/bucket-postpone/{e.file.file_name}")
    commits = {s.commit_user for s in snapshots(path)}
    assert writers == commits and len(commits) == 2  # each write's commit user names its files
    assert not os.path.exists(f"{path}/dt=d0/bucket-0")
    # Paimon's readers skip the postpone bucket: nothing is visible before compaction.
    assert _by_key(spark, path) == {}

    report = lakesink.compact(spark, path, progress=False)
    assert report.commit_kind == "COMPACT" and report.files_removed == len(entries)
    assert snapshots(path)[-1].commit_kind == "COMPACT"
    assert _by_key(spark, path) == _want((range(20), "a"), (range(10, 30), "b"))
    # A partition without real buckets gets Paimon's estimate: one bucket per 1 gb of postpone files.
    _check_buckets(path, 1)
    assert all(e.file.level == 5 for e in _entries(path))  # fully compacted: the highest level
    assert lakesink.compact(spark, path, progress=False).snapshot_id is None  # nothing left to assign
    assert leftover_files(path) == set()  # every data file on disk is one a snapshot references


def test_compaction_merges_into_existing_buckets_and_keeps_their_count(spark, tmp_path):
    path = str(tmp_path / "t")
    opts = {"bucket": "-2", "postpone.default-bucket-num": "3", "rowkind.field": "op"}
    schema = SCHEMA + ", op string"
    lakesink.write(spark.createDataFrame([(*r, "+I") for r in _rows(range(40), "a")], schema), path,
                   primary_key=["id", "dt"], partition_by=["dt"], options=opts)
    lakesink.compact(spark, path, progress=False)
    _check_buckets(path, 3)
    first = _by_key(spark, path)
    assert first == _want((range(40), "a"))
    # Updates and deletes wait in the postpone bucket: readers still see the compacted rows.
    changes = [(*r, "+U") for r in _rows(range(30, 50), "b")] + [(*r, "-D") for r in _rows(range(5), "x")]
    lakesink.write(spark.createDataFrame(changes, schema), path, options={"rowkind.field": "op"})
    (spark.createDataFrame([(*r, "+U") for r in _rows(range(45, 48), "c")], schema).write.format("paimon")
     .option("rowkind.field", "op").mode("append").save(path))
    assert _by_key(spark, path) == first
    lakesink.compact(spark, path, progress=False)
    want = _want((range(5, 40), "a"), (range(30, 50), "b"), (range(45, 48), "c"))
    assert _by_key(spark, path) == want
    _check_buckets(path, 3)
    # A partition overwrite replaces d0's buckets with postpone files: d0 reads empty until compacted.
    lakesink.write(spark.createDataFrame([(*r, "+I") for r in _rows([100, 102], "o")], schema), path,
                   mode="overwrite", options={"dynamic-partition-overwrite": "true"})
    d1 = {k: v for k, v in want.items() if k[1] == "d1"}
    assert _by_key(spark, path) == d1
    lakesink.compact(spark, path, progress=False)
    assert _by_key(spark, path) == {**d1, **_want(([100, 102], "o"))}
    _check_buckets(path, 3)


def test_bucket_count_from_rows_and_merge_engines(spark, tmp_path):
    path = str(tmp_path / "t")
    opts = {"bucket": "-2", "postpone.target-row-num-per-bucket": "4", "merge-engine": "aggregation",
            "fields.v.aggregate-function": "sum"}
    df = spark.createDataFrame([(i % 10, "d0", 1) for i in range(30)], "id long, dt string, v long")
    lakesink.write(df, path, primary_key=["id", "dt"], partition_by=["dt"], options=opts)
    df.coalesce(1).write.format("paimon").mode("append").save(path)  # one task: one writer
    lakesink.compact(spark, path, progress=False)
    # 20 postpone rows (each write merged its own versions of a key), 4 a bucket: 5 buckets
    _check_buckets(path, 5)
    assert {r["id"]: r["v"] for r in read_table(path).to_pylist()} == {i: 6 for i in range(10)}


# ./dev full: streams (the default run: batch writes and compaction; streams share the write)
@pytest.mark.full
def test_streams_write_postpone_files(spark, tmp_path):
    source, path = tmp_path / "src", str(tmp_path / "t")
    _source(source, [[(1, "a", "+I"), (2, "b", "+I")], [(1, "aa", "+U"), (2, "b", "-D"), (3, "c", "+I")]])
    _stream(spark, source, path, str(tmp_path / "chk"),
            {"primary-key": "id", "bucket": "-2", "rowkind.field": "op", "postpone.default-bucket-num": "2"})
    assert read_table(path).num_rows == 0
    assert all(e.bucket == -2 for e in _entries(path))
    lakesink.compact(spark, path, progress=False)
    assert {r["id"]: r["name"] for r in read_table(path).to_pylist()} == {1: "aa", 3: "c"}
    # format("paimon") streams into it as well (one writer per Spark task), a batch per file
    (source_stream(spark, source, SOURCE_SCHEMA)
     .writeStream.format("paimon").option("checkpointLocation", str(tmp_path / "chk2"))
     .trigger(availableNow=True).start(path).awaitTermination())
    assert {e.bucket for e in _entries(path)} == {-2, 0, 1}
    lakesink.compact(spark, path, progress=False)
    assert {r["id"]: r["name"] for r in read_table(path).to_pylist()} == {1: "aa", 3: "c"}
    # Pipelined commits: batch N+1 planned while N commits, numbered above it.
    _source(source, [[(1, "a", "+I"), (2, "b", "+I")], [(1, "aa", "+U"), (2, "b", "-D"), (3, "c", "+I")],
                     [(1, "x", "+U"), (4, "d", "+I")], [(4, "dd", "+U"), (3, "c", "-D")]])
    _stream(spark, source, path, str(tmp_path / "chk3"), {"commit.mode": "pipelined"})
    assert {r["id"]: r["name"] for r in read_table(path).to_pylist()} == {1: "aa", 3: "c"}
    lakesink.compact(spark, path, progress=False)
    assert {r["id"]: r["name"] for r in read_table(path).to_pylist()} == {1: "x", 4: "dd"}


def test_what_lakesink_cannot_honour_is_refused_before_anything_is_written(spark, tmp_path):
    df = spark.createDataFrame(_rows(range(3), "a"), SCHEMA)
    for options, word in (({"bucket": "-2", "changelog-producer": "input"}, "changelog-producer"),
                          ({"bucket": "-2", "postpone.batch-write-fixed-bucket": "true"},
                           "postpone.batch-write-fixed-bucket"),
                          ({"bucket": "-2", "bucket-function.type": "mod"}, "bucket-function.type")):
        path = tmp_path / word
        with pytest.raises(ConfigurationError, match=re.escape(word)):
            lakesink.write(df, str(path), primary_key=["id", "dt"], options=options)
        assert not path.exists()
    with pytest.raises(ConfigurationError, match="primary-key tables only"):
        lakesink.write(df, str(tmp_path / "nokey"), options={"bucket": "-2"})
    assert not (tmp_path / "nokey").exists()
    path = str(tmp_path / "t")
    lakesink.write(df, path, primary_key=["id", "dt"], options={"bucket": "-2"})
    before = len(snapshots(path))
    for statement in (lambda: lakesink.delete(spark, path, "id = 1"),
                      lambda: lakesink.update(spark, path, {"v": "'z'"}, "id = 1"),
                      lambda: lakesink.merge(spark, path, df, on="t.id = s.id and t.dt = s.dt")
                      .when_matched_delete().execute()):
        with pytest.raises(UnsupportedTableError, match="postpone"):
            statement()
    query = lakesink.read_stream(spark, path).writeStream.format("memory").queryName("pp").start()
    with pytest.raises(Exception, match="postpone buckets"):  # the query fails as it starts reading
        query.awaitTermination(60)
    query.stop()
    assert len(snapshots(path)) == before


# Default: lakesink.write; ./dev full: format("paimon").
@pytest.mark.parametrize("path_kind", ["fast", pytest.param("native", marks=pytest.mark.full)])
def test_a_dv_table_writes_plain_postpone_files_and_compaction_merges_them(spark, tmp_path, path_kind):
    """deletion-vectors.enabled: writes add plain postpone files (nothing merged at commit, readers
    skip them); lakesink.compact assigns them to buckets, one run at the highest level each, no
    retraction left: what such a table's readers need. Upserts and deletes after a compaction."""
    from tests.helpers import write
    from tests.spark.test_deletion_vectors import live_files
    from tests.unpatched import read_unpatched

    path = str(tmp_path / "wh" / "db.db" / "dv")
    options = {"primary-key": "id,dt", "partition": "dt", "bucket": "-2", "postpone.default-bucket-num": "2",
               "deletion-vectors.enabled": "true"}
    write(spark.createDataFrame(_rows(range(30), "a"), SCHEMA), path, path_kind, **options)
    assert all(e.bucket == -2 and e.file.level == 0 for e in _entries(path))  # as written: not merged
    assert _by_key(spark, path) == {}
    lakesink.compact(spark, path, progress=False)
    want = _want((range(30), "a"))
    assert _by_key(spark, path) == want
    _check_buckets(path, 2)

    changes = [(i, f"d{i % 2}", f"b{i}", "+I") for i in range(20, 40)] + [(i, f"d{i % 2}", None, "-D")
                                                                          for i in (1, 2, 25)]
    write(spark.createDataFrame(changes, SCHEMA + ", op string"), path, path_kind, **{"rowkind.field": "op"})
    assert _by_key(spark, path) == want  # waiting in the postpone bucket
    lakesink.compact(spark, path, progress=False)
    for i, dt, v, op in changes:
        if op == "-D":
            want.pop((i, dt), None)
        else:
            want[(i, dt)] = v
    assert _by_key(spark, path) == want
    files, vectors = live_files(path)
    assert files and {level for level, _ in files} == {5} and not vectors
    assert {(r["id"], r["dt"]): r["v"] for r in read_unpatched(path).to_pylist()} == want
    assert leftover_files(path) == set()


@pytest.mark.full
def test_postpone_compaction_applies_vectors_another_engine_left(spark, tmp_path):
    """A row of a real bucket marked in a deletion vector by another engine (a snapshot changing
    only the index, as a Java DELETE would leave it) stays deleted through the next compaction, and
    its vector leaves the index with the file."""
    from lakesink.paimon.commit.file_store import new_file_store_commit
    from lakesink.paimon.files.deletion_vectors import Vectors
    from tests.spark.test_deletion_vectors import live_files

    path = str(tmp_path / "wh" / "db.db" / "marked")
    schema = "id long, v string"
    lakesink.write(spark.createDataFrame([(i, f"a{i}") for i in range(10)], schema), path, primary_key=["id"],
                   options={"bucket": "-2", "postpone.default-bucket-num": "1", "deletion-vectors.enabled": "true"})
    lakesink.compact(spark, path, progress=False)
    (level, name), = live_files(path)[0]
    assert level == 5
    table = open_table(path)
    change = Vectors(table, table.snapshot_manager().get_latest_snapshot()).change_bucket((), 0, marks={name: [3]})
    commit = new_file_store_commit(table, "another-engine")
    try:
        commit._try_commit(commit_kind="OVERWRITE", commit_identifier=1, commit_entries_plan=lambda _s: [],
                           detect_conflicts=True, allow_rollback=False, snapshot_properties={},
                           changelog_entries=[], index_adds=change.adds, index_deletes=change.deletes)
    finally:
        commit.close()
    want = {i: f"a{i}" for i in range(10) if i != 3}  # the file is sorted by key: position 3 is id 3
    assert {r["id"]: r["v"] for r in read_table(path).to_pylist()} == want

    lakesink.write(spark.createDataFrame([(11, "b11"), (4, "b4")], schema), path)
    lakesink.compact(spark, path, progress=False)
    want.update({11: "b11", 4: "b4"})
    rows = lakesink.read(spark, path).collect()
    assert {r["id"]: r["v"] for r in rows} == want and len(rows) == len(want)
    files, vectors = live_files(path)
    assert {level for level, _ in files} == {5} and not vectors
