"""The commit protocol without Spark or Paimon: committer, pending state, pipelining."""

from __future__ import annotations

import json
import os
import threading

import pytest

from lakesink.errors import CommitFailedError, CommitStateUnknownError, CorruptStateError, RestoreError
from lakesink.protocol import Committer, Overwrite, PendingCheckpoint, PendingStore, PipelinedCommitter, StateStore

from .fake_target import FakeFile, FakeTarget

USER = "job-a"


@pytest.fixture()
def target():
    return FakeTarget()


@pytest.fixture()
def pending(tmp_path):
    return PendingStore(StateStore(str(tmp_path / "state")))


def pending_ids(store: PendingStore) -> list[int]:
    return list(store.identifiers())


# -- one commit ----------------------------------------------------------------

def test_a_commit_makes_its_files_visible_in_one_snapshot_and_moves_them_out_of_staging(target):
    files = target.stage("a", "b")
    report = Committer(target, USER).commit(1, files)
    assert report.snapshot_id == 1 and report.committed
    assert target.identities() == [(USER, 1)]
    assert target.disk == {"table/a", "table/b"}


def test_a_replay_of_a_committed_identifier_commits_nothing_and_discards_only_staged_files(target):
    committer = Committer(target, USER)
    committer.commit(1, target.stage("a", "b"))
    # The replay wrote new files, and names one already placed (as a crashed
    # driver's rerun could): staged ones go, table files stay.
    replay = target.stage("c", "d") + [FakeFile("a")]
    report = committer.commit(1, replay)
    assert report.skipped_replay and not report.committed
    assert report.files_discarded == 2
    assert target.identities() == [(USER, 1)]
    assert target.disk == {"table/a", "table/b"}


def test_a_replay_of_an_older_identifier_is_also_skipped(target):
    committer = Committer(target, USER)
    committer.commit(5, target.stage("a"))
    assert committer.commit(3, target.stage("b")).skipped_replay
    assert target.identities() == [(USER, 5)]
    assert target.disk == {"table/a"}


def test_identifiers_are_per_commit_user(target):
    Committer(target, USER).commit(1, target.stage("a"))
    report = Committer(target, "job-b").commit(1, target.stage("b"))
    assert report.committed
    assert target.identities() == [(USER, 1), ("job-b", 1)]


def test_a_commit_that_landed_but_was_reported_failed_is_not_committed_twice_and_deletes_nothing(target):
    committer = Committer(target, USER)
    target.fail_after_landing = True
    report = committer.commit(1, target.stage("a", "b"))
    assert "recovered_from" in report.extra
    assert target.identities() == [(USER, 1)]
    assert target.disk == {"table/a", "table/b"}
    # Running the same checkpoint again (e.g. the caller retried) changes nothing.
    target.fail_after_landing = False
    assert committer.commit(1, [FakeFile("a"), FakeFile("b")]).skipped_replay
    assert target.visible_files() == ["a", "b"]
    assert target.disk == {"table/a", "table/b"}


def test_a_commit_that_failed_and_did_not_land_discards_its_files_and_raises_commit_failed(target, pending):
    committer = Committer(target, USER, pending)
    target.fail_before_landing = True
    with pytest.raises(CommitFailedError, match="did not land") as info:
        committer.commit(1, target.stage("a", "b"))
    assert info.value.retryable
    assert target.snapshots == []
    assert target.disk == set()  # placed files went too: no snapshot references them
    assert pending_ids(pending) == []


def test_a_commit_the_target_rejects_as_definitely_failed_discards_its_files(target, pending):
    committer = Committer(target, USER, pending)
    target.fail_definitely = True
    with pytest.raises(CommitFailedError, match="rejected"):
        committer.commit(1, target.stage("a"))
    assert target.snapshots == [] and target.disk == set()
    assert pending_ids(pending) == []


def test_a_commit_whose_outcome_cannot_be_checked_keeps_files_and_pending_state(target, pending):
    committer = Committer(target, USER, pending)
    target.fail_before_landing = True
    target.check_fails_once_committing = True
    with pytest.raises(CommitStateUnknownError, match="No file was deleted") as info:
        committer.commit(1, target.stage("a", "b"))
    assert info.value.retryable
    assert target.disk == {"table/a", "table/b"}
    assert pending_ids(pending) == [1]
    # Once the table answers again, restoring resolves it: committed exactly once.
    target.fail_before_landing = target.check_fails = target.check_fails_once_committing = False
    reports = Committer(target, USER, pending).restore()
    assert [r.identifier for r in reports] == [1] and reports[0].restored
    assert target.visible_files() == ["a", "b"]
    assert pending_ids(pending) == []


def test_an_unknown_outcome_that_had_in_fact_landed_is_not_committed_again_on_restore(target, pending):
    committer = Committer(target, USER, pending)
    target.fail_after_landing = True
    target.check_fails_once_committing = True
    with pytest.raises(CommitStateUnknownError):
        committer.commit(1, target.stage("a"))
    assert target.disk == {"table/a"}
    target.fail_after_landing = target.check_fails = target.check_fails_once_committing = False
    assert Committer(target, USER, pending).restore() == []
    assert target.identities() == [(USER, 1)]
    assert pending_ids(pending) == []


def test_abort_of_an_uncommitted_checkpoint_removes_staged_and_placed_files(target):
    files = target.stage("a", "b")
    target.disk.discard("staging/b")
    target.disk.add("table/b")  # placed before the failure
    assert Committer(target, USER).abort(files, identifier=1) == 2
    assert target.disk == set()


def test_abort_after_the_identifier_landed_keeps_the_files_the_snapshot_references(target):
    committer = Committer(target, USER)
    committer.commit(1, target.stage("a"))
    leftovers = target.stage("x")
    committer.abort([FakeFile("a")] + leftovers, identifier=1)
    assert target.disk == {"table/a"}


def test_commit_passes_overwrite_and_the_pending_record_keeps_it(target, pending):
    committer = Committer(target, USER, pending)
    record = committer.accept(1, target.stage("a"), Overwrite(dynamic=True), {"k": "v"})
    restored = pending.all()[0]
    assert restored == record
    assert restored.overwrite == Overwrite(dynamic=True) and restored.properties == {"k": "v"}


# -- restore -------------------------------------------------------------------

def test_restore_commits_pending_checkpoints_in_identifier_order(target, pending):
    committer = Committer(target, USER, pending)
    for identifier, name in ((3, "c"), (1, "a"), (2, "b")):
        committer.accept(identifier, target.stage(name))
    reports = Committer(target, USER, pending).restore()
    assert [r.identifier for r in reports] == [1, 2, 3]
    assert all(r.restored for r in reports)
    assert target.identities() == [(USER, 1), (USER, 2), (USER, 3)]
    assert pending_ids(pending) == []


def test_restore_never_commits_a_pending_checkpoint_twice(target, pending):
    committer = Committer(target, USER, pending)
    committer.accept(1, target.stage("a"))
    committer.accept(2, target.stage("b"))
    # The driver died after checkpoint 1 landed but before its pending record was removed.
    target.commit(USER, 1, [FakeFile("a")])
    reports = Committer(target, USER, pending).restore()
    assert [r.identifier for r in reports] == [2]
    assert Committer(target, USER, pending).restore() == []
    assert target.identities() == [(USER, 1), (USER, 2)]
    assert target.visible_files() == ["a", "b"]


def test_restore_fails_naming_the_missing_files_and_commits_nothing(target, pending):
    committer = Committer(target, USER, pending)
    committer.accept(1, target.stage("a", "gone"), acknowledged=True)  # the engine will not replay it
    target.disk.discard("staging/gone")
    with pytest.raises(RestoreError, match="staging/gone") as info:
        Committer(target, USER, pending).restore()
    assert "1 of its data files" in str(info.value)
    assert target.snapshots == []
    assert pending_ids(pending) == [1]


def test_an_unacknowledged_checkpoint_half_discarded_by_a_failed_commit_is_dropped_for_the_replay(target, pending):
    """A sync checkpoint whose commit failed dies while discarding its files: the engine never
    recorded it and runs it again, so the restart drops what is left instead of refusing."""
    Committer(target, USER, pending).accept(1, target.stage("a", "gone"))
    target.disk.discard("staging/gone")
    assert Committer(target, USER, pending).restore() == []
    assert target.snapshots == []
    assert pending_ids(pending) == []
    assert "staging/a" not in target.disk
    Committer(target, USER, pending).commit(1, target.stage("a2"))  # the replay
    assert len(target.snapshots) == 1


def test_restore_refuses_pending_state_of_another_commit_user(target, pending):
    Committer(target, "other", pending).accept(1, target.stage("a"))
    with pytest.raises(RestoreError, match="other"):
        Committer(target, USER, pending).restore()
    assert target.snapshots == []


# -- pending state on disk -----------------------------------------------------

def test_pending_state_is_json_with_a_format_and_version(target, pending, tmp_path):
    Committer(target, USER, pending).accept(7, target.stage("a"))
    (name,) = os.listdir(tmp_path / "state")
    document = json.loads((tmp_path / "state" / name).read_text())
    assert document["format"] == "lakesink.pending-commit"
    assert document["version"] == 1
    assert document["commit_user"] == USER and document["identifier"] == 7
    assert document["committables"] == [{"name": "a"}]


def test_a_pending_state_file_that_is_not_json_is_a_corrupt_state_error(target, pending, tmp_path):
    Committer(target, USER, pending).accept(7, target.stage("a"))
    (name,) = os.listdir(tmp_path / "state")
    (tmp_path / "state" / name).write_text('{"format": "lakesink.pending-com')
    with pytest.raises(CorruptStateError, match="not valid JSON"):
        Committer(target, USER, pending).restore()
    assert target.snapshots == []


def test_a_pending_state_file_of_an_unknown_version_is_a_corrupt_state_error(target, pending, tmp_path):
    Committer(target, USER, pending).accept(7, target.stage("a"))
    (name,) = os.listdir(tmp_path / "state")
    path = tmp_path / "state" / name
    document = json.loads(path.read_text())
    document["version"] = 99
    path.write_text(json.dumps(document))
    with pytest.raises(CorruptStateError, match=r"pending-0+7.json is a .* of version 99; this lakesink .* reads version 1"):
        Committer(target, USER, pending).restore()
    assert target.snapshots == []


def test_a_document_of_another_format_is_a_corrupt_state_error():
    with pytest.raises(CorruptStateError, match="format='something-else'"):
        PendingCheckpoint.from_json({"format": "something-else", "version": 1}, "where")


# -- pipelined -----------------------------------------------------------------

def _wait_for_background(pipeline: PipelinedCommitter) -> None:
    # Wait for the background commit without flush(), which would raise the error itself.
    pipeline.wait_idle()


def test_pipelined_commits_run_in_order_and_leave_no_pending_state(target, pending):
    reports = []
    pipeline = PipelinedCommitter(Committer(target, USER, pending), reports.append)
    for identifier in (1, 2, 3):
        pipeline.submit(identifier, target.stage(f"f{identifier}"))
    pipeline.close()
    assert [r.identifier for r in reports] == [1, 2, 3]
    assert target.identities() == [(USER, 1), (USER, 2), (USER, 3)]
    assert pending_ids(pending) == []


def test_pipelined_committer_raises_a_background_failure_on_the_next_submit(target, pending):
    pipeline = PipelinedCommitter(Committer(target, USER, pending))
    target.fail_definitely = True
    pipeline.submit(1, target.stage("a"))
    _wait_for_background(pipeline)
    target.fail_definitely = False
    with pytest.raises(CommitFailedError, match="rejected"):
        pipeline.submit(2, target.stage("b"))
    assert target.snapshots == []
    assert "staging/b" in target.disk  # not accepted: the caller still owns it
    pipeline.close()


def test_pipelined_committer_raises_a_background_failure_on_flush(target, pending):
    pipeline = PipelinedCommitter(Committer(target, USER, pending))
    target.fail_before_landing = True
    pipeline.submit(1, target.stage("a"))
    with pytest.raises(CommitFailedError):
        pipeline.flush()
    pipeline.flush()  # raised once, not forever
    assert target.snapshots == []
    pipeline.close()


def test_after_a_background_failure_later_checkpoints_wait_for_a_restore(target, pending):
    pipeline = PipelinedCommitter(Committer(target, USER, pending))
    target.gate = threading.Event()
    target.fail_before_landing = True
    target.check_fails_once_committing = True  # unknown outcome: state is kept
    pipeline.submit(1, target.stage("a"))
    pipeline.submit(2, target.stage("b"))  # queued behind 1
    target.gate.set()
    _wait_for_background(pipeline)
    assert target.commit_calls == 1  # 2 was not attempted after 1 failed
    target.fail_before_landing = target.check_fails = target.check_fails_once_committing = False
    with pytest.raises(CommitStateUnknownError):
        pipeline.flush()
    pipeline.close()
    assert target.snapshots == []
    reports = Committer(target, USER, pending).restore()
    assert [r.identifier for r in reports] == [1, 2]
    assert target.identities() == [(USER, 1), (USER, 2)]
    assert target.visible_files() == ["a", "b"]


def test_pipelined_replay_of_a_committed_checkpoint_is_dropped_at_once(target, pending):
    pipeline = PipelinedCommitter(Committer(target, USER, pending))
    pipeline.submit(1, target.stage("a"))
    pipeline.flush()
    pipeline.submit(1, target.stage("a2"))
    pipeline.close()
    assert target.identities() == [(USER, 1)]
    assert target.disk == {"table/a"}


def test_pipelined_commits_need_a_pending_store(target):
    with pytest.raises(ValueError, match="PendingStore"):
        PipelinedCommitter(Committer(target, USER))


# -- acknowledged checkpoints (pipelined): the engine will not replay them -------------

def test_a_pipelined_commit_that_definitely_failed_keeps_files_and_pending_state_for_restore(target, pending):
    pipeline = PipelinedCommitter(Committer(target, USER, pending))
    target.fail_definitely = True
    pipeline.submit(1, target.stage("a"))
    with pytest.raises(CommitFailedError, match="retried when the query restarts"):
        pipeline.flush()
    pipeline.close()
    assert target.snapshots == []
    assert "staging/a" in target.disk  # the engine has moved past checkpoint 1: its rows live only here
    assert pending_ids(pending) == [1]
    assert pending.get(1).acknowledged

    target.fail_definitely = False
    reports = Committer(target, USER, pending).restore()
    assert [r.identifier for r in reports] == [1]
    assert target.visible_files() == ["a"]
    assert pending_ids(pending) == []


def test_restore_keeps_an_acknowledged_checkpoint_whose_commit_fails_and_discards_an_unacknowledged_one(
        target, pending):
    committer = Committer(target, USER, pending)
    committer.accept(1, target.stage("a"), acknowledged=True)
    target.fail_before_landing = True
    with pytest.raises(CommitFailedError, match="already acknowledged"):
        Committer(target, USER, pending).restore()
    assert pending_ids(pending) == [1]
    assert target.missing_files([FakeFile("a")]) == []

    pending.remove(1)
    target.disk.clear()
    committer.accept(2, target.stage("b"))  # sync: the engine replays it if this fails
    with pytest.raises(CommitFailedError):
        Committer(target, USER, pending).restore()
    assert pending_ids(pending) == []
    assert target.disk == set()


def test_restore_of_a_checkpoint_that_already_landed_removes_the_files_it_never_placed(target, pending):
    committer = Committer(target, USER, pending)
    committer.commit(1, target.stage("a"))
    # A replay accepted after the original landed (a race with a committer of a dead driver).
    committer.accept(1, target.stage("a-replay"), acknowledged=True)
    assert Committer(target, USER, pending).restore() == []
    assert target.disk == {"table/a"}
    assert pending_ids(pending) == []


def test_the_acknowledged_flag_is_optional_in_version_1_documents(target, pending, tmp_path):
    Committer(target, USER, pending).accept(1, target.stage("a"), acknowledged=True)
    path = next((tmp_path / "state").glob("pending-*.json"))
    document = json.loads(path.read_text())
    assert document["acknowledged"] is True
    del document["acknowledged"]  # as written before the flag existed
    path.write_text(json.dumps(document))
    assert pending.get(1).acknowledged is False
