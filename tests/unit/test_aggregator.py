"""The committable aggregator and its coordinator: binning, carry-over, held events, restarts,
COMPACT snapshots read back with pypaimon, and SIGKILLs at every step (no Spark here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakesink.errors import CommitConflictError, ConfigurationError
from lakesink.protocol.aggregator import Aggregator, pack_bins, run_aggregator
from lakesink.protocol.coordinator import CompactionTarget, Coordinator, FilesWritten, saved_progress
from lakesink.protocol.state import StateStore
from lakesink.protocol.target import CommitReport
from tests.helpers import leftover_files, read_table, snapshots

REPO = Path(__file__).resolve().parents[2]


# -- binning ---------------------------------------------------------------------------

def test_bins_close_when_they_reach_the_target_and_the_rest_waits():
    bins, rest = pack_bins([4, 4, 4, 4, 4, 1], float, target=10)
    assert bins == [[4, 4, 4]]
    assert rest == [4, 4, 1]


def test_a_rest_with_enough_files_is_merged_below_the_target():
    bins, rest = pack_bins([1, 1, 1], float, target=10, flush_at_count=3)
    assert bins == [[1, 1, 1]] and rest == []
    bins, rest = pack_bins([1, 1], float, target=10, flush_at_count=3)
    assert bins == [] and rest == [1, 1]


def test_a_single_file_is_never_a_bin_of_its_own():
    bins, rest = pack_bins([12, 1], float, target=10, flush_at_count=2)
    assert bins == [] and rest == [1]


def test_a_non_positive_target_is_refused():
    with pytest.raises(ConfigurationError, match="target size must be positive"):
        pack_bins([1], float, target=0)


# -- a format-free aggregator and target -------------------------------------------------

@dataclass(frozen=True)
class File:
    name: str
    key: str
    size: int


class MergeAtTen(Aggregator[File]):
    """Merges the files of one key once they weigh 10 or more."""

    def __init__(self):
        self.made = 0

    def pre_aggregate_key(self, f):
        return f.key

    def aggregate(self, files):
        if sum(f.size for f in files) < 10:
            return files
        self.made += 1
        return [File(f"merged-{self.made}-{files[0].key}", files[0].key, sum(f.size for f in files))]

    def carries(self, f):
        return f.size < 10


class MemoryTable(CompactionTarget[File]):
    def __init__(self):
        self.live_names: set[str] = set()
        self.committed: dict[str, int] = {}
        self.appends: list[tuple[str, int, list[File]]] = []
        self.discarded: list[str] = []

    def append(self, user, identifier, files):
        self.live_names |= {f.name for f in files}
        self.committed[user] = identifier
        self.appends.append((user, identifier, list(files)))

    def identity(self, f):
        return f.name

    def encode(self, f):
        return {"name": f.name, "key": f.key, "size": f.size}

    def decode(self, d):
        return File(d["name"], d["key"], d["size"])

    def last_committed(self, user):
        return self.committed.get(user)

    def commit_compaction(self, user, identifier, replaced, new, properties=None):
        gone = [f.name for f in replaced if f.name not in self.live_names]
        if gone:
            raise CommitConflictError(f"{gone} are no longer live")
        self.live_names -= {f.name for f in replaced}
        self.live_names |= {f.name for f in new}
        self.committed[user] = identifier
        return CommitReport(user, identifier, snapshot_id=len(self.committed))

    def discard(self, files):
        self.discarded += [f.name for f in files]
        return len(files)

    def live(self, files):
        return [f for f in files if f.name in self.live_names]

    def committed_since(self, user, identifier):
        return [(i, fs) for u, i, fs in self.appends if u == user and (identifier is None or i > identifier)]

    def clean_staging(self, user, keep):
        return 0


def small(name, size=4, key="a"):
    return File(name, key, size)


def checkpoint(coordinator, table, n, files, user="u"):
    coordinator.send(FilesWritten(n, files))
    coordinator.commit_started(n)
    table.append(user, n, files)
    return coordinator.commit_finished(n, landed=True)


def test_the_aggregator_sorts_results_into_replaced_new_and_kept():
    files = [small("a1"), small("a2"), small("a3"), small("b1", key="b")]
    plan = run_aggregator(MergeAtTen(), files, lambda f: f.name)
    assert [f.name for f in plan.replaced] == ["a1", "a2", "a3"]
    assert [f.name for f in plan.new] == ["merged-1-a"]
    assert [f.name for f in plan.kept] == ["b1"]


def test_an_aggregator_that_drops_rows_is_refused():
    class Dropping(MergeAtTen):
        def aggregate(self, files):
            return files[:1]

    with pytest.raises(ConfigurationError, match="dropped committables"):
        run_aggregator(Dropping(), [small("a1"), small("a2")], lambda f: f.name)


def test_small_files_carry_over_checkpoints_until_a_bin_is_full():
    table = MemoryTable()
    coordinator = Coordinator(MergeAtTen(), table, "u")
    assert checkpoint(coordinator, table, 1, [small("f1")]).files_added == 0
    assert checkpoint(coordinator, table, 2, [small("f2")]).files_added == 0
    report = checkpoint(coordinator, table, 3, [small("f3")])
    assert report.files_removed == 3 and report.files_added == 1
    assert table.live_names == {"merged-1-a"}
    assert coordinator.bins == {}  # the merged file is big enough: not carried


def test_events_sent_during_a_commit_are_held_and_delivered_after_it():
    table = MemoryTable()
    coordinator = Coordinator(MergeAtTen(), table, "u")
    coordinator.commit_started(1)
    coordinator.send(FilesWritten(1, [small("f1")]))
    coordinator.send(FilesWritten(2, [small("f2")]))  # the next checkpoint, accepted meanwhile
    assert coordinator.bins == {} and len(coordinator.held) == 2
    table.append("u", 1, [small("f1")])
    coordinator.commit_finished(1, landed=True)
    assert list(coordinator.bins) == ["f1"]
    assert [e.checkpoint for e in coordinator.held] == [2]  # waits for its own commit


def test_a_failed_commit_drops_its_held_files():
    table = MemoryTable()
    coordinator = Coordinator(MergeAtTen(), table, "u")
    coordinator.commit_started(1)
    coordinator.send(FilesWritten(1, [small("f1")]))
    coordinator.commit_finished(1, landed=False)
    assert coordinator.held == [] and coordinator.bins == {}


def test_state_is_saved_per_checkpoint_and_a_restart_resumes_the_bins(tmp_path):
    table = MemoryTable()
    store = StateStore(str(tmp_path / "state"))
    first = Coordinator(MergeAtTen(), table, "u", store)
    checkpoint(first, table, 1, [small("f1")])
    checkpoint(first, table, 2, [small("f2")])
    assert store.names("aggregator-") == ["aggregator-00000000000000000001.json",
                                          "aggregator-00000000000000000002.json"]
    table.append("u", 3, [small("f3")])  # landed, but the driver died before saving state 3

    second = Coordinator(MergeAtTen(), table, "u", store)
    second.restore()
    assert list(second.bins) == ["f1", "f2", "f3"] and second.applied == 3
    report = checkpoint(second, table, 4, [small("f4")])
    assert report.files_removed == 4
    assert table.live_names == {"merged-1-a"}


def test_a_process_that_only_compacts_catches_up_with_checkpoints_others_committed(tmp_path):
    """A compaction service: commits land elsewhere; each round takes in what landed since the
    last one and compacts after the newest; a round already run is not run again, also not by
    the service's successor restored from the saved state."""
    table = MemoryTable()
    store = StateStore(str(tmp_path / "state"))
    service = Coordinator(MergeAtTen(), table, "u", store)
    service.restore()
    assert service.catch_up_round() is None  # nothing landed yet
    table.append("u", 1, [small("f1")])
    table.append("u", 2, [small("f2")])
    report = service.catch_up_round()
    assert report.checkpoint == 2 and report.files_added == 0 and list(service.bins) == ["f1", "f2"]
    assert service.catch_up_round() is None
    assert saved_progress(store) == (2, False)

    table.append("u", 3, [small("f3")])  # a batch lands while no service runs
    successor = Coordinator(MergeAtTen(), table, "u", store)
    successor.restore()  # catches up: the round after 3 has not run yet
    report = successor.catch_up_round()
    assert report.checkpoint == 3 and report.files_removed == 3 and table.live_names == {"merged-1-a"}
    assert successor.catch_up_round() is None
    assert saved_progress(store) == (3, False)
    again = Coordinator(MergeAtTen(), table, "u", store)
    again.restore()
    assert again.catch_up_round() is None


def test_a_pending_compaction_that_landed_before_a_crash_is_adopted_not_repeated(tmp_path):
    table = MemoryTable()
    store = StateStore(str(tmp_path / "state"))
    coordinator = Coordinator(MergeAtTen(), table, "u", store)
    checkpoint(coordinator, table, 1, [small("f1"), small("f2")])
    # Simulate a kill right after the compact snapshot: state still says "pending".
    coordinator.pending = {"identifier": 1, "replaced": [table.encode(small("f1")), table.encode(small("f2"))],
                           "new": [table.encode(File("m", "a", 8))]}
    coordinator._save(1)
    table.commit_compaction("u.compact", 1, [small("f1"), small("f2")], [File("m", "a", 8)])

    restarted = Coordinator(MergeAtTen(), table, "u", store)
    restarted.restore()
    assert restarted.pending is None
    assert list(restarted.bins) == ["m"]  # still small: carried
    assert table.committed["u.compact"] == 1 and table.discarded == []


def test_a_compaction_whose_inputs_someone_else_compacted_is_discarded_and_the_bins_pruned():
    table = MemoryTable()
    coordinator = Coordinator(MergeAtTen(), table, "u")
    checkpoint(coordinator, table, 1, [small("f1"), small("f2")])
    table.commit_compaction("other", 1, [small("f1"), small("f2")], [File("theirs", "a", 8)])
    report = checkpoint(coordinator, table, 2, [small("f3")])
    assert report.conflict and "no longer live" in report.conflict
    assert table.discarded == ["merged-1-a"]
    assert list(coordinator.bins) == ["f3"]
    assert table.live_names == {"theirs", "f3"}


def test_a_corrupt_state_document_names_the_file(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    store.write_json("aggregator-00000000000000000001.json", {"format": "something-else"})
    with pytest.raises(Exception, match="aggregator-00000000000000000001.json has an unknown format.*not a lakesink aggregator state"):
        Coordinator(MergeAtTen(), MemoryTable(), "u", store).restore()


# -- the Paimon aggregator, end to end without Spark ---------------------------------------

def run_child(tmp_path: Path, crash_at: str | None = None, batches: int = 12, extra=(), name="run"):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if crash_at:
        env["LAKESINK_CRASH_AT"] = crash_at
        env["LAKESINK_CRASH_COUNTER"] = str(tmp_path / f"counter-{name}")
    cmd = [sys.executable, "-m", "tests.unit.aggregator_child", "--table", str(tmp_path / "wh" / "db.db" / "t"),
           "--checkpoint", str(tmp_path / "chk"), "--batches", str(batches), *extra]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
                          start_new_session=True)


def expected_ids(batches: int, files: int = 4, rows: int = 40) -> list[int]:
    return sorted(b * 1000 + k * rows + j for b in range(batches) for k in range(files) for j in range(rows))


def assert_exactly_once(table: str, batches: int) -> None:
    ids = read_table(table).column("id").to_pylist()
    twice = [i for i, n in Counter(ids).items() if n > 1]
    assert not twice, f"rows twice: {twice[:10]}"
    assert sorted(ids) == expected_ids(batches)
    assert leftover_files(table) == set()


def test_small_streaming_files_are_replaced_by_compact_snapshots_read_back_with_pypaimon(tmp_path):
    result = run_child(tmp_path, batches=12)
    assert result.returncode == 0, result.stderr
    table = str(tmp_path / "wh" / "db.db" / "t")
    assert_exactly_once(table, 12)
    kinds = Counter(s.commit_kind for s in snapshots(table))
    assert kinds["APPEND"] == 12 and kinds["COMPACT"] >= 3
    from lakesink.paimon.compaction.target import live_files
    from lakesink.paimon.table.tables import open_table
    assert len(live_files(open_table(table))) <= 12  # 48 files written, 4 day partitions
    compact = next(s for s in snapshots(table) if s.commit_kind == "COMPACT")
    before = read_table(table, compact.id - 1).column("id").to_pylist()
    after = read_table(table, compact.id).column("id").to_pylist()
    assert sorted(before) == sorted(after)  # the swap neither adds nor loses a row


# Each kill is one step of a chain on the same table and checkpoint; the next run restarts it.
CRASH_CHAIN = ["events-held@3", "mid-rewrite@1", "after-aggregate@1", "after-compact@1", "after-snapshot@2",
               "files-placed@2"]


def compaction_staging(table: str) -> Path:
    return next(Path(table, "_lakesink", "staging").glob("*-compact"))


def intents_named(table: str) -> list[str]:
    import json
    return [p for f in (compaction_staging(table) / "intents").glob("*.json")
            for p in json.loads(f.read_text())["files"]]


# Two of the four in CI (each kind of commit, each place of the outputs); all four in the soak.
@pytest.mark.parametrize("mode,in_place", [
    pytest.param("sync", True, marks=pytest.mark.full), ("pipelined", False),
    pytest.param("sync", False, marks=pytest.mark.soak), pytest.param("pipelined", True, marks=pytest.mark.soak),
], ids=["sync-in-place", "pipelined-staged", "sync-staged", "pipelined-in-place"])
def test_a_driver_killed_at_each_aggregation_step_still_has_every_row_exactly_once(tmp_path, mode, in_place):
    """In place (`write.in-place=true`, what object stores do by default): the rewrites write at
    their table paths, named in intents first; whoever ends a compaction removes what it wrote
    that no snapshot took, after each kill too."""
    batches = 12
    table = str(tmp_path / "wh" / "db.db" / "t")
    extra = (["--pipelined"] if mode == "pipelined" else []) + (["--in-place"] if in_place else [])
    for i, point in enumerate(CRASH_CHAIN):
        # Where a point falls depends on timing (pipelined: whether an event arrives while
        # a commit runs), so a run may catch up before reaching it: give it more batches.
        for attempt in range(4):
            batches += 6
            result = run_child(tmp_path, point, batches, extra, name=f"{i}-{attempt}")
            if result.returncode != 0:
                break
        assert result.returncode == -signal.SIGKILL, f"{point} not reached: {result.stdout}{result.stderr}"
        if Path(table, "snapshot").exists():
            ids = read_table(table).column("id").to_pylist()
            assert len(ids) == len(set(ids)), f"rows twice after a kill at {point}"
        if in_place and point.startswith(("mid-rewrite", "after-aggregate")):
            # The dead rewrite's output lies at its table path, named in an intent; none is staged.
            named = intents_named(table)
            assert named and all(p.startswith(table + "/day=") for p in named), named
            assert not list(compaction_staging(table).glob("*.parquet"))
    result = run_child(tmp_path, None, batches, extra, name="final")
    assert result.returncode == 0, result.stderr
    assert_exactly_once(table, batches)
    assert any(s.commit_kind == "COMPACT" for s in snapshots(table))
    if in_place:  # every compaction ended: no intent left, nothing staged
        assert list(compaction_staging(table).rglob("*")) == []


def test_carried_files_another_job_compacted_make_the_sink_discard_its_rewrite_not_fail(tmp_path):
    import lakesink
    table = str(tmp_path / "wh" / "db.db" / "t")
    assert run_child(tmp_path, batches=4).returncode == 0
    report = lakesink.compact(None, table, progress=False)
    assert report.files_removed >= 2
    result = run_child(tmp_path, batches=10)
    assert result.returncode == 0, result.stderr
    assert_exactly_once(table, 10)


class GatedMerge(MergeAtTen):
    """MergeAtTen whose rewrites wait for `gate`: a round that is still running."""

    def __init__(self):
        super().__init__()
        import threading
        self.gate = threading.Event()
        self.entered = threading.Event()

    def aggregate(self, files):
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return super().aggregate(files)


def test_background_rounds_trail_the_commit_hold_events_and_run_one_at_a_time(tmp_path):
    table = MemoryTable()
    aggregator = GatedMerge()
    store = StateStore(str(tmp_path / "state"))
    coordinator = Coordinator(aggregator, table, "u", store, background=True)
    rounds = []
    for n in (1, 2):
        coordinator.send(FilesWritten(n, [small(f"f{n}")]))
        coordinator.commit_started(n)
        table.append("u", n, [small(f"f{n}")])
        aggregator.gate.set()
        assert coordinator.commit_finished(n, landed=True, on_round=rounds.append) is None
        assert coordinator.wait(10)
    aggregator.gate.clear()
    aggregator.entered.clear()
    coordinator.send(FilesWritten(3, [small("f3")]))
    coordinator.commit_started(3)
    table.append("u", 3, [small("f3")])
    assert coordinator.commit_finished(3, landed=True, on_round=rounds.append) is None  # returns at once
    assert aggregator.entered.wait(10) and not coordinator.wait(0.05)  # the round runs on
    coordinator.send(FilesWritten(4, [small("f4")]))  # the next checkpoint's files, meanwhile
    assert [e.checkpoint for e in coordinator.held] == [4], "an event reached the bins mid-round"
    assert table.live_names == {"f1", "f2", "f3"}
    aggregator.gate.set()
    assert coordinator.wait(10)
    assert table.live_names == {"merged-1-a"} and rounds[-1].files_removed == 3 and rounds[-1].files_added == 1
    assert store.names("aggregator-")[-1] == "aggregator-00000000000000000003.json"  # saved by the round
    # The next checkpoint's round starts only after that one: its held file joins the bins then.
    coordinator.commit_started(4)
    table.append("u", 4, [small("f4")])
    coordinator.commit_finished(4, landed=True, on_round=rounds.append)
    assert coordinator.wait(10) and list(coordinator.bins) == ["f4"] and coordinator.held == []


def test_a_background_round_starts_after_the_engine_says_the_checkpoint_is_over(tmp_path):
    """`round_gate`: the engine's wait for the checkpoint to end (Spark's commit log) runs on the
    round's thread, before the round; the commit returns at once, waiting for the round tells
    the gate to stop waiting, and a gate that fails still lets the round run."""
    import threading
    table = MemoryTable()
    coordinator = Coordinator(MergeAtTen(), table, "u", StateStore(str(tmp_path / "state")), background=True)
    over = threading.Event()
    gated = []

    def gate(checkpoint: int, opened: threading.Event) -> None:
        gated.append((checkpoint, table.live_names.copy(), opened))
        assert over.wait(10), "the test never ended the checkpoint"
        if checkpoint == 2:
            raise OSError("no commit log")

    coordinator.round_gate = gate
    rounds = []
    for n in (1, 2):
        over.clear()
        coordinator.send(FilesWritten(n, [small(f"f{n}")]))
        coordinator.commit_started(n)
        table.append("u", n, [small(f"f{n}")])
        assert coordinator.commit_finished(n, landed=True, on_round=rounds.append) is None  # at once
        assert not gated[-1][2].is_set()
        assert not coordinator.wait(0.1) and len(rounds) == n - 1  # held at the gate: no round yet
        assert gated[-1][2].is_set()  # someone waits for the round: the engine may stop waiting
        over.set()
        assert coordinator.wait(10) and len(rounds) == n
    assert [g[0] for g in gated] == [1, 2] and gated[1][1] == {"f1", "f2"}
    assert rounds[-1].error is None and list(coordinator.bins) == ["f1", "f2"]


def test_a_sync_coordinator_reports_its_round_from_commit_finished():
    table = MemoryTable()
    coordinator = Coordinator(MergeAtTen(), table, "u")
    seen = []
    coordinator.send(FilesWritten(1, [small("f1")]))
    coordinator.commit_started(1)
    table.append("u", 1, [small("f1")])
    assert coordinator.commit_finished(1, landed=True, on_round=seen.append) is not None
    assert seen == [] and coordinator.wait(0)
