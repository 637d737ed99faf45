"""Concurrent writers of one bucket of a primary-key table, without Spark: another writer's files
landing in the bucket after the snapshot a commit's sequence numbers were planned on are no
conflict when their keys do not meet the commit's there, and a `KeyRangeConflictError` naming the
bucket, the overlap and the other writer when they do (table unchanged).

Both writers' files come from pypaimon's own writer planned on the same snapshot, so they carry
the same sequence numbers, as two lakesink writers planned on one snapshot would."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakesink.errors import CommitConflictError, KeyRangeConflictError
from lakesink.paimon.commit.target import PaimonTarget
from lakesink.paimon.table.tables import open_table
from lakesink.protocol import Committer
from tests.helpers import leftover_files, pypaimon_append, read_table, snapshots
from tests.unit.test_bucket_check_restore import SCHEMA, rows, staged_batch

USER = "lakesink-ours"


def new_table(warehouse) -> str:
    """One bucket: every key meets in it."""
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table("db.t", Schema.from_pyarrow_schema(SCHEMA, primary_keys=["id"],
                                                            options={"bucket": "1", "write-only": "true"}), False)
    return f"{warehouse}/db.db/t"


def planned(path: str, data: pa.Table):
    """A keyed write planned on the latest snapshot: its target and its staged files."""
    target = PaimonTarget(path)
    target.bucket_check_from = open_table(path).snapshot_manager().get_latest_snapshot().id
    return target, staged_batch(path, data)


def state(path: str) -> dict:
    got = read_table(path).to_pylist()
    assert len({r["id"] for r in got}) == len(got), "a key was read twice"
    return {r["id"]: r["v"] for r in got}


def another_writer(path: str, *pairs) -> str:
    """pypaimon's own writer commits `pairs`; its commit user."""
    pypaimon_append(open_table(path), rows(*pairs))
    return snapshots(path)[-1].commit_user


BASE = {i: "base" for i in range(10)}


def files_of(path: str, snapshot_id: int) -> list:
    """The data files snapshot `snapshot_id` added."""
    table = open_table(path)
    before = {f.file_name for s in table.copy({"scan.snapshot-id": str(snapshot_id - 1)}).new_read_builder()
              .new_scan().plan().splits() for f in s.files} if snapshot_id > 1 else set()
    return [f for s in table.copy({"scan.snapshot-id": str(snapshot_id)}).new_read_builder().new_scan().plan()
            .splits() for f in s.files if f.file_name not in before]


def test_a_commit_goes_ahead_past_another_writers_keys_that_do_not_meet_its_own(tmp_path):
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows(*BASE.items()))
    target, ours = planned(path, rows((1, "ours"), (2, "ours"), (3, "ours")))
    another_writer(path, *[(i, "other") for i in range(20, 26)])  # same bucket, keys 20..25

    report = Committer(target, USER).commit(1, ours)

    assert report.committed and [s.id for s in snapshots(path)] == [1, 2, 3]
    assert state(path) == {**BASE, 1: "ours", 2: "ours", 3: "ours", **{i: "other" for i in range(20, 26)}}
    # Both were numbered from snapshot 1: the same numbers, above every older version of their keys.
    assert min(f.meta.min_sequence_number for f in ours) > max(f.max_sequence_number for f in files_of(path, 1))
    assert ({f.min_sequence_number for f in files_of(path, 2)} == {f.meta.min_sequence_number for f in ours})
    # A later write of keys of both writers plans above both and wins.
    target, later = planned(path, rows((2, "later"), (21, "later")))
    Committer(target, USER).commit(2, later)
    assert state(path) == {**BASE, 1: "ours", 2: "later", 3: "ours", 21: "later",
                           **{i: "other" for i in (20, 22, 23, 24, 25)}}
    assert leftover_files(path) == set()


def test_keys_that_meet_are_a_conflict_naming_the_bucket_the_keys_and_the_other_writer(tmp_path):
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows(*BASE.items()))
    target, ours = planned(path, rows((1, "ours"), (10, "ours")))  # keys 1..10
    other = another_writer(path, (5, "other"), (30, "other"))         # keys 5..30: 5..10 meet

    with pytest.raises(KeyRangeConflictError) as caught:
        Committer(target, USER).commit(1, ours)

    error = caught.value
    assert isinstance(error, CommitConflictError)
    assert (error.partition, error.bucket, error.key_range) == ((), 0, ((5,), (10,)))
    assert error.other_commit_user == other and error.snapshot == 2 and error.commit_user == USER
    assert "keys 5 to 10 to partition (), bucket 0" in str(error) and repr(other) in str(error)
    assert [s.id for s in snapshots(path)] == [1, 2]
    assert state(path) == {**BASE, 5: "other", 30: "other"}
    assert leftover_files(path) == set()


def publishes_first(monkeypatch, meanwhile) -> list:
    """Make the next commit's first snapshot publication lose the race: `meanwhile()` commits just
    before it. Returns a list that holds True once that happened."""
    import lakesink.paimon.commit.file_store as file_store

    publish, done = file_store.atomic_snapshot_commit, []

    def racing(table):
        inner = publish(table)
        original = inner.commit

        def first_loses(*args, **kwargs):
            if not done:
                done.append(True)
                meanwhile()
            return original(*args, **kwargs)

        inner.commit = first_loses
        return inner

    monkeypatch.setattr(file_store, "atomic_snapshot_commit", racing)
    return done


@pytest.mark.parametrize("keys, meets", [((20, 21), False), ((3, 4), True)], ids=["apart", "meeting"])
def test_a_writer_that_publishes_first_while_the_commit_publishes_is_checked_on_the_retry(
        tmp_path, monkeypatch, keys, meets):
    """The other snapshot lands between the commit's own check and its publication: pypaimon's
    publication loses the race, and its retry checks the new snapshot by key range as well."""
    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows(*BASE.items()))
    target, ours = planned(path, rows((1, "ours"), (5, "ours")))  # keys 1..5
    raced = publishes_first(monkeypatch, lambda: another_writer(path, *[(k, "other") for k in keys]))
    if meets:
        with pytest.raises(KeyRangeConflictError, match="bucket 0") as caught:
            Committer(target, USER).commit(1, ours)
        assert caught.value.key_range == ((3,), (4,)) and caught.value.snapshot == 2
        assert [s.id for s in snapshots(path)] == [1, 2]
        assert state(path) == {**BASE, 3: "other", 4: "other"}
        assert leftover_files(path) == set()
        return
    report = Committer(target, USER).commit(1, ours)
    assert raced and report.attempts == 2
    assert [s.commit_user for s in snapshots(path)][-1] == USER
    assert state(path) == {**BASE, 1: "ours", 5: "ours", 20: "other", 21: "other"}


def test_a_compaction_that_publishes_while_the_commit_publishes_is_no_conflict_on_the_retry(tmp_path, monkeypatch):
    """The commit's first attempt needs no base (it only adds level-0 files, planned on the latest
    snapshot); a compaction of its bucket publishes first. pypaimon's retry builds its base from the
    first attempt's plus the snapshots between: the compaction's removed files must be found
    there, not taken for files the commit deletes that were never added."""
    import lakesink

    path = new_table(tmp_path)
    pypaimon_append(open_table(path), rows(*BASE.items()))
    pypaimon_append(open_table(path), rows((1, "second"), (30, "second")))
    target, ours = planned(path, rows((2, "ours"), (31, "ours")))
    target.uniform_buckets = 1  # every file has the table's bucket count: the first attempt reads no base
    raced = publishes_first(monkeypatch, lambda: lakesink.compact(None, path, progress=False))
    report = Committer(target, USER).commit(1, ours)

    assert raced and report.attempts == 2
    assert [s.commit_kind for s in snapshots(path)] == ["APPEND", "APPEND", "COMPACT", "APPEND"]
    assert state(path) == {**BASE, 1: "second", 30: "second", 2: "ours", 31: "ours"}
    assert leftover_files(path) == set()



@pytest.mark.interop
def test_paimons_java_reader_reads_both_writers_files_as_pypaimon_does(tmp_path, java_paimon):
    """Level-0 files of two writers with the same sequence numbers (keys apart), then a later
    write over keys of both: Apache Paimon's own reader keeps the same version of every key."""
    path = new_table(tmp_path / "wh")
    pypaimon_append(open_table(path), rows(*BASE.items()))
    target, ours = planned(path, rows((1, "ours"), (2, "ours"), (3, "ours")))
    another_writer(path, *[(i, "other") for i in range(20, 26)])
    Committer(target, USER).commit(1, ours)
    target, later = planned(path, rows((2, "later"), (21, "later")))
    Committer(target, USER).commit(2, later)

    expected = {**BASE, 1: "ours", 2: "later", 3: "ours", 21: "later", **{i: "other" for i in (20, 22, 23, 24, 25)}}
    by_java = java_paimon.read(path, tmp_path / "java")
    assert len(by_java) == len(expected)
    assert {r["id"]: r["v"] for r in by_java} == expected == state(path)
