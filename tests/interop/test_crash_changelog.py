"""A driver killed while its compaction produces the changelog (`changelog-producer=lookup` /
`full-compaction`): after the restarts the table equals the change stream's final state key
for key, and the changelog, as Apache Paimon's own streaming reader reads it from the first
snapshot, holds every change exactly once: applied in order it builds that same state."""

from __future__ import annotations

import pytest

from tests.crash.harness import Case, make_cdc_source

pytestmark = [pytest.mark.interop, pytest.mark.spark, pytest.mark.crash, pytest.mark.full]  # changelog producers under SIGKILL (the protocol points run by default): ./dev full


def _apply_strictly(changes: list[dict]) -> dict:
    state: dict = {}
    for row in changes:
        key = row["id"]
        if row["rowkind"] in ("-U", "-D"):
            assert state.get(key) == (row["name"], row["grp"]), f"{row} retracts what the stream does not hold"
            del state[key]
        else:
            assert key not in state, f"{row} inserts a key the stream already holds: a change delivered twice"
            state[key] = (row["name"], row["grp"])
    return state


# after-snapshot: the append landed, its changelog not produced yet (the next round must bring it);
# mid-rewrite: changelog files half written; after-aggregate: written and pending, no COMPACT snapshot.
@pytest.mark.parametrize("producer, points", [
    ("lookup", ("after-snapshot@2", "after-aggregate@2")),
    pytest.param("lookup", ("mid-rewrite@2",), marks=pytest.mark.soak),
    pytest.param("full-compaction", ("after-snapshot@2", "mid-rewrite@2", "after-aggregate@2"),
                 marks=pytest.mark.soak),
])
def test_a_driver_killed_while_producing_the_changelog_loses_and_doubles_no_change(tmp_path, java_paimon,
                                                                                   producer, points):
    case = Case(tmp_path, "fast", "sync", cdc=True, options={"changelog-producer": producer})
    expected = make_cdc_source(case.source, files=len(points) + 3)
    for point in points:
        case.crash(point)
    case.finish()
    tally = case.check_keyed(expected)
    assert tally.exactly_once and not tally.problems, tally.problems
    changes = java_paimon.changes(case.table, 0, tmp_path / "java")
    assert {r["rowkind"] for r in changes} >= {"+I", "-U", "+U", "-D"}
    want = {r["id"]: (r["name"], r["grp"]) for r in expected.to_pylist()}
    assert _apply_strictly(changes) == want
