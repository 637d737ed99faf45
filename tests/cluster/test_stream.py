"""Streaming on the cluster, both write paths, with the driver SIGKILLed and restarted.

The crash harness (tests/crash) runs the child driver (`tests.cluster.stream_driver`):
one driver on the cluster with a query on each path, killed with its process
group at a named point of the commit protocol, then restarted on the same
checkpoints until both queries caught up. Each table must then hold every
source row exactly once, row for row, with no batch committed twice and no data
file outside its snapshots, read with pypaimon.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.crash.harness import Case, RunResult, Tally, _sorted_rows, make_source, source_rows
from tests.crash.driver import SOURCE_SCHEMA
from tests.staged import read_back, snapshot_list

from .cluster import kill_sessions
from .stream_driver import SESSION_MARK
from .tables import leftover_files, listing

pytestmark = [pytest.mark.cluster, pytest.mark.crash, pytest.mark.full]  # the cluster tier: ./dev full

ROWS_PER_FILE = 40
# What the driver takes from the cluster's environment (Spark's set-up, no credentials).
CLUSTER_ENV = ("SPARK_CONF_DIR", "SPARK_HOME", "SPARK_LOCAL_IP", "JAVA_HOME", "PYSPARK_PYTHON",
               "PYSPARK_DRIVER_PYTHON", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
               "AWS_EC2_METADATA_DISABLED")


class ClusterStreamCase(Case):
    """A harness case whose driver runs on the cluster with two queries: the fast path into
    `self.table` (shared directory) and the native path into `self.native_table` (S3)."""

    def __init__(self, workdir: Path, cluster, s3, native_table: str, s3_options: dict, commit: str = "sync"):
        super().__init__(workdir, "fast", commit)
        self.cluster, self.s3 = cluster, s3
        self.native_table, self.s3_options = native_table, s3_options
        self.native_checkpoint = str(self.workdir / "checkpoint-native")

    def command(self, fail_first_attempt: float = 0.0, fail_always_partition: int | None = None) -> list[str]:
        env = self.cluster.driver_env()
        cmd = [sys.executable, "-m", "tests.cluster.stream_driver", "--master", self.cluster.master_url,
               "--source", str(self.source), "--fast-table", self.table, "--fast-checkpoint", self.checkpoint,
               "--native-table", self.native_table, "--native-checkpoint", self.native_checkpoint,
               "--commit", self.commit]
        for key in CLUSTER_ENV:
            cmd += ["--env", f"{key}={env[key]}"]
        for key, value in self.s3_options.items():
            cmd += ["--option", f"{key}={value}"]
        return cmd

    def run(self, *args, **kwargs) -> RunResult:
        result = super().run(*args, **kwargs)
        # The harness killed the driver's process group; Spark's Python daemons have groups of
        # their own, in the driver's session.
        found = re.search(rf"{SESSION_MARK}(\d+)", result.log.read_text(errors="replace"))
        if found:
            kill_sessions({int(found.group(1))})
        # What the run left in the bucket, beside its log (the table's objects, with sizes).
        result.log.with_suffix(".objects").write_text("".join(
            f"{o['Key']} {o['Size']}\n" for o in listing(self.s3, self.native_table)))
        return result

    def native_commit_user(self) -> str | None:
        sink = Path(self.native_checkpoint) / "lakesink" / "sink.json"
        return json.loads(sink.read_text())["commit_user"] if sink.exists() else None

    def check_native(self, s3) -> Tally:
        """`Case.check` for the table on S3: every source row once, row for row; no batch twice;
        no data file in the bucket outside the snapshots."""
        tally = Tally()
        expected = source_rows(self.source)
        actual = read_back(self.native_table, self.s3_options)
        ids, wanted = Counter(actual.column("id").to_pylist()), Counter(expected.column("id").to_pylist())
        tally.rows_checked = sum(wanted.values())
        tally.duplicates = sum(max(0, n - wanted[i]) for i, n in ids.items() if i in wanted)
        tally.lost = sum(max(0, n - ids[i]) for i, n in wanted.items())
        tally.foreign = sum(n for i, n in ids.items() if i not in wanted)
        if _sorted_rows(actual.select(SOURCE_SCHEMA.names)) != _sorted_rows(expected):
            tally.problems.append("native table: rows differ from the source")
        user = self.native_commit_user()
        per_batch = Counter(s.commit_identifier for s in snapshot_list(self.native_table, self.s3_options)
                            if s.commit_user == user)
        tally.batches_committed_twice = sum(n - 1 for n in per_batch.values() if n > 1)
        leftovers = leftover_files(s3, self.native_table, self.s3_options)
        tally.leftover_files = len(leftovers)
        if leftovers:
            tally.problems.append(f"native table: leftover files {sorted(leftovers)[:5]}")
        return tally


def assert_nothing_twice(case: ClusterStreamCase) -> None:
    if Path(case.table, "snapshot").exists():
        ids = Counter(read_back(case.table).column("id").to_pylist())
        assert not [i for i, n in ids.items() if n > 1], f"fast table: rows twice after {case.runs[-1].log}"
    try:
        ids = Counter(read_back(case.native_table, case.s3_options).column("id").to_pylist())
    except Exception:  # noqa: BLE001 - no snapshot yet: nothing can be twice
        return
    assert not [i for i, n in ids.items() if n > 1], f"native table: rows twice after {case.runs[-1].log}"


def test_a_driver_killed_after_a_snapshot_restarts_and_both_paths_write_every_row_exactly_once(
        cluster, s3, s3_options, shared_dir):
    """Killed right after a snapshot was published and before Spark recorded the batch: the
    restarted queries replay that batch, which must not land twice."""
    case = ClusterStreamCase(shared_dir / "stream-after-snapshot", cluster, s3,
                             "s3://lakesink-cluster/wh/db.db/stream_after_snapshot", s3_options)
    make_source(case.source, files=3, rows_per_file=ROWS_PER_FILE)
    case.crash("after-snapshot@2")
    assert_nothing_twice(case)
    case.finish()
    fast = case.check()
    native = case.check_native(s3)
    print(f"\ncluster stream: fast {fast.summary()}; native {native.summary()}; runs: "
          + ", ".join(f"{r.seconds:.0f}s" for r in case.runs))
    assert fast.kills == 1 and fast.restarts == 1
    assert fast.exactly_once and not fast.problems, fast.problems
    assert native.exactly_once and not native.problems, native.problems
    assert fast.rows_checked == native.rows_checked == 3 * ROWS_PER_FILE


SOAK_CHAINS = {
    "sync": ["files-placed@2", "before-snapshot@3", "after-snapshot@4"],
    # Pipelined: the native path commits in a committer process on the driver's host, which
    # outlives the driver; the fast path on a driver thread.
    "pipelined": ["accepted@2", "after-snapshot@3"],
}


@pytest.mark.soak
@pytest.mark.parametrize("commit", list(SOAK_CHAINS))
def test_a_driver_killed_at_each_commit_point_on_the_cluster_writes_every_row_exactly_once(
        cluster, s3, s3_options, shared_dir, commit):
    points = SOAK_CHAINS[commit]
    case = ClusterStreamCase(shared_dir / f"stream-chain-{commit}", cluster, s3,
                             f"s3://lakesink-cluster/wh/db.db/stream_chain_{commit}", s3_options, commit)
    make_source(case.source, files=len(points) + 3, rows_per_file=ROWS_PER_FILE)
    for point in points:
        case.crash(point)
        assert_nothing_twice(case)
    case.finish()
    fast, native = case.check(), case.check_native(s3)
    print(f"\ncluster stream {commit}: fast {fast.summary()}; native {native.summary()}")
    assert fast.kills == len(points)
    assert fast.restarts == len(points), "a restart failed before the last one caught up: see the logs"
    assert fast.exactly_once and not fast.problems, fast.problems
    assert native.exactly_once and not native.problems, native.problems
