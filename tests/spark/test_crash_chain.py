"""A chain A -> streaming query -> B holds each row of A exactly once, across driver kills.

Table A is a Paimon append table written by pypaimon alone (a few snapshots of
known rows, partitioned). A child driver (`tests.crash.driver --source-table`)
streams it with `spark.readStream.format("paimon")` from its earliest snapshot,
with a consumer id, into table B, trigger availableNow. The chain kills the
driver with SIGKILL at named points of B's commit and once at a random moment,
restarts it on the same checkpoint, and appends more snapshots to A between
runs. After every kill B may miss rows of A but never hold one twice; at the
end B holds every row of A exactly once (read with pypaimon), has no data file
outside its snapshots, and A's consumer file says every snapshot was read.

Each child Spark start costs ~10-15 s: one chain per sink path, three or four runs each;
the default suite runs the native path's chain, the fast path's is a soak.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from tests.crash.driver import SOURCE_SCHEMA
from tests.crash.harness import Case
from tests.helpers import latest_snapshot_id, pypaimon_append, read_table

pytestmark = [pytest.mark.spark, pytest.mark.crash]

ROWS_PER_SNAPSHOT = 40
CONSUMER = "chain"
SEED = int(os.environ.get("LAKESINK_CHAIN_SEED", str(int(time.time()))))
# Named points on B's commit; with availableNow each run plans one new batch of A's
# snapshots (after replaying the batch a kill interrupted), so every point is hit @1.
POINTS = {
    # The default chain: tasks-done on format("paimon") is killed by the append chain (test_crash.py).
    ("native", "sync"): ["after-snapshot@1"],
    ("fast", "pipelined"): ["accepted@1", "after-snapshot@1"],
    ("native", "pipelined"): ["accepted@1", "after-snapshot@1"],
}


class TableA:
    """The source table: pypaimon commits, snapshot k holding ids k*40 .. k*40+39."""

    def __init__(self, warehouse: Path):
        from pypaimon import CatalogFactory, Schema

        catalog = CatalogFactory.create({"warehouse": str(warehouse)})
        catalog.create_database("src", True)
        catalog.create_table("src.a", Schema.from_pyarrow_schema(SOURCE_SCHEMA, partition_keys=["grp"]), False)
        self.table = catalog.get_table("src.a")
        self.path = str(warehouse / "src.db" / "a")
        self.next_id = 0

    def append(self, snapshots: int) -> None:
        for _ in range(snapshots):
            ids = list(range(self.next_id, self.next_id + ROWS_PER_SNAPSHOT))
            pypaimon_append(self.table, pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids],
                                                  "grp": pa.array([i % 3 for i in ids], pa.int32())},
                                                 schema=SOURCE_SCHEMA))
            self.next_id += ROWS_PER_SNAPSHOT


def assert_nothing_twice(case: Case, a: TableA) -> None:
    if not Path(case.table, "snapshot").exists():
        return
    ids = Counter(read_table(case.table).column("id").to_pylist())
    twice = sorted(i for i, n in ids.items() if n > 1)
    assert not twice, f"rows of A twice in B after {case.runs[-1].log}: {twice[:10]}"
    assert all(0 <= i < a.next_id for i in ids), f"rows in B that A never held after {case.runs[-1].log}"


# The pipelined chains run on demand (soak): one chain is ~1.5-3 min of child Spark runs.
# ./dev full: the default run streams A -> B across restarts without kills (tests/spark/test_read_stream.py)
# and kills the writer at every protocol point in the append chains (tests/spark/test_crash.py).
CHAINS = [pytest.param("native", "sync", id="native-sync", marks=pytest.mark.full),
          pytest.param("fast", "pipelined", id="fast-pipelined", marks=pytest.mark.soak),
          pytest.param("native", "pipelined", id="native-pipelined", marks=pytest.mark.soak)]


@pytest.mark.parametrize("mode,commit", CHAINS)
def test_a_chain_killed_at_commit_points_and_at_random_holds_each_row_of_a_exactly_once(tmp_path, mode, commit):
    rng = random.Random(SEED)
    a = TableA(tmp_path / "warehouse")
    a.append(5)
    case = Case(tmp_path, mode, commit, source_table=a.path, consumer_id=CONSUMER)

    for point in POINTS[(mode, commit)]:
        case.crash(point)
        assert_nothing_twice(case, a)
        a.append(2)  # while the chain is down
    delay = rng.uniform(1.0, 10.0)  # seconds after the session is up: planning, reading or committing
    case.run(kill_after=delay)
    assert_nothing_twice(case, a)
    a.append(1)
    case.finish(fail_first_attempt=0.5)

    expected = read_table(a.path)
    assert expected.num_rows == a.next_id == (5 + 2 * len(POINTS[(mode, commit)]) + 1) * ROWS_PER_SNAPSHOT
    tally = case.check(expected=expected)
    print(f"\nchain {mode}-{commit} (seed {SEED}, random kill after {delay:.1f} s): {tally.summary()}; "
          "runs: " + ", ".join(f"{r.seconds:.0f}s{' killed' if r.killed else ''}" for r in case.runs))
    assert tally.kills >= len(POINTS[(mode, commit)])
    assert tally.exactly_once, tally.problems
    assert not tally.problems
    with open(os.path.join(a.path, "consumer", f"consumer-{CONSUMER}")) as f:
        assert json.load(f) == {"nextSnapshot": latest_snapshot_id(a.path) + 1}
