"""The crash harness on a dynamic-bucket table (bucket=-1): a summing primary-key table (key id,
grp; partitioned by grp) whose buckets open as 5 keys fill one, fed one source file per
micro-batch, the driver killed where a commit has written its hash index files but no snapshot
yet, and after the snapshot. Afterwards every key's sum is that of the whole source (no batch
lost or counted twice, no key read twice) and the index holds each key's hash in exactly one
bucket of its partition, nothing else: a killed attempt's index files are in no snapshot. With
deletion vectors too (merged runs and deletion vectors placed before the snapshot)."""

from __future__ import annotations

from collections import Counter

import pytest

from lakesink.paimon.table.tables import open_table
from tests.crash.harness import SUM_OPTIONS, Case, kill_at_each_summing, make_sum_source
from tests.helpers import read_table

pytestmark = [pytest.mark.spark, pytest.mark.crash]

DYNAMIC = {"bucket": "-1", "dynamic-bucket.target-row-num": "5"}


def _check_index(table_path: str) -> None:
    from pypaimon.index.dynamic_bucket import _read_hashes
    from pypaimon.index.index_file_handler import IndexFileHandler

    from lakesink.paimon.files.keyhash import key_hashes
    table = open_table(table_path)
    by_partition: dict[tuple, Counter] = {}
    for entry in IndexFileHandler(table).scan(None, lambda e: e.index_file.index_type == "HASH"):
        by_partition.setdefault(tuple(entry.partition.values), Counter()).update(_read_hashes(table, entry))
    rows = read_table(table_path)
    hashes = key_hashes(rows.select(["id"]), ["id"], table.table_schema.fields).tolist()
    wanted: dict[tuple, set] = {}
    for grp, h in zip(rows.column("grp").to_pylist(), hashes):
        wanted.setdefault((grp,), set()).add(h)
    assert {p: set(c) for p, c in by_partition.items()} == wanted
    assert all(n == 1 for c in by_partition.values() for n in c.values()), "a key's hash in two buckets"


# With deletion vectors a commit also places merged runs and deletion-vector files before its snapshot.
@pytest.mark.parametrize("mode, points, extra", [
    pytest.param("fast", ["before-snapshot@2", "after-snapshot@3"], {}, marks=pytest.mark.full),
    pytest.param("native", ["files-placed@2", "after-snapshot@3"], {}, marks=pytest.mark.full),
    pytest.param("fast", ["files-placed@2", "after-snapshot@3"], {"deletion-vectors.enabled": "true"},
                 id="fast-dv", marks=pytest.mark.full),
    pytest.param("native", ["files-placed@2", "after-snapshot@3"], {"deletion-vectors.enabled": "true"},
                 id="native-dv", marks=pytest.mark.full),
])
def test_a_dynamic_bucket_table_killed_mid_commit_counts_every_batch_once(tmp_path, mode, points, extra):
    case = Case(tmp_path, mode, "sync", cdc=True, options={**SUM_OPTIONS, **DYNAMIC, **extra},
                extra_column="score")
    prefixes = make_sum_source(case.source, files=len(points) + 2)
    tally = kill_at_each_summing(case, points, prefixes)
    assert tally.kills == len(points)
    assert tally.exactly_once and not tally.problems, tally.problems
    _check_index(case.table)
    assert open_table(case.table).table_schema.options["bucket"] == "-1"
    if extra:  # merged on write: nothing left at level 0, older versions marked deleted
        from tests.spark.test_deletion_vectors import live_files
        files, vectors = live_files(case.table)
        assert files and all(level > 0 for level, _ in files) and vectors
