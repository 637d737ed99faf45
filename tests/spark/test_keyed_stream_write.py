"""lakesink.stream into primary-key tables: micro-batches shuffled to their buckets, or written by
one task with no shuffle (`write.keyed-shuffle`); both read the same, key for key, through pypaimon."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink.paimon.table.tables import open_table
from tests.helpers import leftover_files, read_table, snapshots
from tests.spark.test_streaming import commit_user_of, source_stream

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("n", pa.int64()), ("op", pa.string())])
ONE_TASK_FILE = re.compile(r"^data-[0-9a-f]{8}-[0-9a-f]{6}-[0-9a-f]{20}-0\.parquet$")  # KeyedTaskWriter's names


def _source(directory, batches):
    """One Parquet file (one micro-batch) per batch of (id, name, op) rows; `n` numbers the rows."""
    directory.mkdir(exist_ok=True)
    n = 0
    for b, rows in enumerate(batches):
        path = directory / f"{b:03d}.parquet"
        if path.exists():
            n += len(rows)
            continue
        pq.write_table(pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows],
                                 "n": list(range(n, n + len(rows))), "op": [r[2] for r in rows]}, schema=SCHEMA), path)
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))  # the file source reads oldest first
        n += len(rows)


def _stream(spark, source, path, chk, options, partitions=3):
    """Every batch into `path`; `partitions` > 1 spreads a key's versions over several input
    partitions (by row number), where the higher-numbered partition's version is the later one."""
    df = source_stream(spark, source, SCHEMA)
    if partitions > 1:
        df = df.repartition(partitions, "n")
    query = lakesink.stream(df, path, checkpoint=chk, trigger="availableNow", options=options)
    query.awaitTermination()
    assert query.exception() is None
    lakesink.await_commits(chk)
    return query


def _by_id(path):
    rows = read_table(path).to_pylist()
    assert len({r["id"] for r in rows}) == len(rows), "a key was returned twice"
    return {r["id"]: (r["name"], r["n"]) for r in rows}


def _written_by_batch(path, chk):
    """Per micro-batch (APPEND snapshot of the query): ("one task" | "shuffle", {bucket: files})."""
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager
    table, user = open_table(path), commit_user_of(chk)
    out = []
    for s in snapshots(path):
        if s.commit_user != user or s.commit_kind != "APPEND":
            continue
        entries = ManifestFileManager(table).read_entries_parallel(ManifestListManager(table).read_delta(s))
        names = [e.file.file_name for e in entries]
        per_bucket = {}
        for e in entries:
            per_bucket[e.bucket] = per_bucket.get(e.bucket, 0) + 1
        kinds = {"one task" if ONE_TASK_FILE.match(name) else "shuffle" for name in names}
        assert len(kinds) == 1, names
        out.append((kinds.pop(), per_bucket))
    return out


def _cdc(batches_count=5, keys=30, deletes=True):
    """Upserts (and deletes) with each key changed several times in most batches."""
    batches = []
    for b in range(batches_count):
        rows = []
        for k in range(keys):
            if deletes and (k + b) % 4 == 0:
                rows.append((k, None, "-D"))
            rows += [(k, f"b{b}-{k}-{v}" if (k * v + b) % 5 else None, "+U") for v in range(1 + (k + b) % 3)]
        batches.append(rows)
    return batches


@pytest.mark.parametrize("engine", ["deduplicate", pytest.param("partial-update", marks=pytest.mark.full)])
def test_one_task_micro_batches_read_as_shuffled_ones_key_for_key(spark, tmp_path, engine):
    """The same change stream, its keys' versions spread over three input partitions, into two
    tables: shuffled to the buckets by Spark, and merged by one task. Same rows, key for key
    (partial-update: null fields keep the value before them, in the same order), and one sorted
    run per bucket per micro-batch either way (one writer per bucket)."""
    source = tmp_path / "src"
    _source(source, _cdc(deletes=engine != "partial-update"))  # partial-update merges no retraction
    options = {"primary-key": "id", "bucket": "3", "rowkind.field": "op", "merge-engine": engine}
    tables = {}
    for shuffle in ("true", "false"):
        path, chk = str(tmp_path / "wh" / "db.db" / f"t_{shuffle}"), str(tmp_path / f"chk_{shuffle}")
        _stream(spark, source, path, chk, {**options, "write.keyed-shuffle": shuffle})
        written = _written_by_batch(path, chk)
        assert len(written) == 5
        assert {kind for kind, _ in written} == {"shuffle" if shuffle == "true" else "one task"}
        assert all(set(per_bucket.values()) == {1} for _, per_bucket in written)
        assert leftover_files(path) == set()
        tables[shuffle] = _by_id(path)
    assert tables["false"] == tables["true"]
    assert len(tables["true"]) >= 20


def test_auto_shuffles_the_first_micro_batch_and_those_after_a_large_one(spark, tmp_path):
    sizes = [12, 3, 3, 15, 2, 2]   # rows per batch, all distinct keys; min-rows 10
    batches, state, key = [], {}, 0
    for b, size in enumerate(sizes):
        rows = [(key + i, f"b{b}", "+I") for i in range(size)] + [(0, f"b{b}-zero", "+U")]
        key += size
        batches.append(rows)
    _source(tmp_path / "src", batches)
    path, chk = str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "chk")
    _stream(spark, tmp_path / "src", path, chk, {"primary-key": "id", "bucket": "2", "rowkind.field": "op",
                                                   "write.keyed-shuffle.min-rows": "10"}, partitions=1)
    kinds = [kind for kind, _ in _written_by_batch(path, chk)]
    assert kinds == ["shuffle", "shuffle", "one task", "one task", "shuffle", "one task"]
    for rows in batches:
        state.update({r[0]: r[1] for r in rows})
    assert {k: v[0] for k, v in _by_id(path).items()} == state


def test_a_null_key_in_a_one_task_micro_batch_fails_the_query_and_changes_nothing(spark, tmp_path):
    source, path, chk = tmp_path / "src", str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "chk")
    good = [(i, f"v{i}", "+I") for i in range(5)]
    _source(source, [good])
    options = {"primary-key": "id", "bucket": "2", "rowkind.field": "op", "write.keyed-shuffle": "false"}
    _stream(spark, source, path, chk, options)
    before = [s.id for s in snapshots(path)]
    _source(source, [good, [(7, "x", "+I"), (None, "no key", "+I")]])
    query = lakesink.stream(source_stream(spark, source, SCHEMA).repartition(2, "n"), path, checkpoint=chk,
                            trigger="availableNow", options=options)
    with pytest.raises(Exception, match="primary-key column 'id' is null in some row") as info:
        query.awaitTermination()
    assert "Nothing was written" in str(info.value)
    assert [s.id for s in snapshots(path)] == before
    assert {k: v[0] for k, v in _by_id(path).items()} == {i: f"v{i}" for i in range(5)}
    assert leftover_files(path) == set()


def test_keyed_shuffle_takes_only_its_values(spark, tmp_path):
    df = source_stream(spark, tmp_path, SCHEMA)
    with pytest.raises(Exception, match="write.keyed-shuffle"):
        lakesink.stream(df, str(tmp_path / "wh" / "db.db" / "t"), checkpoint=str(tmp_path / "chk"),
                        options={"primary-key": "id", "bucket": "2", "write.keyed-shuffle": "sometimes"})
    assert not (tmp_path / "wh" / "db.db" / "t").exists()
