"""Soak: kill the streaming driver at random moments, many times, on both paths and commit modes.

    ./dev soak                                  # 50 kills
    LAKESINK_SOAK_KILLS=200 ./dev soak          # more; LAKESINK_SOAK_SEED fixes the random choices

Cases rotate over (native, sync), (native, pipelined), (fast, sync), (fast, pipelined); each case
kills its driver up to `KILLS_PER_CASE` times at a random moment after its Spark
session is up (a third of the runs also inject first-attempt task failures),
then lets it catch up and checks the table with pypaimon. Prints the tally.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from tests.crash.harness import Tally, random_kill_case

pytestmark = [pytest.mark.spark, pytest.mark.crash, pytest.mark.soak]

KILLS = int(os.environ.get("LAKESINK_SOAK_KILLS", "50"))
SEED = int(os.environ.get("LAKESINK_SOAK_SEED", str(int(time.time()))))
KILLS_PER_CASE = 4
PATHS = [("native", "sync"), ("native", "pipelined"), ("fast", "sync"), ("fast", "pipelined")]


def test_random_kills_never_lose_or_duplicate_a_row_nor_leave_a_file(tmp_path):
    rng = random.Random(SEED)
    total = Tally()
    per_path = {p: Tally() for p in PATHS}
    started = time.monotonic()
    number = 0
    while total.kills < KILLS:
        mode, commit = PATHS[number % len(PATHS)]
        tally = random_kill_case(tmp_path / f"case-{number:03d}", mode, commit, rng,
                                 max_kills=min(KILLS_PER_CASE, KILLS - total.kills))
        total.add(tally)
        per_path[(mode, commit)].add(tally)
        number += 1
        print(f"[{time.monotonic() - started:6.0f}s] case {number} {mode}-{commit}: {tally.summary()}",
              flush=True)
    print(f"\nsoak seed {SEED}, {time.monotonic() - started:.0f} s")
    for (mode, commit), tally in per_path.items():
        print(f"  {mode}-{commit}: {tally.summary()}")
    print(f"TALLY: {total.summary()}")
    assert total.exactly_once, total.problems
