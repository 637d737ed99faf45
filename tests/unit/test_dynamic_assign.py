"""Dynamic-bucket assignment in bulk gives every key the bucket pypaimon's per-key assigner gives it."""

import random

import numpy as np
import pytest
from pypaimon.index.dynamic_bucket import HashBucketAssigner, _PartitionIndex

from lakesink.paimon.keyed.dynamic import StoredIndex, assign_keys


def _assigner(index: dict, counts: dict, target: int, max_buckets: int, assign_id: int = 0, assigners: int = 2,
              max_bucket_id: int = 0):
    """An assigner whose partition () already holds `index` (hash -> bucket) and bucket `counts`."""
    assigner = HashBucketAssigner(None, assigners, assigners, assign_id, target, max_buckets,
                                  ignore_existing=True, snapshot=None)
    assigner._partition_indexes[()] = _PartitionIndex(dict(index), dict(counts), target)
    assigner.max_bucket_id = max_bucket_id
    return assigner


def _hashes(n: int, assign_id: int, assigners: int, seed: int) -> np.ndarray:
    """`n` distinct hashes of assigner `assign_id`, then a third of them again, all shuffled."""
    rng = np.random.default_rng(seed)
    values = np.unique(rng.integers(-2**31, 2**31, n * assigners * 2, dtype=np.int64)).astype(np.int32)
    rng.shuffle(values)
    mine = values[np.abs(np.fmod(values.astype(np.int64), assigners)) == assign_id][:n]
    repeated = np.concatenate([mine, mine[::3]])
    rng.shuffle(repeated)
    return repeated


CASES = {
    "a new table": ({}, {}, 1000, -1, 0),
    "known keys, a bucket with room, a full one": (None, {0: 1000, 2: 700, 4: 1000}, 1000, -1, 4),
    "many small buckets": ({}, {}, 7, -1, 0),
    "max-buckets reached (picked at random)": (None, {0: 40, 2: 50}, 50, 4, 2),
}


@pytest.mark.parametrize("stored", [False, True], ids=["known keys restored", "known keys in the stored index"])
@pytest.mark.parametrize("case", CASES)
def test_bulk_assignment_equals_pypaimons_key_by_key(case, stored):
    index, counts, target, max_buckets, max_bucket_id = CASES[case]
    hashes = _hashes(3000, 0, 2, seed=len(case))
    if index is None:  # the first 500 hashes known, spread over the existing buckets
        index = {int(h): sorted(counts)[i % len(counts)] for i, h in enumerate(hashes[:500])}
    theirs = _assigner(index, counts, target, max_buckets, max_bucket_id=max_bucket_id)
    # ours finds the known keys where lakesink reads them (the planned snapshot's index files),
    # or where pypaimon has restored them
    ours = _assigner({} if stored else index, counts, target, max_buckets, max_bucket_id=max_bucket_id)
    known = StoredIndex(np.array(list(index), np.int32), np.array(list(index.values()), np.int32)) if stored \
        else StoredIndex.of(ours, ())
    random.seed(7)
    expected = [b for b, _ in theirs.assign_batch([()] * len(hashes), [0] * len(hashes), hashes.tolist())]
    random.seed(7)
    got = assign_keys(ours, (), hashes, known)
    assert got.tolist() == expected
    assert len(set(expected)) > 1  # the case opens or fills more than one bucket
    # and both leave the same state behind: the next batch goes on alike
    new_keys = {h: b for h, b in theirs._partition_indexes[()].hash_to_bucket.items() if not stored or h not in index}
    assert ours._partition_indexes[()].hash_to_bucket == new_keys
    assert ours._partition_indexes[()].non_full_bucket_information == \
        theirs._partition_indexes[()].non_full_bucket_information
    assert ours.max_bucket_id == theirs.max_bucket_id


# ---------------------------------------------------------------- format("paimon")'s planned assignment

def _planned_reference(table, snapshot, plan, partitions, hashes) -> list[int]:
    """The planned assignment, key by key, from the index as pypaimon reads it hash by hash: a
    known hash keeps its bucket; a new one goes to the first bucket of its assigner with room in
    the snapshot, else the assigner's next unused bucket id, else (max-buckets reached) one of the
    assigner's buckets picked by abs(hash) % their number."""
    from pypaimon.index.dynamic_bucket import _iter_hashes
    from lakesink.paimon.keyed.dynamic import index_entries

    n, out, by_partition = plan.assigners, [], {}
    for partition, value in zip(partitions, hashes.tolist()):
        if partition not in by_partition:
            entries = index_entries(table, snapshot, partition)
            known = {h: e.bucket for e in entries for h in _iter_hashes(table, e)}
            by_partition[partition] = (known, {e.bucket: e.index_file.row_count for e in entries})
        known, counts = by_partition[partition]
        if value in known:
            out.append(known[value])
            continue
        a = abs(value) % n if value >= 0 else (-value) % n
        own = [b for b in counts if b % n == a]
        room = [b for b in own if counts[b] < plan.target_rows]
        limit = plan.max_buckets if plan.max_buckets > 0 else 1 << 15
        fresh = [b for b in range(a, limit, n) if b not in counts]
        out.append(room[0] if room else fresh[0] if fresh else sorted(own)[abs(value) % len(own)])
    return out


@pytest.mark.parametrize("assigners, target, max_buckets", [(3, 700, -1), (3, 700, 4), (1, 300, 3)],
                         ids=["buckets open", "max-buckets reached", "full buckets picked by hash"])
def test_planned_assignment_in_bulk_equals_the_rule_key_by_key(tmp_path, assigners, target, max_buckets):
    import pyarrow as pa
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    from lakesink.paimon.files.keyhash import key_hashes
    from lakesink.paimon.keyed.dynamic import DynamicPlan, PlannedAssignment
    from lakesink.paimon.table import tables
    from tests.helpers import pypaimon_append

    catalog = CatalogFactory.create({"warehouse": str(tmp_path)})
    catalog.create_database("db", True)
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("p", pa.string(), False), ("v", pa.int64())])
    catalog.create_table("db.t", Schema.from_pyarrow_schema(schema, partition_keys=["p"], primary_keys=["id", "p"],
                                                            options={"bucket": "-1",
                                                                     "dynamic-bucket.target-row-num": "700"}), False)
    ids = np.arange(3000)
    data = pa.table({"id": ids, "p": ["a" if i % 3 else "b" for i in ids], "v": ids}, schema=schema)
    written = catalog.get_table("db.t")
    pypaimon_append(written, data)  # pypaimon's own writer makes the buckets and their index

    path = f"{tmp_path}/db.db/t"
    table = tables.open_table(path)
    snapshot = table.snapshot_manager().get_latest_snapshot()
    # known keys (every third one) and new ones, in both partitions and a new one
    more = np.arange(3000, 6000)
    rows = pa.table({"id": np.concatenate([ids[::3], more]),
                     "p": ["a" if i % 3 else "b" for i in ids[::3]] + [("a", "b", "c")[i % 3] for i in more]})
    fields = [f for f in table.table_schema.fields if f.name == "id"]
    hashes = key_hashes(rows.select(["id"]), ["id"], fields)
    hashes = np.asarray(hashes, np.int32)
    partitions = [(p,) for p in rows.column("p").to_pylist()]
    plan = DynamicPlan(path, None, snapshot.id, assigners, target, max_buckets)
    expected = _planned_reference(table, snapshot, plan, partitions, hashes)
    got = PlannedAssignment(plan).assign(partitions, hashes)
    assert got.tolist() == expected
    assert len(set(expected)) >= 3
    scan = written.new_read_builder().new_scan().plan().splits()  # where pypaimon put each known id
    home = {(i, s.partition.values[0]): s.bucket for s in scan
            for i in written.new_read_builder().new_read().to_arrow([s]).column("id").to_pylist()}
    known = len(ids[::3])
    assert got[:known].tolist() == [home[(i, p[0])] for i, p in zip(ids[::3].tolist(), partitions[:known])]
    again = PlannedAssignment(plan)  # the same function in another task, given the rows in two parts
    half = len(partitions) // 2
    assert np.concatenate([again.assign(partitions[:half], hashes[:half]),
                           again.assign(partitions[half:], hashes[half:])]).tolist() == expected
