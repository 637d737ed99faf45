"""The crash harness with data files written in place (write.in-place, forced on the local disk).

A streaming query on the Spark-native path whose driver is SIGKILLed at each point of the
commit protocol, then restarted on the same checkpoint (with failing first task attempts), must
leave every source row exactly once and no data file outside the snapshots: the files of the
dead runs' attempts lie in the table's own directories, and only their intents lead to them.
"""

from __future__ import annotations

import pytest

from tests.crash.harness import Case, append_as_other_writer, make_source

from .test_crash import ROWS_PER_FILE, assert_nothing_twice

pytestmark = [pytest.mark.spark, pytest.mark.crash]

IN_PLACE = {"write.in-place": "true"}
CHAINS = {
    # Default: files written in place half removed by an abort (they lay at their table paths,
    # uncommitted); the other points run the append chains' code (test_crash.py).
    "sync-short": ["during-abort@1"],
    "sync": ["tasks-done@2", "files-placed@2", "after-snapshot@2", "during-abort@1"],
    "pipelined": ["during-abort@1", "accepted@2", "after-snapshot@2"],
}


# The full chains (~2 min each) run in the soak.
# ./dev full: the default run ends jobs written in place without kills (tests/spark/test_in_place.py:
# a cancelled job, a late task) and kills during-abort on the staged native path (test_crash.py).
@pytest.mark.parametrize("chain", [pytest.param("sync-short", marks=pytest.mark.full), pytest.param("sync", marks=pytest.mark.soak),
                                   pytest.param("pipelined", marks=pytest.mark.soak)])
def test_a_driver_killed_at_each_commit_point_writing_in_place_leaves_every_row_once_and_no_file_behind(
        tmp_path, chain):
    points, commit = CHAINS[chain], chain.split("-")[0]
    case = Case(tmp_path, "native", commit, options=IN_PLACE)
    make_source(case.source, files=len(points) + 2, rows_per_file=ROWS_PER_FILE)
    other_rows = 0
    for point in points:
        case.crash(point, fail_always_partition=0 if point.startswith("during-abort") else None)
        assert_nothing_twice(case, other_rows)
        if point.startswith("after-snapshot"):
            other_rows += append_as_other_writer(case.table, 2)
    case.finish(fail_first_attempt=0.5)
    tally = case.check(other_writer_rows=other_rows)
    print(f"\nnative-{commit} in place: {tally.summary()}; runs: " + ", ".join(f"{r.seconds:.0f}s" for r in case.runs))
    assert tally.kills == len(points)
    assert tally.exactly_once, tally.problems
    assert not tally.problems
