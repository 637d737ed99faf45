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
