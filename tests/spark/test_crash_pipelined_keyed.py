"""The crash harness on a pipelined keyed change stream (fast path): kill the driver where a
batch is accepted but not committed, and right after a background commit's snapshot.

Pipelined, batch N+1's sequence numbers are planned above batch N's while N is still being
committed. After every kill the table must be the source's state after a whole number of
micro-batches, and after the restarts the source's final state key for key: a restored batch
committed once, never under a later one, and never taken for another writer's conflict.
"""

from __future__ import annotations

import pytest

from tests.crash.harness import Case, cdc_prefix_states, keyed_state, make_cdc_source

pytestmark = [pytest.mark.spark, pytest.mark.crash]


# Soak: a deduplicate table hides a batch applied twice; the default run kills a pipelined
# summing keyed table at accepted (tests/spark/test_crash_keyed.py). The second case also kills
# right after a background commit's snapshot (each driver run costs ~1 min).
@pytest.mark.soak
@pytest.mark.parametrize("points", [
    ["accepted@2"],
    pytest.param(["accepted@2", "after-snapshot@2"], marks=pytest.mark.soak),
], ids=["accepted", "accepted+after-snapshot"])
def test_a_pipelined_keyed_change_stream_killed_at_accept_and_after_snapshot_ends_key_for_key(tmp_path, points):
    case = Case(tmp_path, "fast", "pipelined", cdc=True)
    expected = make_cdc_source(case.source, files=len(points) + 2)
    prefixes = cdc_prefix_states(case.source)
    for point in points:
        case.crash(point)
        state = keyed_state(case.table)
        assert state in prefixes, f"after {case.runs[-1].log} the table is no prefix of the change stream"
    case.finish()
    tally = case.check_keyed(expected)
    print(f"\npipelined keyed cdc: {tally.summary()}; runs: " + ", ".join(f"{r.seconds:.0f}s" for r in case.runs))
    assert tally.kills == len(points)
    assert tally.exactly_once and not tally.problems, tally.problems
    assert len(expected) and tally.rows_checked == len(expected)
