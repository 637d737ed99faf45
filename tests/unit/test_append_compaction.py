"""Automatic compaction of append tables (no Spark): Paimon's rule for picking small files, repeated
batch jobs and micro-batches that stay near the ideal file count, and compactions that lose a
conflict with another writer (retry on the new state, or give up), read back with pypaimon."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink.errors import ConfigurationError
from lakesink.options import WriteOptions
from lakesink.paimon.compaction.target import PaimonCompactionTarget, live_files
from lakesink.paimon.compaction.rewrite import rewrite_on_driver
from lakesink.paimon.compaction.append_aggregator import (SmallFileAggregator, pick_adjacent, pick_small_files,
                                                          target_file_size)
from lakesink.paimon.write.batch import BatchWrite, describe_files
from lakesink.paimon.table.tables import open_table
from lakesink.paimon.commit.target import PaimonTarget
from lakesink.protocol.coordinator import Coordinator, FilesWritten
from tests.helpers import leftover_files, read_table, snapshots

# -- the picking rule -------------------------------------------------------------------


@dataclass(frozen=True)
class F:
    name: str
    file_size: int


def names(bins):
    return [[f.name for f in b] for b in bins]


def test_small_files_are_picked_smallest_first_one_bin_per_target():
    files = [F("a", 40), F("b", 10), F("c", 30), F("d", 20), F("e", 30)]
    # target 100: all are candidates (under 70); the bin reaches 100 only with the fifth file
    assert names(pick_small_files(files, 100, min_file_num=5)) == [["b", "d", "c", "e", "a"]]
    # target 55: "a" is no candidate (over 38.5); b+d+c reach 55; "e" alone waits
    assert names(pick_small_files(files, 55, min_file_num=5)) == [["b", "d", "c"]]


def test_files_of_70_percent_of_the_target_or_more_are_never_picked():
    files = [F("big", 70), F("huge", 500), F("s1", 5), F("s2", 5)]
    assert pick_small_files(files, 100, min_file_num=2) == [[F("s1", 5), F("s2", 5)]]


def test_a_rest_below_the_target_is_merged_only_from_min_file_num_files():
    four = [F(f"f{i}", 10) for i in range(4)]
    assert pick_small_files(four, 1000, min_file_num=5) == []
    assert names(pick_small_files(four + [F("f4", 10)], 1000, min_file_num=5)) == [["f0", "f1", "f2", "f3", "f4"]]


@dataclass(frozen=True)
class _Meta:
    first_row_id: int | None
    row_count: int


@dataclass(frozen=True)
class R:
    """A file of a row-tracking table: its row ids are first_row_id .. first_row_id + rows - 1."""
    name: str
    file_size: int
    first_row_id: int | None
    rows: int = 10

    @property
    def meta(self):
        return _Meta(self.first_row_id, self.rows)


def test_row_tracking_bins_are_runs_of_files_whose_row_ids_follow_each_other_in_id_order():
    files = [R("c", 10, 20), R("a", 30, 0), R("b", 10, 10), R("far", 10, 100), R("far2", 10, 110),
             R("java-compacted", 10, None), R("d", 10, 30)]
    # a..d are one run (ids 0..39), taken in id order whatever their sizes; "far" starts another
    assert names(pick_adjacent(files, 1000, min_file_num=2)) == [["a", "b", "c", "d"], ["far", "far2"]]
    # a gap of ids (a file rewritten by another partition's rows, a deleted run) cuts the run
    assert names(pick_adjacent([R("a", 10, 0), R("c", 10, 20)], 1000, final=True)) == []
    # a run is binned per target; a file too large to carry cuts it as well
    run = [R(f"f{i}", 30, i * 10) for i in range(6)]
    assert names(pick_adjacent(run, 100, min_file_num=5)) == [["f0", "f1", "f2", "f3"]]
    assert names(pick_adjacent(run[:2] + [R("big", 80, 20)] + [R(f"g{i}", 5, 30 + i * 10) for i in range(2)],
                               100, final=True)) == [["f0", "f1"], ["g0", "g1"]]


def test_a_rewritten_file_whose_row_ids_are_not_one_run_in_order_is_refused():
    from pypaimon.manifest.schema.data_file_meta import DataFileMeta
    from lakesink.paimon.files import lineage

    meta = DataFileMeta.create(file_name="f", file_size=1, row_count=3, min_key=None, max_key=None, key_stats=None,
                               value_stats=None, min_sequence_number=0, max_sequence_number=0, schema_id=0,
                               level=0, extra_files=[], file_source=0)
    seqs = pa.array([4, None, 6], pa.int64())
    described = lineage.describe(meta, pa.array([7, 8, 9], pa.int64()), seqs, compaction=False)
    # the updated row (null sequence) makes max 0: the commit gives the file its snapshot's number
    assert (described.first_row_id, described.min_sequence_number, described.max_sequence_number) == (7, 4, 0)
    assert described.write_cols is None
    for ids in ([7, 9, 8], [7, 9, 10], [7, None, 9]):
        with pytest.raises(ValueError):
            lineage.describe(meta, pa.array(ids, pa.int64()), seqs, compaction=False)


def test_max_file_num_bounds_the_files_one_rewrite_reads():
    files = [F(f"f{i}", 1) for i in range(7)]
    assert names(pick_small_files(files, 1000, min_file_num=5, max_file_num=3)) == [
        ["f0", "f1", "f2"], ["f3", "f4", "f5"]]  # f6 alone waits (fewer than min_file_num)
    with pytest.raises(ConfigurationError, match="at least 2"):
        pick_small_files(files, 1000, max_file_num=1)


def test_the_bin_size_is_the_estimated_rewritten_size():
    files = [F(f"f{i}", 30) for i in range(6)]
    # each file shrinks to 10 when rewritten: 6 files make 60, below the target 100
    assert pick_small_files(files, 100, min_file_num=7, size_of=lambda f: 10) == []
    assert names(pick_small_files(files, 100, min_file_num=7)) == [["f0", "f1", "f2", "f3"]]


# -- batch jobs and micro-batches against a real table ------------------------------------

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("note", pa.string())])
DAYS = (dt.date(2026, 1, 1), dt.date(2026, 1, 2))


def job_rows(job: int, task: int, day: int, rows: int = 300) -> pa.Table:
    first = ((job * 4 + task) * len(DAYS) + day) * rows
    ids = list(range(first, first + rows))
    return pa.table({"id": pa.array(ids, pa.int64()), "day": pa.array([DAYS[day]] * rows, pa.date32()),
                     "note": [f"order-{i}-" + "x" * (i % 13) for i in ids]}, schema=SCHEMA)


def batch_job(path: str, job: int, options: dict, mode: str = "append", days=range(len(DAYS))):
    """One job as `lakesink.write` runs it, its 4 tasks' files written by pyarrow."""
    opts = WriteOptions.parse({"partition": "day", "maintenance.enabled": "false", **options})
    write = BatchWrite.plan(path, SCHEMA, opts, mode, "test", "dynamic")
    write.target.file_io.check_or_mkdirs(write.staging_dir)
    paths, written = [], []
    for task in range(4):
        for day in days:
            rows = job_rows(job, task, day)
            paths.append(f"{write.staging_dir}/part-{task}-{day}.parquet")
            pq.write_table(rows, paths[-1])
            written.append(rows)
    report = write.commit(write.describe_staged(paths))
    assert "aggregation_error" not in report.extra, report.extra
    return report, pa.concat_tables(written)


def files_vs_ideal(path: str) -> tuple[int, int]:
    table = open_table(path)
    per_partition = Counter()
    files = live_files(table)
    for f in files:
        per_partition[f.partition] += f.file_size
    return len(files), sum(math.ceil(b / target_file_size(table)) for b in per_partition.values())


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(n).to_pylist() for n in SCHEMA.names)))


def test_rewrites_near_the_target_teach_the_bytes_per_row_and_merges_of_tiny_files_do_not(tmp_path):
    from types import SimpleNamespace

    path = str(tmp_path / "t")
    batch_job(path, 0, {"write-only": "true"})
    aggregator = SmallFileAggregator(open_table(path), str(tmp_path / "staging"), target_size=1000)

    def output(size, rows):
        return SimpleNamespace(file_size=size, row_count=rows, meta=SimpleNamespace(schema_id=0))
    aggregator._learn([], [output(2000, 100)])
    assert aggregator.bytes_per_row == pytest.approx(20.0)  # the first rewrite sets it
    aggregator._learn([], [output(3000, 100)])
    assert aggregator.bytes_per_row == pytest.approx(0.7 * 20 + 0.3 * 30)  # then a moving average
    aggregator._learn([], [output(100, 1)])  # under 70% of the target: still a small file
    assert aggregator.bytes_per_row == pytest.approx(23.0)
    assert aggregator.estimated_size(output(5000, 10)) == pytest.approx(230.0)
    restored = SmallFileAggregator(open_table(path), str(tmp_path / "staging"), target_size=1000)
    restored.restore_state(aggregator.state())
    assert restored.bytes_per_row == pytest.approx(23.0)


def test_repeated_small_batch_jobs_keep_live_files_within_1_5_times_ideal(tmp_path):
    path = str(tmp_path / "wh" / "db.db" / "t")
    written = []
    for job in range(30):
        report, rows = batch_job(path, job, {"aggregator.enabled": "true", "target-file-size": "48kb"})
        written.append(rows)
    live, ideal = files_vs_ideal(path)
    assert ideal >= 8, ideal  # enough bytes for the bound to mean something
    assert live <= 1.5 * ideal, (live, ideal)
    assert rows_of(read_table(path)) == rows_of(pa.concat_tables(written))
    assert leftover_files(path) == set()
    assert Counter(s.commit_kind for s in snapshots(path))["COMPACT"] >= 5


def test_micro_batches_keep_live_files_within_1_5_times_ideal(tmp_path):
    from lakesink.paimon.write.stream import StreamSink
    path = str(tmp_path / "wh" / "db.db" / "t")
    options = WriteOptions.parse({"partition": "day", "target-file-size": "48kb", "maintenance.enabled": "false",
                                  "aggregator.enabled": "true"})
    sink = StreamSink(path, str(tmp_path / "chk"), SCHEMA, options, "test")
    sink.bind()
    written = []
    for batch in range(30):
        staging = sink.staging_dir(batch)
        sink.target.file_io.check_or_mkdirs(staging)
        paths = []
        for task in range(4):
            for day in range(len(DAYS)):
                written.append(job_rows(batch, task, day))
                paths.append(f"{staging}/part-{task}-{day}.parquet")
                pq.write_table(written[-1], paths[-1])
        sink.commit_batch(batch, describe_files(paths, sink.layout, sink.target.file_io))
    live, ideal = files_vs_ideal(path)
    assert live <= 1.5 * ideal, (live, ideal)
    assert rows_of(read_table(path)) == rows_of(pa.concat_tables(written))
    assert leftover_files(path) == set()


def test_write_only_turns_the_automatic_compaction_off(tmp_path):
    path = str(tmp_path / "wh" / "db.db" / "t")
    for job in range(3):
        batch_job(path, job, {"aggregator.enabled": "true", "target-file-size": "48kb", "write-only": "true"})
    assert {s.commit_kind for s in snapshots(path)} == {"APPEND"}
    assert len(live_files(open_table(path))) == 3 * 8


# -- conflicts with other writers ----------------------------------------------------------

class Meanwhile:
    """The rewrite of a compaction round, with another writer's commit landing first (once): the
    round's plan is made, its inputs then removed by a real commit of someone else."""

    def __init__(self, other):
        self.other = other
        self.calls = 0

    def __call__(self, tasks):
        self.calls += 1
        if self.calls == 1:
            self.other()
        return rewrite_on_driver(tasks)


def round_after(path: str, job_files, meanwhile: Meanwhile, in_place: bool = False):
    """One aggregation round of a writer whose last job wrote `job_files`, as after its commit
    (`in_place`: its rewrites write at their table paths, as on object stores)."""
    target = PaimonTarget(path)
    table = target.table(refresh=True)
    compaction = PaimonCompactionTarget(target)
    aggregator = SmallFileAggregator(table, compaction.staging_dir("writer.compact"), executor_bytes=0,
                                     distributed=meanwhile, in_place=in_place)
    coordinator = Coordinator(aggregator, compaction, "writer")
    coordinator.send(FilesWritten(1, job_files))
    return coordinator.commit_finished(1, landed=True)


def small_table(path: str, jobs: int = 3) -> pa.Table:
    written = [batch_job(path, job, {"target-file-size": "1mb"})[1] for job in range(jobs)]
    return pa.concat_tables(written)


IN_PLACE = pytest.mark.parametrize("in_place", [False, True], ids=["staged", "in-place"])


@IN_PLACE
def test_a_round_whose_inputs_another_compaction_took_plans_again_on_the_new_state(tmp_path, in_place):
    path = str(tmp_path / "wh" / "db.db" / "t")
    written = small_table(path)
    mine = live_files(open_table(path))
    other = Meanwhile(lambda: lakesink.compact(None, path, partitions=[{"day": "2026-01-01"}], progress=False))
    report = round_after(path, mine, other, in_place)

    assert report.extra["conflicts"] == 1 and report.conflict is None and report.snapshot_id
    kinds = [s.commit_kind for s in snapshots(path)]
    assert kinds[-2:] == ["COMPACT", "COMPACT"]  # theirs, then ours on the new state
    per_day = Counter(f.partition for f in live_files(open_table(path)))
    assert sorted(per_day.values()) == [1, 1]
    assert rows_of(read_table(path)) == rows_of(written)
    assert leftover_files(path) == set()


@IN_PLACE
def test_a_round_whose_inputs_an_overwrite_removed_gives_up_with_every_row_exact(tmp_path, in_place):
    path = str(tmp_path / "wh" / "db.db" / "t")
    small_table(path)
    mine = live_files(open_table(path))
    replaced = {}

    def overwrite_everything():
        _report, replaced["rows"] = batch_job(path, 99, {"target-file-size": "1mb"}, mode="overwrite")

    report = round_after(path, mine, Meanwhile(overwrite_everything), in_place)

    # Every input is gone: the first plan conflicts, the second finds none of the carried files live.
    assert report.extra["conflicts"] == 1 and report.conflict and report.snapshot_id is None
    assert snapshots(path)[-1].commit_kind == "OVERWRITE"
    assert rows_of(read_table(path)) == rows_of(replaced["rows"])
    assert leftover_files(path) == set()


@pytest.mark.parametrize("choice", ["true", "false"])
def test_lakesink_compact_takes_write_in_place_from_its_options(tmp_path, monkeypatch, choice):
    """`auto` decides by the store (staged on the local disk); the option forces either way."""
    from lakesink.paimon.compaction import target as compaction_target

    path = str(tmp_path / "t")
    expected = pa.concat_tables([batch_job(path, job, {})[1] for job in range(2)])
    moved = []
    place = compaction_target.place
    monkeypatch.setattr(compaction_target, "place", lambda table, files: (moved.extend(f for f in files if f.staged_path),
                                                                   place(table, files))[1])
    report = lakesink.compact(None, path, progress=False, options={"write.in-place": choice})
    assert report.files_added > 0 and rows_of(read_table(path)) == rows_of(expected)
    assert len(moved) == (0 if choice == "true" else report.files_added)  # in place: nothing to move
    assert leftover_files(path) == set()
    with pytest.raises(ConfigurationError, match="write.in-place"):
        lakesink.compact(None, path, progress=False, options={"write.in-place": "sometimes"})
