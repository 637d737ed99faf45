"""Dynamic-bucket primary-key tables (bucket=-1, the key holding every partition column) with
`deletion-vectors.enabled`: every commit merged on write per (partition, bucket) as with fixed
buckets, the hash index written as for any dynamic-bucket table. After each commit pypaimon reads
exactly the keys a model of the upserts and deletes holds, no level-0 file is left, and each key's
hash is in one bucket of its partition."""

from __future__ import annotations

import pytest

import lakesink
from tests.helpers import leftover_files, read_table, write
from tests.interop.test_dynamic_buckets import check_index, hash_index
from tests.spark.test_deletion_vectors import compacted_fully, live_files
from tests.unpatched import read_unpatched

pytestmark = pytest.mark.spark

SCHEMA = "id long, dt string, v string, op string"
# Small buckets: a partition's keys spread over several, opened as they fill.
OPTIONS = {"deletion-vectors.enabled": "true", "dynamic-bucket.target-row-num": "20",
           "dynamic-bucket.assigner-parallelism": "2"}


def _dt(i: int) -> str:
    return f"d{i % 2}"


def _changes(rows):
    """(id, value, op) -> rows of SCHEMA, the partition from the id."""
    return [(i, _dt(i), v, op) for i, v, op in rows]


def _apply(expected: dict, rows) -> dict:
    for i, v, op in rows:  # one task, in order: the last change of a key wins
        if op == "-D":
            expected.pop((i, _dt(i)), None)
        else:
            expected[(i, _dt(i))] = v
    return expected


def check(path: str, expected: dict, unpatched: bool = False) -> None:
    """Key for key by pypaimon (`unpatched`: as released, in its own process); no level-0 file."""
    rows = (read_unpatched(path) if unpatched else read_table(path)).to_pylist()
    got = {(r["id"], r["dt"]): r["v"] for r in rows}
    assert len(got) == len(rows), "a key is live in two rows"
    assert got == expected
    files, _ = live_files(path)
    assert files and all(level > 0 for level, _ in files), files


# Default: lakesink.write; ./dev full: format("paimon") (its tasks assign keys without a shuffle).
@pytest.mark.parametrize("path_kind", ["fast", pytest.param("native", marks=pytest.mark.full)])
def test_upserts_and_deletes_read_key_for_key_after_each_commit(spark, table_path, path_kind):
    first = [(i, f"a{i}", "+I") for i in range(80)]
    write(spark.createDataFrame(_changes(first), SCHEMA).repartition(2), table_path, path_kind,
          **{"primary-key": "id,dt", "partition": "dt", "rowkind.field": "op", **OPTIONS})
    expected = _apply({}, first)
    seen = set(expected)
    check(table_path, expected)
    assert len(hash_index(table_path)) > 2  # several buckets a partition
    rounds = [
        # upserts, deletes, new keys; a key changed twice in one commit (one task: in order)
        [(5, "b5", "+I"), (6, "b6", "+U"), (7, None, "-D"), (300, "n300", "+I"), (9, "b9", "+I"), (9, None, "-D")],
        # keys deleted before come back, new keys open buckets; one row a key, spread over two tasks
        [(7, "c7", "+I"), (9, "c9", "+I"), (300, None, "-D")] + [(i, f"c{i}", "+I") for i in range(10, 130, 3)],
    ]
    dv_seen = False
    for n, changes in enumerate(rounds):
        df = spark.createDataFrame(_changes(changes), SCHEMA)
        write(df.coalesce(1) if n == 0 else df.repartition(2), table_path, path_kind)
        _apply(expected, changes)
        seen |= {(i, _dt(i)) for i, _, _ in changes}
        check(table_path, expected)
        check_index(table_path, seen)  # deleted keys keep their hash, as in Paimon's index
        dv_seen = dv_seen or bool(live_files(table_path)[1])
    assert dv_seen, "no deletion vector was ever written: the test only saw full rewrites"
    check(table_path, expected, unpatched=True)
    assert not leftover_files(table_path)
    # A small change marks rows of the merged runs; lakesink.compact applies the vectors, drops
    # them, and leaves the hash index as it is (every key stays in its bucket).
    last = [(10, "d10", "+I"), (13, None, "-D")]
    write(spark.createDataFrame(_changes(last), SCHEMA).coalesce(1), table_path, path_kind)
    _apply(expected, last)
    index = hash_index(table_path)
    compacted_fully(spark, table_path, lambda: check(table_path, expected, unpatched=True))
    ours = _lakesink_rows(spark, table_path)
    assert {(i, dt): v for i, dt, v in ours} == expected and len(ours) == len(expected)
    assert hash_index(table_path) == index


# Default: lakesink.stream (sync; pipelined is refused for dynamic buckets); ./dev full: its
# shuffled micro-batches, and writeStream.format("paimon").
@pytest.mark.parametrize("sink, shuffle", [("lakesink", "auto"),
                                           pytest.param("lakesink", "true", marks=pytest.mark.full),
                                           pytest.param("format", "auto", marks=pytest.mark.full)])
def test_a_change_stream_reads_key_for_key_after_each_batch(spark, tmp_path, sink, shuffle):
    """A change stream (one file, one input partition a micro-batch: its rows' order is the order
    of changes) into a dynamic-bucket deletion-vector table: each batch's snapshot, read by
    pypaimon, holds key for key what the changes so far say, with no level-0 file."""
    from tests.helpers import snapshots
    from tests.spark.test_keyed_stream_write import SCHEMA as STREAM_SCHEMA, _cdc, _source
    from tests.spark.test_streaming import commit_user_of, source_stream

    batches = [[(k, "x", "+I") for k in range(40)]] + _cdc(3, keys=30)
    source = tmp_path / "src"
    _source(source, batches)
    models, expected, n = [], {}, 0
    for batch in batches:
        for key, name, op in batch:
            if op == "-D":
                expected.pop(key, None)
            else:
                expected[key] = (name, n)
            n += 1
        models.append(dict(expected))
    path, chk = str(tmp_path / "wh" / "db.db" / "dv"), str(tmp_path / "chk")
    df = source_stream(spark, source, STREAM_SCHEMA)
    options = {"primary-key": "id", "rowkind.field": "op", "commit.mode": "sync", **OPTIONS}
    if sink == "lakesink":
        query = lakesink.stream(df, path, checkpoint=chk, trigger="availableNow",
                                options={**options, "write.keyed-shuffle": shuffle})
    else:  # format("paimon") streams into an existing table
        lakesink.write(spark.createDataFrame([], "id long, name string, n long, op string"), path,
                       primary_key=["id"], options=dict(OPTIONS))
        writer = df.writeStream.format("paimon").option("checkpointLocation", chk).option("rowkind.field", "op")
        query = writer.option("commit.mode", "sync").trigger(availableNow=True).start(path)
    query.awaitTermination()
    assert query.exception() is None
    user = commit_user_of(chk)
    ours = [s.id for s in snapshots(path) if s.commit_user == user]
    assert len(ours) == len(batches)
    for snapshot_id, model in zip(ours, models):
        rows = read_table(path, snapshot_id).to_pylist()
        got = {r["id"]: (r["name"], r["n"]) for r in rows}
        assert len(got) == len(rows), f"a key was returned twice in snapshot {snapshot_id}"
        assert got == model, f"snapshot {snapshot_id}"
    rows = read_unpatched(path).to_pylist()
    assert {r["id"]: (r["name"], r["n"]) for r in rows} == expected and len(rows) == len(expected)
    files, vectors = live_files(path)
    assert files and all(level > 0 for level, _ in files) and vectors
    assert len(hash_index(path)) > 1
    assert not leftover_files(path)


# ./dev full: every merge engine but plain deduplicate (the default run's), on both batch paths.
_AGG = {"fields.n.aggregate-function": "sum", "fields.x.aggregate-function": "last_non_null_value",
        "fields.y.aggregate-function": "last_non_null_value"}


@pytest.mark.full
@pytest.mark.parametrize("path_kind", ["fast", "native"])
@pytest.mark.parametrize("engine, options, expected", [
    ("aggregation", _AGG, {1: ("a1", "y2", 11), 2: ("a2", None, 2), 3: (None, "y3", 3)}),
    ("partial-update", {}, {1: ("a1", "y2", 10), 2: ("a2", None, 2), 3: (None, "y3", 3)}),
    ("first-row", {}, {1: ("a1", None, 1), 2: ("a2", None, 2), 3: (None, "y3", 3)}),
    ("deduplicate", {"sequence.field": "n"}, {1: (None, "y2", 10), 2: ("a2", None, 2), 3: (None, "y3", 3)})])
def test_merge_engines_merge_a_key_with_its_row_in_older_files(spark, table_path, engine, options, expected,
                                                                path_kind):
    """Readers merge nothing: a key's merged value, its older version looked up in another file of
    its bucket, is written at commit; the older row is marked deleted. Keys in both partitions."""
    schema = "id long, dt string, x string, y string, n long"
    first = [(i, dt, f"a{i}", None, i) for i in range(1, 3) for dt in ("p", "q")]
    first += [(i, dt, "z", "z", i) for i in range(4, 60) for dt in ("p", "q")]
    write(spark.createDataFrame(first, schema), table_path, path_kind,
          **{"primary-key": "id,dt", "partition": "dt", "merge-engine": engine, **options, **OPTIONS})
    later = [(1, dt, None, "y2", 10) for dt in ("p", "q")] + [(3, dt, None, "y3", 3) for dt in ("p", "q")]
    write(spark.createDataFrame(later, schema), table_path, path_kind)
    rows = read_unpatched(table_path).to_pylist()
    assert len(rows) == len({(r["id"], r["dt"]) for r in rows})
    got = {(r["id"], r["dt"]): (r["x"], r["y"], r["n"]) for r in rows if r["id"] < 4}
    assert got == {(i, dt): value for i, value in expected.items() for dt in ("p", "q")}
    assert live_files(table_path)[1], "the older version was rewritten, not marked deleted"
    check_index(table_path, {(r["id"], r["dt"]) for r in rows} | {(i, dt) for i in (1, 2, 3) for dt in "pq"})


@pytest.mark.full
def test_row_level_statements_on_a_dynamic_bucket_dv_table(spark, table_path):
    """DELETE, UPDATE and MERGE read the table through pypaimon (deletion vectors honoured) and
    write their changes merged on write; a new key of the MERGE gets a bucket from the index."""
    schema = "id long, dt string, v string"
    df = spark.createDataFrame([(i, _dt(i), f"a{i}") for i in range(50)], schema)
    lakesink.write(df, table_path, primary_key=["id", "dt"], partition_by=["dt"], options=dict(OPTIONS))
    lakesink.delete(spark, table_path, "id < 5")
    lakesink.update(spark, table_path, {"v": "'u'"}, "id >= 45")
    source = spark.createDataFrame([(10, "d0", "m10"), (11, "d1", None), (100, "d0", "n100")], schema)
    (lakesink.merge(spark, table_path, source, "t.id = s.id and t.dt = s.dt", target_alias="t")
     .when_matched_delete(condition="s.v is null").when_matched_update({"v": "s.v"}).when_not_matched_insert_all()
     .execute())
    expected = {(i, _dt(i)): ("u" if i >= 45 else f"a{i}") for i in range(5, 50)}
    expected.update({(10, "d0"): "m10", (100, "d0"): "n100"})
    expected.pop((11, "d1"))
    check(table_path, expected, unpatched=True)
    check_index(table_path, {(i, _dt(i)) for i in range(50)} | {(100, "d0")})


def _lakesink_rows(spark, path: str) -> list[tuple]:
    return [(r["id"], r["dt"], r["v"]) for r in lakesink.read(spark, path).collect()]
