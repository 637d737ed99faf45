"""Dynamic-bucket primary-key tables (bucket=-1, Paimon's default) written by lakesink and by
Apache Paimon's own Java writer (its `HashBucketAssigner`), each continuing the other's table.

A key given a second bucket would read twice: every table is read key for key by Java Paimon,
pypaimon and `lakesink.read`, and its hash index (decoded by pypaimon) must hold each key's hash
in exactly one bucket of its partition.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

import lakesink
from tests.helpers import read_table

pytestmark = [pytest.mark.interop, pytest.mark.spark]

COLUMNS = [["id", "BIGINT"], ["dt", "STRING"], ["v", "STRING"]]
SCHEMA = "id long, dt string, v string"


def _rows(ids, tag):
    return [(i, f"d{i % 2}", f"{tag}{i}") for i in ids]


def _java_batch(ids, tag):
    return [["+I", list(row)] for row in _rows(ids, tag)]


def _expected(*writes):
    out = {}
    for ids, tag in writes:
        out.update({(i, f"d{i % 2}"): f"{tag}{i}" for i in ids})
    return out


def _read_every_way(spark, java_paimon, path, tmp_path):
    """{key: v} as Java Paimon, pypaimon and lakesink.read return it; a key read twice fails."""
    java = [((r["id"], r["dt"]), r["v"]) for r in java_paimon.read(path, tmp_path / "java")]
    table = read_table(path)
    py = list(zip(zip(table.column("id").to_pylist(), table.column("dt").to_pylist()), table.column("v").to_pylist()))
    lake = [((r.id, r.dt), r.v) for r in lakesink.read(spark, path).collect()]
    for name, rows in (("java", java), ("pypaimon", py), ("lakesink", lake)):
        twice = [k for k, n in Counter(k for k, _ in rows).items() if n > 1]
        assert not twice, f"{name} reads keys {twice[:5]} more than once"
    assert dict(java) == dict(py) == dict(lake)
    return dict(java)


def hash_index(path) -> dict:
    """{(partition, bucket): (hashes, row_count)} of the latest snapshot's HASH index files."""
    from pypaimon.index.dynamic_bucket import _read_hashes
    from pypaimon.index.index_file_handler import IndexFileHandler

    from lakesink.paimon.table.tables import open_table
    table = open_table(path)
    out = {}
    for entry in IndexFileHandler(table).scan(None, lambda e: e.index_file.index_type == "HASH"):
        key = (tuple(entry.partition.values), entry.bucket)
        assert key not in out, f"two index files for {key}"
        out[key] = (_read_hashes(table, entry), entry.index_file.row_count)
    return out


def check_index(path, keys) -> dict:
    """Every key's hash in exactly one bucket of its partition, every bucket's file count right,
    nothing else in the index; {partition: bucket count}."""
    from lakesink.paimon.files.keyhash import key_hashes
    from lakesink.paimon.table.tables import open_table

    table = open_table(path)
    index = hash_index(path)
    by_partition: dict[tuple, Counter] = {}
    for (partition, bucket), (hashes, count) in index.items():
        assert len(hashes) == count
        by_partition.setdefault(partition, Counter()).update(hashes)
    ids = pa.table({"id": pa.array([k[0] for k in keys], pa.int64())})
    hashes = key_hashes(ids, ["id"], table.table_schema.fields).tolist()
    wanted: dict[tuple, set] = {}
    for (_, dt), h in zip(keys, hashes):
        wanted.setdefault((dt,), set()).add(h)
    assert {p: set(c) for p, c in by_partition.items()} == wanted
    assert all(n == 1 for c in by_partition.values() for n in c.values()), "a hash in two buckets"
    return {p: sum(1 for (q, _) in index if q == p) for p in by_partition}


def test_a_keyed_table_created_without_bucket_is_dynamic_and_java_continues_it(spark, java_paimon, tmp_path):
    path = str(tmp_path / "db.db" / "dyn")
    first = range(0, 60)
    lakesink.write(spark.createDataFrame(_rows(first, "a"), SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={"dynamic-bucket.target-row-num": "8"})
    assert java_paimon.mode(path, tmp_path / "mode") == {"bucket": -1, "bucket_mode": "HASH_DYNAMIC"}
    buckets = check_index(path, _expected((first, "a")))
    assert all(n >= 30 // 8 for n in buckets.values())  # 30 keys a partition, at most 8 a bucket
    assert all(count <= 8 for _, count in hash_index(path).values())
    assert _read_every_way(spark, java_paimon, path, tmp_path) == _expected((first, "a"))

    # Java's own assigner reads lakesink's index: old keys stay in their buckets, new ones go to new.
    java = range(40, 90)
    java_paimon.replay({"columns": COLUMNS, "primary_key": ["id", "dt"], "partition": ["dt"], "options": {},
                        "continue": True, "batches": [_java_batch(java, "j")]}, path, tmp_path / "replay")
    want = _expected((first, "a"), (java, "j"))
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want
    check_index(path, want)


# ./dev full: a Java-written table continued (the default run has Java continue lakesink's table)
@pytest.mark.full
def test_a_table_written_by_java_is_continued_on_both_paths_and_again_by_java(spark, java_paimon, tmp_path):
    path = str(tmp_path / "db.db" / "from_java")
    java = range(0, 40)
    java_paimon.replay({"columns": COLUMNS, "primary_key": ["id", "dt"], "partition": ["dt"],
                        "options": {"dynamic-bucket.target-row-num": "6"},
                        "batches": [_java_batch(java, "j")]}, path, tmp_path / "replay")
    assert java_paimon.mode(path, tmp_path / "mode")["bucket"] == -1

    fast = range(30, 60)  # upserts of Java's keys and new keys, lakesink.write
    lakesink.write(spark.createDataFrame(_rows(fast, "f"), SCHEMA), path)
    native = range(50, 75)  # and through Spark's format("paimon"), spread over three tasks
    (spark.createDataFrame(_rows(native, "n"), SCHEMA).repartition(3).write.format("paimon")
     .mode("append").save(path))
    want = _expected((java, "j"), (fast, "f"), (native, "n"))
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want
    check_index(path, want)

    again = range(0, 80, 3)
    java_paimon.replay({"columns": COLUMNS, "primary_key": ["id", "dt"], "partition": ["dt"], "options": {},
                        "continue": True, "batches": [_java_batch(again, "k")]}, path, tmp_path / "replay2")
    want = _expected((java, "j"), (fast, "f"), (native, "n"), (again, "k"))
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want
    check_index(path, want)


@pytest.mark.full  # the default run refuses a second lakesink writer (tests/spark/test_dynamic_buckets.py)
def test_a_concurrent_java_writer_in_the_partition_is_a_conflict(spark, java_paimon, tmp_path, monkeypatch):
    """Java's writer commits new keys to a partition while lakesink's write, planned before, runs:
    lakesink's commit is refused (its new keys might sit in other buckets than Java's), nothing
    of it lands, and a re-run puts every key in one bucket."""
    import lakesink.spark.keyed_write as keyed_write
    from lakesink.errors import CommitConflictError

    path = str(tmp_path / "db.db" / "race")
    lakesink.write(spark.createDataFrame(_rows(range(10), "a"), SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={"dynamic-bucket.target-row-num": "4"})
    listed = keyed_write.list_parquet_files

    def java_commits_first(*args, **kwargs):
        java_paimon.replay({"columns": COLUMNS, "primary_key": ["id", "dt"], "partition": ["dt"], "options": {},
                            "continue": True, "batches": [_java_batch(range(20, 40), "j")]}, path,
                           tmp_path / "replay")
        return listed(*args, **kwargs)

    monkeypatch.setattr(keyed_write, "list_parquet_files", java_commits_first)
    with pytest.raises(CommitConflictError, match=r"dynamic-bucket table .* concurrent writer.*partition"):
        lakesink.write(spark.createDataFrame(_rows(range(30, 50), "l"), SCHEMA), path)
    monkeypatch.undo()
    want = _expected((range(10), "a"), (range(20, 40), "j"))
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want
    lakesink.write(spark.createDataFrame(_rows(range(30, 50), "l"), SCHEMA), path)
    want = _expected((range(10), "a"), (range(20, 40), "j"), (range(30, 50), "l"))
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want
    check_index(path, want)
