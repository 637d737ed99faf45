"""Cross-partition tables without Spark: a bucket's live keys from its key-value files, Paimon's
bucket assignment, and the per-row assignment of one task in arrival order, per merge engine
(paimon.keyed.cross_partition). The Spark paths are in tests/spark/test_cross_partition.py."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakesink import storage
from lakesink.paimon.keyed.cross_partition import BucketCounts, TaskAssigner, decide, live_keys
from lakesink.paimon.keyed.layout import KeyedSpec

SCHEMA = pa.schema([pa.field("user_id", pa.int64(), nullable=False), ("region", pa.string()), ("name", pa.string())])


def _spec(engine="deduplicate"):
    return KeyedSpec.resolve(["user_id"], ["region"], {"merge-engine": engine}, SCHEMA.names)


def _kv_file(path, rows, sequence):
    """A key-value file of (user_id, region, name, kind) rows, one sequence number."""
    pq.write_table(pa.table({"_KEY_user_id": [r[0] for r in rows],
                             "_SEQUENCE_NUMBER": pa.array([sequence] * len(rows), pa.int64()),
                             "_VALUE_KIND": pa.array([r[3] for r in rows], pa.int8()),
                             "user_id": [r[0] for r in rows], "region": [r[1] for r in rows],
                             "name": [r[2] for r in rows]}), path)
    return str(path)


@pytest.mark.parametrize("engine, live", [("deduplicate", [2, 3]), ("aggregation", [1, 2, 3])])
def test_a_buckets_live_keys_drop_a_deduplicate_key_whose_last_version_is_a_delete(tmp_path, engine, live):
    old = _kv_file(tmp_path / "a.parquet", [(1, "eu", "x", 0), (2, "eu", "y", 0)], 5)
    new = _kv_file(tmp_path / "b.parquet", [(1, "eu", "x", 3), (3, "eu", "z", 0)], 9)
    keys = live_keys(storage.file_io(str(tmp_path)), [old, new], _spec(engine), SCHEMA)
    assert keys.column_names == ["user_id", "region"]
    assert sorted(keys.column("user_id").to_pylist()) == live


def test_new_keys_fill_the_assigners_buckets_in_order_then_open_its_next_one():
    counts = BucketCounts(target_rows=2, assigners=2, assigner=1)
    counts.add(("eu",), 1, 1)
    counts.add(("eu",), 0, 5)  # another assigner's bucket: never taken
    assert [counts.assign(("eu",)) for _ in range(4)] == [1, 3, 3, 5]
    counts.decrement(("eu",), 1)
    assert counts.assign(("eu",)) == 1
    assert counts.assign(("us",)) == 1


@pytest.mark.parametrize("action, old, want", [
    ("move", (("eu",), 4), ("us", "us", ("eu",))),   # moved: -D to eu
    ("move", (("us",), 4), ("us", "us", None)),       # already in its last partition: stays
    ("use-old", (("eu",), 4), ("eu", None, None)),    # merged into eu, every row kept
    ("use-old", None, ("ap", None, None)),            # a new key: its first row's partition
    ("skip-new", (("eu",), 4), ("eu", "eu", None)),   # rows of other partitions ignored
    ("skip-new", None, ("ap", "ap", None)),
])
def test_a_keys_rows_are_placed_as_paimons_processors_place_them(action, old, want):
    d = decide(action, old, ("ap",), ("us",), BucketCounts(10))
    home, keep, deleted = want
    assert d.home == (home,) and (d.keep == (keep,) if keep else d.keep is None)
    assert (d.delete[0] if d.delete else None) == deleted
    if old is not None and d.home == old[0]:
        assert d.bucket == old[1]


class _EmptyTable:
    """The plan of a write into a table without snapshots: every key is new."""

    target_rows = 2

    def open(self):
        return None, None


@pytest.mark.parametrize("engine, want", [
    ("deduplicate", [(1, "eu", 0), (2, "eu", 0), (1, "eu", 3), (1, "us", 0)]),
    ("partial-update", [(1, "eu", 0), (2, "eu", 0), (1, "eu", 0)]),
    ("first-row", [(1, "eu", 0), (2, "eu", 0)]),
])
def test_one_task_places_rows_in_arrival_order(engine, want):
    """Rows 1@eu, 2@eu, 1@us: deduplicate moves key 1 to us (a -D to eu), partial-update merges
    its us row into eu, first-row ignores it."""
    from lakesink.paimon.keyed.layout import VALUE_KIND
    data = pa.table({"user_id": [1, 2, 1], "region": ["eu", "eu", "us"], "name": ["a", "b", "c"],
                     VALUE_KIND: pa.array([0, 0, 0], pa.int8())})
    out, buckets = TaskAssigner(_EmptyTable(), _spec(engine), SCHEMA).route(data, VALUE_KIND)
    rows = list(zip(out.column("user_id").to_pylist(), out.column("region").to_pylist(),
                    out.column(VALUE_KIND).to_pylist()))
    assert rows == want and len(buckets) == len(rows)
