"""The crash harness on MERGE from `foreachBatch`: the batch id is the statement's commit identifier.

A stream of inserts (one source file per micro-batch) is MERGEd into a table in
`foreachBatch`, adding each batch's score to the matched row's: a batch applied twice
doubles its scores, a lost one leaves them short. The driver is killed before a MERGE's
snapshot, and after it but before Spark wrote the batch to its commit log: Spark replays
that batch, and the replayed MERGE, with the same commit user and identifier, must change
nothing. After every kill the sums are those of a whole number of micro-batches; after the
restart, those of the whole source, key for key, with no data file outside the snapshots.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.crash.driver import MERGE_USER
from tests.crash.harness import Case, kill_at_each_summing, make_sum_source
from tests.helpers import snapshots

pytestmark = [pytest.mark.spark, pytest.mark.crash]

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("grp", pa.int32()), ("score", pa.float64())])
KINDS = {"keyed": {"primary-key": "id,grp", "bucket": "2"},   # the change as row kinds, no file rewritten
         "append": {"bucket": "-1"}}                           # rewritten copy-on-write
POINTS = ["before-snapshot@2", "after-snapshot@2"]
AFTER = ["after-snapshot@2"]  # the replay a commit identity must make a no-op


# ./dev full: a keyed table killed after a MERGE's snapshot, before Spark's commit log (the replay
# case), and before the snapshot too, and an append table at both points. The default run proves
# the replay without a kill (tests/spark/test_rowlevel.py: a replayed merge, foreachBatch).
@pytest.mark.parametrize("kind, points", [
    pytest.param("keyed", AFTER, id="keyed-after-snapshot", marks=pytest.mark.full),
    pytest.param("keyed", POINTS, id="keyed", marks=pytest.mark.full),
    pytest.param("append", POINTS, id="append", marks=pytest.mark.full)])
def test_a_driver_killed_around_a_merge_snapshot_applies_every_micro_batch_once(tmp_path, kind, points):
    from lakesink.paimon.table import tables

    case = Case(tmp_path, "fast", "sync", cdc=True, extra_column="score", merge=True)
    primary_key = KINDS[kind].get("primary-key", "")
    tables.create_table(case.table, SCHEMA, [], primary_key.split(",") if primary_key else [],
                        {k: v for k, v in KINDS[kind].items() if k != "primary-key"})
    prefixes = make_sum_source(case.source, files=len(points) + 3)

    tally = kill_at_each_summing(case, points, prefixes)

    print(f"\nmerge {kind}: {tally.summary()}; runs: " + ", ".join(f"{r.seconds:.0f}s" for r in case.runs))
    assert tally.kills == len(points)
    assert tally.exactly_once and not tally.problems, tally.problems
    assert tally.rows_checked == len(prefixes[-1]) > 0
    merges = [s for s in snapshots(case.table) if s.commit_user == MERGE_USER]
    identifiers = [s.commit_identifier for s in merges]
    assert identifiers == sorted(set(identifiers)) == list(range(len(prefixes) - 1)), identifiers
