"""The crash harness in CI: kill the streaming driver at every named point of the commit protocol.

Each test is a chain on one table and checkpoint: every run kills the driver
with SIGKILL (its whole process group) at the next point, the next run restarts
on the same checkpoint, and a last clean run (with injected task failures)
catches up. Points are hit at their 2nd occurrence (`@2`) where possible, so each
run also commits a batch and the chain moves on. After every kill the table may
miss rows but must never hold one twice; at the end it must hold every source row
exactly once, with no data file outside its snapshots.

Which point is killed on which path by default: the table in tests/crash/matrix.py
(checked by tests/unit/test_crash_matrix.py). One Spark driver child runs at a time;
each start costs ~10-15 s, hence chains instead of one test per point.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from tests.crash.driver import SOURCE_SCHEMA
from tests.crash.harness import (Case, append_as_other_writer, cdc_prefix_states, keyed_state, make_cdc_source,
                                 make_source)
from tests.crash.matrix import APPEND_CHAINS, APPEND_SOAK_CHAINS
from tests.helpers import read_table

pytestmark = [pytest.mark.spark, pytest.mark.crash]

ROWS_PER_FILE = 50
OTHER_WRITER_SNAPSHOTS = 3
CHAINS = {**APPEND_CHAINS, **APPEND_SOAK_CHAINS}


def crash_options(mode: str, point: str) -> dict:
    """How a chain reaches `point`: during-abort needs a batch to abort."""
    if not point.startswith("during-abort"):
        return {}
    if mode == "native":
        return {"fail_always_partition": 0}  # the batch fails past its task retries: Spark aborts it
    return {"fail_at": "before-snapshot@1"}  # the fast path's commit raises: it discards the batch's files


def assert_nothing_twice(case: Case, other_writer_rows: int) -> None:
    if not Path(case.table, "snapshot").exists():
        return
    ids = Counter(read_table(case.table).column("id").to_pylist())
    twice = sorted(i for i, n in ids.items() if n > 1)
    assert not twice, f"rows committed twice after {case.runs[-1].log}: {twice[:10]}"
    assert sum(n for i, n in ids.items() if i < 0) == other_writer_rows
    assert all(i < (len(list(case.source.glob('*.parquet'))) * ROWS_PER_FILE) for i in ids)


@pytest.mark.parametrize("mode,commit", [
    *[pytest.param(m, c, id=f"{m}-{c}") for m, c in APPEND_CHAINS],
    *[pytest.param(m, c, id=f"{m}-{c}", marks=pytest.mark.soak) for m, c in APPEND_SOAK_CHAINS]])
def test_a_driver_killed_at_each_commit_point_still_writes_every_row_exactly_once(tmp_path, mode, commit):
    points = CHAINS[(mode, commit)]
    evolving = points[0].startswith("schema-written")
    case = Case(tmp_path, mode, commit, **(EVOLVING if evolving else {}))
    other_rows = 0
    if evolving:  # the table lacks the source's `score` column: the first commit writes schema-1
        from lakesink.paimon.table import tables
        tables.create_table(case.table, pa.schema([f.with_nullable(True) for f in SOURCE_SCHEMA]), ["grp"], [],
                            {"bucket": "-1"})
        other_rows += append_as_other_writer(case.table, 1, first=1001)  # ids apart from the later ones
    make_source(case.source, files=len(points) + 2, rows_per_file=ROWS_PER_FILE,
                extra_column="score" if evolving else None)
    for point in points:
        case.crash(point, **crash_options(mode, point))
        assert_nothing_twice(case, other_rows)
        if point.startswith("schema-written"):
            assert_schema_evolved_once(case)
        if point.startswith("after-snapshot"):
            other_rows += append_as_other_writer(case.table, OTHER_WRITER_SNAPSHOTS)
    case.finish(fail_first_attempt=0.5)
    tally = case.check(other_writer_rows=other_rows)
    print(f"\n{mode}-{commit}: {tally.summary()}; runs: "
          + ", ".join(f"{r.seconds:.0f}s" for r in case.runs))
    assert tally.kills == len(points)
    assert tally.exactly_once, tally.problems
    assert not tally.problems
    if evolving:
        assert_schema_evolved_once(case)
        rows = read_table(case.table)
        scores = {i: s for i, s in zip(rows.column("id").to_pylist(), rows.column("score").to_pylist())}
        assert all(scores[i] == i / 2 for i in scores if i >= 0)
        assert all(scores[i] is None for i in scores if i < 0)


# write.merge-schema under the crash harness: the stream's source has a column the table lacks.
EVOLVING = {"options": {"write.merge-schema": "true"}, "extra_column": "score"}


def assert_schema_evolved_once(case: Case) -> None:
    """The driver died after the commit wrote the table's next schema, before the snapshot (or
    later): the table stays readable with the new column, and no restart writes the schema again."""
    assert sorted(p.name for p in Path(case.table, "schema").iterdir()) == ["schema-0", "schema-1"]
    assert read_table(case.table).column_names == ["id", "name", "grp", "score"]


# The same kill alone (the default run kills it in the fast append chain).
@pytest.mark.soak
def test_a_fast_path_driver_killed_discarding_a_failed_commit_restarts_exactly_once(tmp_path):
    """The fast path's commit raises (injected before the snapshot), so it discards the batch's
    files; the driver dies halfway through. The batch was never acknowledged to Spark, which
    replays it: the restart must catch up with every row once and no file left behind."""
    case = Case(tmp_path, "fast", "sync")
    make_source(case.source, files=3, rows_per_file=ROWS_PER_FILE)
    case.crash("during-abort@1", **crash_options("fast", "during-abort@1"))
    assert_nothing_twice(case, 0)
    case.finish()
    tally = case.check()
    assert tally.exactly_once and not tally.problems, tally.problems


# Both paths restore through the same committer: the fast path's case in ./dev full, the native
# path's (~80 s) in the soak.
@pytest.mark.parametrize("mode", [pytest.param("fast", marks=pytest.mark.full), pytest.param("native", marks=pytest.mark.soak)])
def test_a_pending_batch_whose_files_were_deleted_fails_to_restore_naming_the_files(tmp_path, mode):
    case = Case(tmp_path, mode, "pipelined")
    make_source(case.source, files=2 if mode == "fast" else 3, rows_per_file=ROWS_PER_FILE)
    case.crash("accepted@1")  # batch 0 durably accepted and acknowledged, not committed
    [pending] = Path(case.checkpoint, "lakesink").glob("pending-*.json")
    staged = [c["staged_path"] for c in json.loads(pending.read_text())["committables"]]
    assert staged
    for path in staged:
        Path(path).unlink()
    if mode == "native":
        # As if the kill had come after Spark wrote batch 0 to its commit log: no replay of it.
        # (The fast path restores before its query starts, whatever Spark recorded.)
        Path(case.checkpoint, "commits").mkdir(exist_ok=True)
        Path(case.checkpoint, "commits", "0").write_text('v1\n{"nextBatchWatermarkMs":0}')

    result = case.run()

    assert result.returncode == 1
    log = result.log.read_text()
    assert "RestoreError: Cannot restore pending commit 0" in log
    assert "no longer exist" in log
    assert Path(staged[0]).name in log
    assert pending.exists(), "the pending state must stay for the operator to see"
    assert not Path(case.table, "snapshot").exists()


# Soak: a deduplicate table hides a batch applied twice; the default run kills keyed
# aggregation tables whose sums show it (tests/spark/test_crash_keyed.py).
@pytest.mark.soak
def test_a_driver_killed_at_each_commit_point_of_a_keyed_change_stream_leaves_the_table_key_for_key(tmp_path):
    """A CDC stream (inserts, updates, deletes, re-inserts) into a primary-key table on the
    fast path: after every kill the table is the source's state after some whole number of
    micro-batches (never half a batch, never a replay applied over newer changes), and at
    the end it equals the final state key for key."""
    points = ["before-snapshot@2", "after-snapshot@2"]
    case = Case(tmp_path, "fast", "sync", cdc=True)
    expected = make_cdc_source(case.source, files=len(points) + 3)
    prefixes = cdc_prefix_states(case.source)
    for point in points:
        case.crash(point)
        state = keyed_state(case.table)
        assert state in prefixes, f"after {case.runs[-1].log} the table is no prefix of the change stream"
    case.finish(fail_first_attempt=0.5)
    tally = case.check_keyed(expected)
    print(f"\nkeyed cdc: {tally.summary()}")
    assert tally.exactly_once and not tally.problems, tally.problems
    assert len(expected) and tally.rows_checked == len(expected)


AGGREGATOR = {"aggregator.enabled": "true", "target-file-size": "1mb"}


# Soak: whether the restart after the first kill reaches a second rewrite depends on how Spark
# batches the remaining files; tests/unit/test_aggregator.py kills at every aggregation step in CI.
@pytest.mark.soak
def test_a_driver_killed_while_the_aggregator_compacts_still_writes_every_row_exactly_once(tmp_path):
    """The small-file aggregator under the crash harness: kills between the append
    snapshot and the compact snapshot, and mid-rewrite, on the Spark-native path."""
    points = ["after-aggregate@1", "mid-rewrite@1"]
    case = Case(tmp_path, "native", "sync", options=AGGREGATOR)
    # One file per micro-batch and a rewrite per five small files: twelve files leave the
    # restarted run (after the first kill, near batch 4) enough for a second rewrite to kill.
    make_source(case.source, files=12, rows_per_file=ROWS_PER_FILE)
    for point in points:
        case.crash(point)
        assert_nothing_twice(case, 0)
    case.finish()
    tally = case.check()
    snapshot_files = Path(case.table, "snapshot").glob("snapshot-*")
    kinds = Counter(json.loads(p.read_text())["commitKind"] for p in snapshot_files)
    print(f"\naggregator: {tally.summary()}; snapshot kinds {dict(kinds)}")
    assert kinds["COMPACT"] >= 1
    assert tally.exactly_once, tally.problems
    assert not tally.problems


# Soak: the default run makes the native path's background commit raise in its keyed
# pipelined chain (tests/spark/test_crash_keyed.py, harness.FAIL).
@pytest.mark.soak
@pytest.mark.parametrize("mode", ["native", "fast"])
def test_a_failed_background_commit_stops_the_query_and_the_restart_commits_it_losing_nothing(tmp_path, mode):
    """Pipelined: Spark recorded the batch before its commit failed, so it will not replay it.
    The failure must stop the query (not pass silently) and the batch's files and pending
    state must survive for the restarted query to commit."""
    case = Case(tmp_path, mode, "pipelined")
    make_source(case.source, files=5, rows_per_file=ROWS_PER_FILE)

    failed = case.run(fail_at="before-snapshot@2")  # the background commit of batch 1 raises

    assert failed.returncode == 1, failed.tail()
    log = failed.log.read_text()
    assert "injected failure at before-snapshot" in log
    assert "retried when the query restarts" in log
    assert_nothing_twice(case, 0)
    case.finish()
    tally = case.check()
    assert tally.exactly_once, tally.problems
    assert not tally.problems


KEYED = {"primary-key": "id,grp", "bucket": "2", "num-sorted-run.compaction-trigger": "1"}


# Soak: two or three driver starts, 50-60 s (one point) to 50-165 s (two) on 2 shared cores. The
# default suite kills the same coordinator code at these points for append tables (above), and
# every keyed compaction round in tests/spark/test_keyed_compaction.py decodes its pending state.
@pytest.mark.soak
@pytest.mark.parametrize("points", [
    ("after-aggregate@1",),   # rewritten, recorded as pending, no COMPACT snapshot yet
    ("mid-rewrite@1", "after-aggregate@1"),
], ids=["after-aggregate", "mid-rewrite+after-aggregate"])
def test_a_driver_killed_while_compacting_a_keyed_table_restarts_to_the_same_rows(tmp_path, points):
    """A primary-key stream (fast path) compacting its buckets after every micro-batch from the
    second on: killed mid-rewrite and between the rewrite and its COMPACT snapshot, restarted,
    the table equals the source key for key with no data file outside the snapshots."""
    case = Case(tmp_path, "fast", "sync", options=KEYED)
    make_source(case.source, files=2 + 2 * len(points), rows_per_file=ROWS_PER_FILE)
    for point in points:
        case.crash(point)
        assert_nothing_twice(case, 0)
    case.finish()
    tally = case.check()
    kinds = Counter(json.loads(p.read_text())["commitKind"] for p in Path(case.table, "snapshot").glob("snapshot-*"))
    print(f"\nkeyed compaction: {tally.summary()}; snapshot kinds {dict(kinds)}")
    assert kinds["COMPACT"] >= 2
    assert tally.exactly_once, tally.problems
    assert not tally.problems
