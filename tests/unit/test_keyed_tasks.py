"""The keyed writer of format("paimon")'s tasks (spark.keyed_tasks) without Spark: several "tasks"
(partition ids), each flushing its write buffer several times, write one bucket in one commit;
the table read back with pypaimon must hold, per key, the version of the latest flush of the
highest-numbered task that has one, and each file must be a sorted run of its own."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from lakesink.options import WriteOptions
from lakesink.paimon.keyed.layout import KEY_PREFIX, SEQUENCE
from lakesink.paimon.write.keyed_plan import prepare_keyed_target
from lakesink.spark.keyed_tasks import SEQUENCE_SHIFT, KeyedPlan, KeyedTaskSpec, KeyedTaskWriter
from tests.helpers import read_table

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("op", pa.string())])


def _plan(path, options):
    target, layout, spec, next_sequence = prepare_keyed_target(path, SCHEMA, WriteOptions.parse(options))
    return target, layout, spec, KeyedPlan(next_sequence, target.bucket_check_from)


def _task(staging, layout, spec, plan, pid, batches, buffer_bytes=1):
    """One task's files; `buffer_bytes=1`: every batch is a flush of its own."""
    writer = KeyedTaskWriter(KeyedTaskSpec(str(staging), layout, spec, plan, buffer_bytes=buffer_bytes), pid,
                             f"task{pid}")
    for rows in batches:
        writer.write(pa.table(list(zip(*rows)), schema=SCHEMA))
    return writer.finish()


def _commit(target, identifier, files):
    target.commit("unit-test-user", identifier, files)


def test_later_flushes_and_higher_partitions_win_and_each_flush_is_a_sorted_run(tmp_path):
    path = str(tmp_path / "db.db" / "t")
    target, layout, spec, plan = _plan(path, {"primary-key": "id", "bucket": "1"})
    files = (_task(tmp_path / "s", layout, spec, plan, 0, [[(4, "t0-f0", "+I"), (2, "t0-f0", "+I"), (1, "t0-f0", "+I")],
                                                           [(1, "t0-f1", "+I"), (4, "t0-f1", "+I"), (1, "t0-f1-last", "+I")]])
             + _task(tmp_path / "s", layout, spec, plan, 1, [[(2, "t1-f0", "+I"), (3, "t1-f0", "+I"), (4, "t1-f0", "+I")]]))
    assert len(files) == 3
    for f in files:  # a sorted run: each key once, ascending; one sequence number per file
        data = pq.read_table(f.staged_path)
        keys = data.column(KEY_PREFIX + "id").to_pylist()
        assert keys == sorted(set(keys))
        assert set(data.column(SEQUENCE).to_pylist()) == {f.meta.min_sequence_number} == {f.meta.max_sequence_number}
        assert f.meta.level == 0 and f.bucket == 0 and (f.meta.min_key.values[0], f.meta.max_key.values[0]) == \
            (keys[0], keys[-1])
    sequences = sorted(f.meta.min_sequence_number for f in files)
    assert sequences == [0, 1, 1 << SEQUENCE_SHIFT]  # task 0: flushes 0 and 1; task 1: flush 0
    names = sorted(f.meta.file_name for f in files)  # name order is write order (partition, flush)
    assert [f.meta.min_sequence_number for f in sorted(files, key=lambda f: f.meta.file_name)] == sequences
    assert all(n.startswith("data-") and n.endswith("-0.parquet") for n in names)
    _commit(target, 1, files)
    got = {r["id"]: r["name"] for r in read_table(path).to_pylist()}
    # Key 1: the last row of task 0's last flush; key 4: task 1 beats task 0's later flush.
    assert got == {1: "t0-f1-last", 2: "t1-f0", 3: "t1-f0", 4: "t1-f0"}

    # The next write continues above: its task 0 beats the first write's task 1.
    target, layout, spec, plan = _plan(path, {})
    assert plan.base((), 0) == (1 << SEQUENCE_SHIFT) + 1
    _commit(target, 2, _task(tmp_path / "s2", layout, spec, plan, 0, [[(4, "w2-t0", "+I")]]))
    assert {r["id"]: r["name"] for r in read_table(path).to_pylist()}[4] == "w2-t0"


def test_changelog_files_hold_every_input_row_in_write_order(tmp_path):
    """changelog-producer=input: per (partition, bucket) and flush a changelog file of the input
    rows, sorted by key, a key's changes in input order; the data file holds the merged row."""
    path = str(tmp_path / "db.db" / "t")
    target, layout, spec, plan = _plan(path, {"primary-key": "id", "bucket": "1", "rowkind.field": "op",
                                              "changelog-producer": "input"})
    rows = [(2, "a", "+I"), (1, "a", "+I"), (2, "a", "-U"), (2, "b", "+U"), (1, "a", "-D")]
    files = _task(tmp_path / "s", layout, spec, plan, 3, [rows], buffer_bytes=1 << 20)
    data = [f for f in files if not f.changelog]
    changes = [f for f in files if f.changelog]
    assert len(data) == 1 and len(changes) == 1
    assert changes[0].meta.file_name.startswith("changelog-00000003-000000-")
    stored = pq.read_table(changes[0].staged_path)
    assert list(zip(stored.column("id").to_pylist(), stored.column("name").to_pylist(),
                    stored.column("op").to_pylist())) == [(1, "a", "+I"), (1, "a", "-D"), (2, "a", "+I"),
                                                          (2, "a", "-U"), (2, "b", "+U")]
    assert changes[0].meta.delete_row_count == 2 and data[0].meta.delete_row_count == 1  # 1's -D cancels
    _commit(target, 1, files)
    assert {r["id"]: r["name"] for r in read_table(path).to_pylist()} == {2: "b"}


def test_a_micro_batch_planned_before_the_previous_batch_landed_is_refused(tmp_path):
    """Stream writers plan each micro-batch when Spark pickles them into its tasks, after the
    previous batch's commit; a plan older than that (a writer reused across batches) would order
    the batch under its predecessor, so its commit fails instead (and Spark aborts it)."""
    import pytest
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from lakesink.errors import CommitFailedError
    from lakesink.spark.datasource import PaimonCommitMessage, PaimonStreamWriter
    from tests.helpers import snapshots

    path, chk = str(tmp_path / "db.db" / "t"), str(tmp_path / "chk")
    schema = StructType([StructField("id", LongType()), StructField("name", StringType()),
                         StructField("op", StringType())])
    options = {"checkpointLocation": chk, "primary-key": "id", "bucket": "2", "commit.user": "u"}

    def planned():
        writer = PaimonStreamWriter(path, options, schema, False)
        writer.__getstate__()  # what Spark's pickling into the batch's tasks does
        return writer.keyed_spec.plan

    def commit(plan, batch, rows):
        writer = PaimonStreamWriter(path, options, schema, False)  # commit: a writer built afresh
        staging = writer.sink.staging_dir(batch)
        files = _task(staging, writer.sink.layout, writer.sink.keyed, plan, 0, [rows])
        writer.commit([PaimonCommitMessage(files, plan)], batch)

    first = planned()
    assert first.accounted is None and first.check_from == 0
    commit(first, 0, [(1, "b0", "+I")])
    second = planned()
    assert second.accounted == 0 and second.base((), 0) + second.base((), 1) > 0
    with pytest.raises(CommitFailedError, match="planned when batch None was the last one committed"):
        commit(first, 1, [(1, "stale", "+I")])  # batch 1 on batch 0's plan
    commit(second, 1, [(1, "b1", "+I")])
    assert {r["id"]: r["name"] for r in read_table(path).to_pylist()} == {1: "b1"}
    assert [s.commit_identifier for s in snapshots(path)] == [0, 1]
