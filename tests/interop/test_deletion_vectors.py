"""Primary-key tables with deletion vectors written by lakesink (merged on write at each commit) and
by Apache Paimon's own Java writer (lookup compaction at commit), each continuing the other's table.

Java's reader of such a table skips level-0 files and merges nothing across files: a key lakesink
left live in two rows reads twice, one left at level 0 not at all. Every table is read key for key
by Java Paimon, pypaimon as released and `lakesink.read`.
"""

from __future__ import annotations

import glob
import os
from collections import Counter

import pytest

import lakesink
from tests.helpers import read_table
from tests.unpatched import read_unpatched

pytestmark = [pytest.mark.interop, pytest.mark.spark]

COLUMNS = [["id", "BIGINT"], ["v", "STRING"]]
SCHEMA = "id long, v string, op string"
DV = {"bucket": "2", "deletion-vectors.enabled": "true"}


def _read_every_way(spark, java_paimon, path, tmp_path, unpatched: bool = True) -> dict:
    """`unpatched`: pypaimon as released, in its own process; it cannot read the manifests of
    Java's 1.0 writer (docs/compatibility.md): those tables go through lakesink's `compat`."""
    java = [(r["id"], r["v"]) for r in java_paimon.read(path, tmp_path / "java")]
    table = read_unpatched(path) if unpatched else read_table(path)
    py = list(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))
    lake = [(r.id, r.v) for r in lakesink.read(spark, path).select("id", "v").collect()]
    for name, rows in (("java", java), ("pypaimon", py), ("lakesink", lake)):
        twice = [k for k, n in Counter(k for k, _ in rows).items() if n > 1]
        assert not twice, f"{name} reads keys {twice[:5]} more than once"
    assert dict(java) == dict(py) == dict(lake)
    return dict(java)


def _apply(expected: dict, changes) -> dict:
    for key, value, op in changes:
        if op == "-D":
            expected.pop(key, None)
        else:
            expected[key] = value
    return expected


def _dv_files(path) -> list[str]:
    return glob.glob(os.path.join(path, "index", "index-*"))


def test_java_reads_a_dv_table_lakesink_wrote_on_both_paths(spark, java_paimon, tmp_path):
    path = str(tmp_path / "db.db" / "dv")
    first = [(i, f"a{i}", "+I") for i in range(120)]
    lakesink.write(spark.createDataFrame(first, SCHEMA), path, primary_key=["id"],
                   options={**DV, "rowkind.field": "op"})
    expected = _apply({}, first)
    rounds = [("fast", [(3, "b3", "+U"), (4, None, "-D"), (500, "n500", "+I")]),
              ("native", [(5, "c5", "+I"), (500, None, "-D"), (6, None, "-D"), (501, "n501", "+I")]),
              ("fast", [(i, f"d{i}", "+I") for i in range(0, 120, 7)] + [(8, None, "-D")])]
    for path_kind, changes in rounds:
        df = spark.createDataFrame(changes, SCHEMA).coalesce(1)
        if path_kind == "fast":
            lakesink.write(df, path)
        else:
            df.write.format("paimon").mode("append").save(path)
        table = read_table(path)  # each round in process; every reader after the last
        assert dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist())) == _apply(expected, changes)
    assert _read_every_way(spark, java_paimon, path, tmp_path) == expected
    assert _dv_files(path), "no deletion vector was written: Java read full rewrites only"


# ./dev full: a Java-written DV table continued (the default run has Java read lakesink's on both paths)
@pytest.mark.full
def test_a_dv_table_java_wrote_is_continued_by_lakesink_and_again_by_java(spark, java_paimon, tmp_path):
    path = str(tmp_path / "db.db" / "from_java")
    java_first = [["+I", [i, f"j{i}"]] for i in range(80)]
    java_second = [["+U", [1, "k1"]], ["-D", [2, None]], ["+I", [3, "k3"]]]
    java_paimon.replay({"columns": COLUMNS, "primary_key": ["id"], "partition": [],
                        "options": {"bucket": "2", "deletion-vectors.enabled": "true"},
                        "batches": [java_first, java_second]}, path, tmp_path / "replay")
    assert _dv_files(path), "Java wrote no deletion vector: the table tests no inherited vectors"
    expected = {i: f"j{i}" for i in range(80)}
    expected.update({1: "k1", 3: "k3"})
    expected.pop(2)
    assert _read_every_way(spark, java_paimon, path, tmp_path, False) == expected

    # lakesink continues: keys Java marked deleted, keys Java replaced, new keys; deletes too.
    ours = [(1, "f1", "+I"), (3, None, "-D"), (2, "f2", "+I"), (90, "f90", "+I")]
    lakesink.write(spark.createDataFrame(ours, SCHEMA).coalesce(1), path, options={"rowkind.field": "op"})
    _apply(expected, ours)
    assert _read_every_way(spark, java_paimon, path, tmp_path, False) == expected
    native = [(i, f"n{i}", "+I") for i in range(0, 80, 9)] + [(90, None, "-D")]
    (spark.createDataFrame(native, SCHEMA).coalesce(1).write.format("paimon").option("rowkind.field", "op")
     .mode("append").save(path))
    _apply(expected, native)
    assert _read_every_way(spark, java_paimon, path, tmp_path, False) == expected

    _java_continues(spark, java_paimon, path, tmp_path, expected)


def test_java_reads_a_partial_update_dv_table_lakesink_merged(spark, java_paimon, tmp_path):
    """Partial-update: a key's later write fills only some fields; Java's reader merges nothing in
    a DV table, so the merged row lakesink wrote at commit is what it must read."""
    path = str(tmp_path / "db.db" / "pu")
    schema = "id long, v string, w string"
    first = spark.createDataFrame([(i, f"a{i}", None) for i in range(50)], schema)
    lakesink.write(first, path, primary_key=["id"], options={**DV, "merge-engine": "partial-update"})
    lakesink.write(spark.createDataFrame([(1, None, "w1"), (2, "b2", None), (70, None, "w70")], schema), path)
    java = {r["id"]: (r["v"], r["w"]) for r in java_paimon.read(path, tmp_path / "java")}
    expected = {i: (f"a{i}", None) for i in range(50)}
    expected.update({1: ("a1", "w1"), 2: ("b2", None), 70: (None, "w70")})
    assert java == expected
    assert _dv_files(path)


# Dynamic buckets (bucket=-1, the key holding every partition column): merged on write per
# (partition, bucket), the hash index beside the deletion vectors.
DYN_COLUMNS = [["id", "BIGINT"], ["dt", "STRING"], ["v", "STRING"]]
DYN_SCHEMA = "id long, dt string, v string, op string"
DYN = {"deletion-vectors.enabled": "true", "dynamic-bucket.target-row-num": "16"}


def _dyn(changes):
    return [(i, f"d{i % 2}", v, op) for i, v, op in changes]


def _apply_dyn(expected: dict, changes) -> dict:
    for i, v, op in changes:
        if op == "-D":
            expected.pop((i, f"d{i % 2}"), None)
        else:
            expected[(i, f"d{i % 2}")] = v
    return expected


def _read_dyn_every_way(spark, java_paimon, path, tmp_path) -> dict:
    """{(id, dt): v} as Java Paimon, pypaimon and lakesink.read return it; a key read twice fails."""
    java = [((r["id"], r["dt"]), r["v"]) for r in java_paimon.read(path, tmp_path / "java")]
    table = read_table(path)
    py = list(zip(zip(table.column("id").to_pylist(), table.column("dt").to_pylist()), table.column("v").to_pylist()))
    lake = [((r.id, r.dt), r.v) for r in lakesink.read(spark, path).select("id", "dt", "v").collect()]
    for name, rows in (("java", java), ("pypaimon", py), ("lakesink", lake)):
        twice = [k for k, n in Counter(k for k, _ in rows).items() if n > 1]
        assert not twice, f"{name} reads keys {twice[:5]} more than once"
    assert dict(java) == dict(py) == dict(lake)
    return dict(java)


def _dv_index(path) -> list:
    """The latest snapshot's DELETION_VECTORS index entries (other files may be HASH index files);
    through lakesink's table, which reads the manifests of Java's 1.0 writer too."""
    from pypaimon.index.index_file_handler import IndexFileHandler

    from lakesink.paimon.table.tables import open_table
    return IndexFileHandler(open_table(path)).scan(None, lambda e: e.index_file.index_type == "DELETION_VECTORS")


# ./dev full: dynamic buckets (the default run: fixed buckets, tests/spark/test_dynamic_deletion_vectors.py)
@pytest.mark.full
def test_java_reads_a_dynamic_bucket_dv_table_lakesink_wrote(spark, java_paimon, tmp_path):
    from tests.interop.test_dynamic_buckets import check_index

    path = str(tmp_path / "db.db" / "dyn_dv")
    first = [(i, f"a{i}", "+I") for i in range(80)]
    lakesink.write(spark.createDataFrame(_dyn(first), DYN_SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={**DYN, "rowkind.field": "op"})
    expected = _apply_dyn({}, first)
    assert java_paimon.mode(path, tmp_path / "mode") == {"bucket": -1, "bucket_mode": "HASH_DYNAMIC"}
    fast = [(3, "b3", "+U"), (4, None, "-D"), (500, "n500", "+I"), (7, "b7", "+I")]
    lakesink.write(spark.createDataFrame(_dyn(fast), DYN_SCHEMA).coalesce(1), path)
    _apply_dyn(expected, fast)
    assert _read_dyn_every_way(spark, java_paimon, path, tmp_path) == expected
    assert _dv_index(path), "no deletion vector was written: Java read full rewrites only"
    check_index(path, {(i, f"d{i % 2}") for i, _, _ in first + fast})


@pytest.mark.full
def test_a_dynamic_bucket_dv_table_java_wrote_is_continued_by_lakesink_and_again_by_java(spark, java_paimon,
                                                                                          tmp_path):
    """Java's HashBucketAssigner and lookup compaction write the table; lakesink's assignment reads
    Java's hash index and merges into Java's files and deletion vectors; Java continues both."""
    from tests.interop.test_dynamic_buckets import check_index

    path = str(tmp_path / "db.db" / "dyn_dv_java")
    spec = {"columns": DYN_COLUMNS, "primary_key": ["id", "dt"], "partition": ["dt"]}
    java_first = [["+I", [i, f"d{i % 2}", f"j{i}"]] for i in range(60)]
    java_second = [["+U", [1, "d1", "k1"]], ["-D", [2, "d0", None]], ["+I", [3, "d1", "k3"]]]
    java_paimon.replay({**spec, "options": dict(DYN), "batches": [java_first, java_second]}, path,
                       tmp_path / "replay")
    assert java_paimon.mode(path, tmp_path / "mode")["bucket"] == -1
    assert _dv_index(path), "Java wrote no deletion vector: the table tests no inherited vectors"
    expected = _apply_dyn({}, [(i, f"j{i}", "+I") for i in range(60)] + [(1, "k1", "+U"), (2, None, "-D"),
                                                                          (3, "k3", "+I")])
    seen = {(i, f"d{i % 2}") for i in range(60)}
    assert _read_dyn_every_way(spark, java_paimon, path, tmp_path) == expected

    ours = [(1, "f1", "+I"), (3, None, "-D"), (2, "f2", "+I"), (90, "f90", "+I")]
    lakesink.write(spark.createDataFrame(_dyn(ours), DYN_SCHEMA).coalesce(1), path, options={"rowkind.field": "op"})
    native = [(i, f"n{i}", "+I") for i in range(0, 100, 9)] + [(90, None, "-D")]
    (spark.createDataFrame(_dyn(native), DYN_SCHEMA).coalesce(1).write.format("paimon")
     .option("rowkind.field", "op").mode("append").save(path))
    _apply_dyn(_apply_dyn(expected, ours), native)
    seen |= {(i, f"d{i % 2}") for i, _, _ in ours + native}
    assert _read_dyn_every_way(spark, java_paimon, path, tmp_path) == expected
    check_index(path, seen)

    again = [(i, f"x{i}", "+I") for i in range(0, 110, 11)] + [(5, None, "-D")]
    java_paimon.replay({**spec, "options": {}, "continue": True,
                        "batches": [[[op, [i, f"d{i % 2}", v]] for i, v, op in again]]}, path, tmp_path / "replay2")
    _apply_dyn(expected, again)
    seen |= {(i, f"d{i % 2}") for i, _, _ in again}
    assert _read_dyn_every_way(spark, java_paimon, path, tmp_path) == expected
    check_index(path, seen)

def test_java_reads_an_append_table_after_lakesink_marked_rows_deleted(spark, java_paimon, tmp_path):
    """An append table with deletion vectors after a DELETE and an UPDATE (rows marked in the
    vectors, new versions added): Apache Paimon's Java reader leaves the marked rows out too."""
    path = str(tmp_path / "db.db" / "append_dv")
    rows = [(i, f"a{i}", "d1" if i % 2 else "d2") for i in range(60)]
    lakesink.write(spark.createDataFrame(rows, "id long, v string, dt string").repartition(3), path,
                   partition_by=["dt"], options={"deletion-vectors.enabled": "true"})
    lakesink.delete(spark, path, where="id % 7 = 0")
    lakesink.update(spark, path, set={"v": "concat('u', v)"}, where="id in (1, 2, 8)")
    expected = sorted((i, ("u" if i in (1, 2, 8) else "") + v, dt) for i, v, dt in rows if i % 7)
    assert _dv_files(path), "no deletion vector was written"
    java = sorted((r["id"], r["v"], r["dt"]) for r in java_paimon.read(path, tmp_path / "java"))
    assert java == expected  # (pypaimon and lakesink.read: tests/spark/test_deletion_vectors_append.py)


@pytest.mark.full
def test_a_dv_table_java_wrote_compacted_by_lakesink_is_read_and_continued_by_java(spark, java_paimon, tmp_path):
    """`lakesink.compact` of a table holding Java's deletion vectors: each bucket rewritten into one
    run at the highest level, the vectors applied and dropped from the index; Java reads the same
    rows, then writes on (its lookup over the compacted levels) and reads its own changes."""
    path = str(tmp_path / "db.db" / "compacted")
    java_first = [["+I", [i, f"j{i}"]] for i in range(80)]
    java_second = [["+U", [1, "k1"]], ["-D", [2, None]], ["+I", [3, "k3"]], ["-D", [40, None]]]
    java_paimon.replay({"columns": COLUMNS, "primary_key": ["id"], "partition": [],
                        "options": {"bucket": "2", "deletion-vectors.enabled": "true"},
                        "batches": [java_first, java_second]}, path, tmp_path / "replay")
    expected = _apply({i: f"j{i}" for i in range(80)}, [(1, "k1", "+U"), (2, None, "-D"), (3, "k3", "+I"),
                                                        (40, None, "-D")])
    from tests.spark.test_deletion_vectors import live_files
    assert live_files(path)[1], "Java wrote no deletion vector: nothing for the compaction to apply"
    report = lakesink.compact(spark, path, progress=False)
    assert report.commit_kind == "COMPACT" and report.files_removed
    files, vectors = live_files(path)
    assert not vectors and {level for level, _ in files} == {5}
    assert _read_every_way(spark, java_paimon, path, tmp_path, False) == expected

    _java_continues(spark, java_paimon, path, tmp_path, expected)


def _java_continues(spark, java_paimon, path: str, tmp_path, expected: dict) -> None:
    """Java's writer continues the table (inserts over its lookup of the levels, a delete), and
    every reader reads its changes."""
    again = [["+I", [i, f"x{i}"]] for i in range(0, 100, 11)] + [["-D", [5, None]]]
    java_paimon.replay({"columns": COLUMNS, "primary_key": ["id"], "partition": [], "options": {},
                        "continue": True, "batches": [again]}, path, tmp_path / "replay2")
    _apply(expected, [(i, f"x{i}", "+I") for i in range(0, 100, 11)] + [(5, None, "-D")])
    assert _read_every_way(spark, java_paimon, path, tmp_path, False) == expected
