"""The crash harness on keyed tables whose merge shows a batch applied twice: kill, restart, sum.

A primary-key table (key id, grp; two buckets) with `merge-engine=aggregation` summing
`score`, fed inserts one source file per micro-batch. A deduplicate table would hide a batch
committed twice (the second copy replaces the first); here it doubles that batch's scores,
and a lost batch leaves them short. After every kill the table's sums must be those of a
whole number of micro-batches; after the restart, those of the whole source, key for key,
with no batch committed twice and no data file outside the snapshots.

Pipelined chains kill where a batch is accepted but not committed (the restarted query plans
its replay while the committer commits the accepted attempt); the soak's native one then makes a
background commit raise, which must stop the query and leave the batch to the restart. Sync chains compact the buckets
after every micro-batch from the second on (`num-sorted-run.compaction-trigger=1`) and kill
the checkpoint's compaction service mid-rewrite, between a round's rewrite and its COMPACT
snapshot, and after that snapshot before the service saved its state. Which chains run by
default: tests/crash/matrix.py.
"""

from __future__ import annotations


import pytest

from tests.crash.harness import FAIL, SUM_OPTIONS, Case, kill_at_each_summing, make_sum_source
from tests.crash.matrix import KEYED_SUM_CHAINS, KEYED_SUM_SOAK_CHAINS
from tests.helpers import snapshots

pytestmark = [pytest.mark.spark, pytest.mark.crash]

COMPACTING = {"num-sorted-run.compaction-trigger": "1"}
CASES = ([pytest.param(m, c, KEYED_SUM_CHAINS[(m, c)], id=f"{m}-{c}") for m, c in KEYED_SUM_CHAINS]
         + [pytest.param(m, c, KEYED_SUM_SOAK_CHAINS[(m, c)], id=f"{m}-{c}-soak", marks=pytest.mark.soak)
            for m, c in KEYED_SUM_SOAK_CHAINS])


@pytest.mark.parametrize("mode, commit, points", CASES)
def test_a_summing_keyed_table_killed_mid_protocol_counts_every_batch_once(tmp_path, mode, commit, points):
    compacting = any(p.startswith(("mid-rewrite", "after-aggregate", "after-compact")) for p in points)
    options = {**SUM_OPTIONS, **(COMPACTING if compacting else {})}
    case = Case(tmp_path, mode, commit, cdc=True, options=options, extra_column="score")
    # Compaction points: each restart needs a batch to append and one more to compact after.
    prefixes = make_sum_source(case.source, files=(2 + 2 * len(points)) if compacting else len(points) + 2)
    tally = kill_at_each_summing(case, points, prefixes)
    print(f"\nsums {mode}-{commit}: {tally.summary()}; runs: " + ", ".join(f"{r.seconds:.0f}s" for r in case.runs))
    assert tally.kills == len([p for p in points if not p.startswith(FAIL)])
    assert tally.exactly_once and not tally.problems, tally.problems
    assert tally.rows_checked == len(prefixes[-1]) > 0
    if compacting:  # the killed rounds were resolved and compaction went on
        assert "COMPACT" in [s.commit_kind for s in snapshots(case.table)]



@pytest.mark.full
@pytest.mark.parametrize("mode, commit, points", [("fast", "pipelined", ["accepted@2"]),
                                                  ("native", "sync", ["after-snapshot@2"])],
                         ids=["fast-pipelined", "native-sync"])
def test_a_summing_postpone_table_killed_mid_protocol_counts_every_batch_once(tmp_path, mode, commit, points):
    """Postpone buckets (bucket=-2): readers see only what a compaction moved, so the table is
    compacted after each kill and at the end; its sums must be those of whole batches."""
    from pathlib import Path

    import lakesink
    from tests.crash.harness import sums_of
    from tests.helpers import read_table

    options = {**SUM_OPTIONS, "bucket": "-2", "postpone.default-bucket-num": "2"}
    case = Case(tmp_path, mode, commit, cdc=True, options=options, extra_column="score")
    prefixes = make_sum_source(case.source, files=len(points) + 2)
    for point in points:
        case.crash(point)
        if Path(case.table, "snapshot").exists():
            lakesink.compact(None, case.table, progress=False)
            assert sums_of(read_table(case.table)) in prefixes
    case.finish()
    lakesink.compact(None, case.table, progress=False)
    tally = case.check_sums(prefixes[-1])
    assert tally.exactly_once and not tally.problems, tally.problems
    assert {e.bucket for e in _live(case.table)} <= {0, 1}  # nothing left in the postpone bucket


def _live(path):
    from lakesink.paimon.commit.live_files import live_entries
    from lakesink.paimon.table.tables import open_table
    return list(live_entries(open_table(path)))
