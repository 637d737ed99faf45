"""The fixed-bucket conflict check of a keyed checkpoint survives a driver crash, without Spark.

A keyed checkpoint's sequence numbers are planned on a snapshot; its commit treats another
writer's files in its buckets after that snapshot as a conflict. The snapshot is kept in the
pending document (`check_from`), so a checkpoint restored by a new process is checked the same
way. Files are written by pypaimon's own writer (prepared, not committed), as a keyed batch's
staged files would be; the crash is a fresh target and committer on the same pending state.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lakesink.errors import CommitConflictError, CommitFailedError
from lakesink.paimon.files.datafiles import StagedFile
from lakesink.paimon.table.tables import open_table
from lakesink.paimon.commit.target import PaimonTarget
from lakesink.protocol import Committer, PendingStore, StateStore
from tests.helpers import pypaimon_append, read_table, snapshots

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
USER = "lakesink-stream-test"


def new_table(warehouse) -> str:
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table("db.t", Schema.from_pyarrow_schema(SCHEMA, primary_keys=["id"],
                                                            options={"bucket": "2", "write-only": "true"}), False)
    return f"{warehouse}/db.db/t"


def rows(*pairs) -> pa.Table:
    return pa.table({"id": pa.array([p[0] for p in pairs], pa.int64()), "v": [p[1] for p in pairs]}, schema=SCHEMA)


def staged_batch(path: str, data: pa.Table) -> list[StagedFile]:
    """Key-value files written into the table's buckets but in no snapshot: a batch's committables."""
    table = open_table(path)
    write = table.new_batch_write_builder().new_write()
    try:
        write.write_arrow(data)
        messages = write.prepare_commit()
    finally:
        write.close()
    return [StagedFile(partition=tuple(m.partition), bucket=m.bucket, meta=f, staged_path=None)
            for m in messages for f in m.new_files]


def planned_batch(path: str, identifier: int, data: pa.Table, pending: PendingStore,
                  acknowledged: bool = True) -> None:
    """Plan on the latest snapshot and accept durably (a pipelined batch), then the driver dies."""
    target = PaimonTarget(path)
    latest = open_table(path).snapshot_manager().get_latest_snapshot()
    target.plan_check_from(identifier, latest.id)
    Committer(target, USER, pending).accept(identifier, staged_batch(path, data), acknowledged=acknowledged)


def restarted(path: str, pending: PendingStore) -> Committer:
    """A new driver: its target is planned on the latest snapshot as the stream's start plans it."""
    target = PaimonTarget(path)
    target.bucket_check_from = open_table(path).snapshot_manager().get_latest_snapshot().id
    return Committer(target, USER, pending)


@pytest.fixture()
def pending(tmp_path):
    return PendingStore(StateStore(str(tmp_path / "checkpoint" / "lakesink")))


def test_the_pending_document_keeps_the_snapshot_the_batch_was_planned_on(tmp_path, pending):
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows((1, "a"), (2, "b")))
    planned_batch(path, 7, rows((1, "ours")), pending)
    [document] = (tmp_path / "checkpoint" / "lakesink").glob("pending-*.json")
    assert json.loads(document.read_text())["check_from"] == 1
    assert pending.get(7).check_from == 1


def test_a_restored_batch_still_detects_another_writers_commit_into_its_buckets(tmp_path, pending):
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows(*[(i, "base") for i in range(6)]))
    planned_batch(path, 7, rows(*[(i, "ours") for i in range(6)]), pending)
    pypaimon_append(open_table(path), rows(*[(i, "other") for i in range(6)]))  # snapshot 2, same buckets

    with pytest.raises(CommitFailedError, match="retried when the query restarts") as caught:
        restarted(path, pending).restore()

    assert isinstance(caught.value.__cause__, CommitConflictError)
    assert "one writer per bucket" in str(caught.value.__cause__)
    assert [s.id for s in snapshots(path)] == [1, 2]
    assert pending.get(7) is not None, "an acknowledged batch stays pending"
    assert {r["id"]: r["v"] for r in read_table(path).to_pylist()} == {i: "other" for i in range(6)}


def test_an_unacknowledged_restored_batch_that_conflicts_is_discarded(tmp_path, pending):
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows((1, "base")))
    planned_batch(path, 3, rows((1, "ours"), (2, "ours")), pending, acknowledged=False)
    pypaimon_append(open_table(path), rows((1, "other"), (2, "other")))
    with pytest.raises(CommitConflictError):
        restarted(path, pending).restore()
    assert pending.get(3) is None
    assert [s.id for s in snapshots(path)] == [1, 2]


def test_a_restored_batch_commits_when_only_its_own_earlier_batches_landed_meanwhile(tmp_path, pending):
    """Pipelined: batches 7 and 8 were both planned on snapshot 1 (8 above 7's sequence numbers);
    7 lands first. 8's commit must not take 7 for another writer."""
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows(*[(i, "base") for i in range(6)]))
    planned_batch(path, 7, rows(*[(i, "seven") for i in range(6)]), pending)
    planned_batch(path, 8, rows(*[(i, "eight") for i in range(6)]), pending)
    assert [p.check_from for p in pending.all()] == [1, 1]

    reports = restarted(path, pending).restore()

    assert [r.identifier for r in reports] == [7, 8] and all(r.committed for r in reports)
    assert [(s.commit_user, s.commit_identifier) for s in snapshots(path)][1:] == [(USER, 7), (USER, 8)]


def test_another_writer_in_other_buckets_after_the_plan_is_no_conflict(tmp_path, pending):
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows(*[(i, "base") for i in range(6)]))
    table = open_table(path)
    bucket_0 = [i for i in range(40) if _bucket_of(table, i) == 0]
    bucket_1 = [i for i in range(40) if _bucket_of(table, i) == 1]
    planned_batch(path, 7, rows(*[(i, "ours") for i in bucket_0]), pending)
    pypaimon_append(open_table(path), rows(*[(i, "other") for i in bucket_1]))

    [report] = restarted(path, pending).restore()

    assert report.committed
    got = {r["id"]: r["v"] for r in read_table(path).to_pylist()}
    assert all(got[i] == "ours" for i in bucket_0) and all(got[i] == "other" for i in bucket_1)


def _bucket_of(table, key: int) -> int:
    from pypaimon.write.row_key_extractor import FixedBucketRowKeyExtractor
    _, buckets = FixedBucketRowKeyExtractor(table.table_schema).extract_partition_bucket_batch(
        rows((key, "x")).to_batches()[0])
    return buckets[0]


def test_a_pending_document_without_check_from_still_restores(tmp_path, pending):
    """Documents written before the field: read as before, committed without the check."""
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows((1, "base")))
    planned_batch(path, 4, rows((1, "ours")), pending)
    [document] = (tmp_path / "checkpoint" / "lakesink").glob("pending-*.json")
    data = json.loads(document.read_text())
    del data["check_from"]
    document.write_text(json.dumps(data))
    assert pending.get(4).check_from is None
    pypaimon_append(open_table(path), rows((1, "other")))

    [report] = restarted(path, pending).restore()

    assert report.committed and report.identifier == 4


def test_a_restored_append_checkpoint_needs_no_bucket_check_and_warns_of_none(tmp_path, caplog):
    """Unaware-bucket tables have no fixed-bucket check, so their pending state records no base:
    restoring it is no missing check (the warning is for fixed-bucket state written without one)."""
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    catalog = CatalogFactory.create({"warehouse": str(tmp_path)})
    catalog.create_database("db", True)
    catalog.create_table("db.a", Schema.from_pyarrow_schema(SCHEMA, options={"bucket": "-1"}), False)
    keyed = new_table(tmp_path)
    with caplog.at_level("WARNING", logger="lakesink"):
        PaimonTarget(f"{tmp_path}/db.db/a").restore_check_from(3, None)
        assert "without the fixed-bucket conflict check" not in caplog.text
        PaimonTarget(keyed).restore_check_from(3, None)
    assert "without the fixed-bucket conflict check" in caplog.text
