"""The crash harness on a keyed change stream through `format("paimon")`: kill the driver at a
step of the commit protocol, restart it on the same checkpoint, until it catches up.

Each micro-batch comes from three writer tasks, so several tasks write one bucket; its sequence
numbers are planned when Spark builds the batch's writer (above the table and, pipelined, above
the batches still pending). After every kill the table must be the source's state after a whole
number of micro-batches, and at the end the source's final state key for key: a batch committed
once (a replay skipped, or its accepted attempt committed), never ordered under an earlier one.
"""

from __future__ import annotations

import pytest

from tests.helpers import snapshots
from tests.crash.harness import Case, cdc_prefix_states, keyed_state, make_cdc_source

pytestmark = [pytest.mark.spark, pytest.mark.crash]


# All in the soak: a deduplicate table hides a batch applied twice. The default run kills these
# points on summing keyed tables (tests/spark/test_crash_keyed.py). Pipelined, killed where a
# batch is accepted but not committed; sync, killed in the checkpoint's compaction service
# between a round's rewrite and its COMPACT snapshot; the sync protocol's steps, and a
# pipelined background commit's snapshot.
@pytest.mark.soak
@pytest.mark.parametrize("commit, points", [
    ("pipelined", ["accepted@2"]),
    ("sync", ["after-aggregate@1"]),
    pytest.param("sync", ["files-placed@2", "after-snapshot@2", "tasks-done@2"], marks=pytest.mark.soak),
    pytest.param("pipelined", ["accepted@2", "after-snapshot@2"], marks=pytest.mark.soak),
], ids=["pipelined-accepted", "sync-compaction-service", "sync-chain", "pipelined-chain"])
def test_a_keyed_change_stream_through_format_paimon_killed_mid_protocol_ends_key_for_key(tmp_path, commit, points):
    case = Case(tmp_path, "native", commit, cdc=True)
    expected = make_cdc_source(case.source, files=len(points) + 2)
    prefixes = cdc_prefix_states(case.source)
    for point in points:
        case.crash(point)
        assert keyed_state(case.table) in prefixes, f"after {case.runs[-1].log} the table is no prefix of the stream"
    case.finish()
    tally = case.check_keyed(expected)
    print(f"\nformat('paimon') keyed cdc, {commit}: {tally.summary()}; runs: "
          + ", ".join(f"{r.seconds:.0f}s" for r in case.runs))
    assert tally.kills == len(points)
    assert tally.exactly_once and not tally.problems, tally.problems
    assert len(expected) and tally.rows_checked == len(expected)
    if "after-aggregate@1" in points:  # the round killed before its snapshot landed after the restart
        kinds = [s.commit_kind for s in snapshots(case.table)]
        assert "COMPACT" in kinds, kinds
