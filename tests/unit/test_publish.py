"""Snapshot publication: create-if-absent on every storage, and what a lost race does.

Deterministic races: a publisher wrapper lets another writer commit right
before this one publishes (a real commit, on a real table), or reports an
error after its own publication landed. Tables are read back with pypaimon.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

import lakesink.paimon.commit.file_store as commit_module
from lakesink.errors import InvalidOptionError
from lakesink.paimon.table import publish
from lakesink.paimon.table.publish import (ConditionalPutSnapshotCommit, LinkingSnapshotCommit, LockingSnapshotCommit,
                                     UnsafePublicationError, atomic_snapshot_commit, publication_kind)
from lakesink.protocol import Overwrite

from ..s3server import S3Server
from ..staged import commit, new_target, read_back, snapshot_list, stage

BUCKET = "lakesink-publish"


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture()
def s3_table(s3, request):
    return f"s3://{BUCKET}/{request.node.name}/db.db/t", s3.fs_options()


def _table_with_one_snapshot(path, fs_options=None):
    target = new_target(path, fs_options)
    commit(target, "first", 1, stage(target, [1], "a", "first"))
    table = target.table(refresh=True)
    return table, table.snapshot_manager().get_latest_snapshot()


# -- create-if-absent ----------------------------------------------------------

def _second_writer_of(snapshot):
    return dataclasses.replace(snapshot, commit_user="second", commit_identifier=99)


def test_linking_publication_never_replaces_a_snapshot_another_writer_published(tmp_path):
    table, first = _table_with_one_snapshot(str(tmp_path / "t"))
    publisher = atomic_snapshot_commit(table)
    assert isinstance(publisher, LinkingSnapshotCommit)
    assert publisher.commit(None, _second_writer_of(first), []) is False
    assert table.snapshot_manager().get_snapshot_by_id(first.id).commit_user == "first"
    assert len(snapshot_list(str(tmp_path / "t"))) == 1


def test_conditional_put_publication_never_replaces_a_snapshot_another_writer_published(s3_table):
    path, fs_options = s3_table
    table, first = _table_with_one_snapshot(path, fs_options)
    publisher = atomic_snapshot_commit(table)
    assert isinstance(publisher, ConditionalPutSnapshotCommit)
    assert publisher.commit(None, _second_writer_of(first), []) is False
    assert table.snapshot_manager().get_snapshot_by_id(first.id).commit_user == "first"
    assert len(snapshot_list(path, fs_options)) == 1


def test_the_s3_store_lets_exactly_one_of_many_racing_conditional_puts_win(s3):
    from botocore.exceptions import ClientError

    client = s3.client()
    outcomes = []

    def put(i):
        try:
            client.put_object(Bucket=BUCKET, Key="race/object", Body=str(i).encode(), IfNoneMatch="*")
            outcomes.append(("won", i))
        except ClientError as exc:
            outcomes.append((exc.response["Error"]["Code"], i))

    threads = [threading.Thread(target=put, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for code, i in outcomes if code == "won"]
    assert len(winners) == 1
    assert sorted(code for code, _ in outcomes if code != "won") == ["PreconditionFailed"] * 15
    assert client.get_object(Bucket=BUCKET, Key="race/object")["Body"].read() == str(winners[0]).encode()


def test_a_lock_file_serialises_publication_where_the_storage_has_no_atomic_create(tmp_path):
    lock = tmp_path / "locks" / "t.lock"
    path = str(tmp_path / "t")
    table, first = _table_with_one_snapshot(path, {"commit.lock": f"file:{lock}"})
    publisher = atomic_snapshot_commit(table)
    assert isinstance(publisher, LockingSnapshotCommit) and publisher.lock_file == str(lock)
    assert publisher.commit(None, _second_writer_of(first), []) is False
    second = dataclasses.replace(_second_writer_of(first), id=first.id + 1)
    assert publisher.commit(None, second, []) is True
    assert [s.commit_user for s in snapshot_list(path)] == ["first", "second"]


@pytest.mark.parametrize("path", ["gs://bucket/wh/db.db/t", "oss://bucket/wh/db.db/t", "hdfs://nn/wh/db.db/t"])
def test_storage_without_an_atomic_create_is_refused_unless_a_lock_or_unsafe_publication_is_chosen(path):
    with pytest.raises(UnsafePublicationError, match="commit.lock=file:.*commit.allow-unsafe-publication=true"):
        publication_kind(path, {})
    assert publication_kind(path, {"commit.lock": "file:/shared/t.lock"}) == "lock"
    assert publication_kind(path, {"commit.allow-unsafe-publication": "true"}) == "unsafe-rename"


@pytest.mark.parametrize("options", [{"commit.lock": "s3://b/lock"}, {"commit.lock": "file:relative.lock"},
                                     {"commit.allow-unsafe-publication": "maybe"}])
def test_a_malformed_publication_option_is_named_in_the_error(options):
    with pytest.raises(InvalidOptionError, match=next(iter(options))):
        publication_kind("gs://bucket/t", options)


def test_local_and_s3_tables_publish_atomically_without_any_option(s3_table):
    path, fs_options = s3_table
    assert publication_kind("/data/wh/db.db/t") == "link"
    assert publication_kind("file:/data/wh/db.db/t") == "link"
    assert publication_kind(path, fs_options) == "conditional-put"


# -- lost races through the commit core ------------------------------------------

class Interfering(publish.SnapshotCommit):
    """The real publisher, with one scripted event around the next publication."""

    def __init__(self, inner, script):
        self.inner, self.script = inner, script

    def commit(self, base_snapshot_uuid, snapshot, statistics):
        event = self.script.pop() if self.script else None
        if event == "landed-but-raised":
            assert self.inner.commit(base_snapshot_uuid, snapshot, statistics)
            raise OSError("connection reset after the request was sent")
        if event == "landed-then-412":
            # A PUT that landed, its answer lost, retried by the client into a 412.
            assert self.inner.commit(base_snapshot_uuid, snapshot, statistics)
            return self.inner.commit(base_snapshot_uuid, snapshot, statistics)
        if callable(event):
            event()  # another writer commits first
        return self.inner.commit(base_snapshot_uuid, snapshot, statistics)

    def close(self):
        self.inner.close()


@pytest.fixture()
def script(monkeypatch):
    events = []
    real = commit_module.atomic_snapshot_commit
    monkeypatch.setattr(commit_module, "atomic_snapshot_commit", lambda table: Interfering(real(table), events))
    return events


def _rows(path, fs_options=None):
    table = read_back(path, fs_options)
    return sorted(zip(table.column("part").to_pylist(), table.column("id").to_pylist()))


# (what this writer commits, what another writer commits just before it publishes,
#  rows afterwards; the table starts with row 0 in partition a). Paimon's rules: appends
#  never conflict; an overwrite is planned again on the new latest snapshot, so it
#  replaces whatever landed meanwhile in its partitions.
RACES = [
    ("append a", "append a", [("a", 0), ("a", 1), ("a", 2), ("a", 10), ("a", 20)]),
    ("append b", "append a", [("a", 0), ("a", 1), ("a", 2), ("b", 10), ("b", 20)]),
    ("append a", "overwrite a", [("a", 1), ("a", 2), ("a", 10), ("a", 20)]),
    ("overwrite b", "append a", [("a", 0), ("a", 1), ("a", 2), ("b", 10), ("b", 20)]),
    ("overwrite a", "append a", [("a", 10), ("a", 20)]),
    ("overwrite a", "overwrite a", [("a", 10), ("a", 20)]),
]


def _change(word: str):
    return Overwrite(dynamic=True) if word == "overwrite" else None


@pytest.mark.parametrize("mine,theirs,rows", RACES, ids=[f"{m} after {t}" for m, t, _ in RACES])
def test_a_commit_that_loses_the_publication_race_is_retried_on_the_new_latest_snapshot(
        tmp_path, script, mine, theirs, rows):
    path = str(tmp_path / "t")
    target = new_target(path)
    commit(target, "setup", 1, stage(target, [0], "a", "setup"))

    def other_writer():
        kind, part = theirs.split()
        other = new_target(path)
        commit(other, "other", 1, stage(other, [1, 2], part, "other"), _change(kind))

    script.append(other_writer)
    kind, part = mine.split()
    report = commit(target, "me", 1, stage(target, [10, 20], part, "me"), _change(kind))

    assert report.attempts == 2  # published, lost the race, published again
    assert report.snapshot_id == 3
    assert [s.commit_user for s in snapshot_list(path)] == ["setup", "other", "me"]
    assert _rows(path) == rows


def test_a_publication_that_landed_but_raised_is_recognised_and_not_published_again(tmp_path, script):
    path = str(tmp_path / "t")
    target = new_target(path)
    script.append("landed-but-raised")
    report = commit(target, "me", 7, stage(target, [1, 2], "a", "me"))
    assert report.committed and report.attempts == 1  # the retry found (me, 7) and stopped
    assert [(s.commit_user, s.commit_identifier) for s in snapshot_list(path)] == [("me", 7)]
    assert _rows(path) == [("a", 1), ("a", 2)]


def test_a_conditional_put_retried_into_412_by_its_own_landed_write_is_not_published_again(s3_table, script):
    path, fs_options = s3_table
    target = new_target(path, fs_options)
    script.append("landed-then-412")
    report = commit(target, "me", 7, stage(target, [1, 2], "a", "me"))
    assert report.committed and report.snapshot_id == 1
    assert [(s.commit_user, s.commit_identifier) for s in snapshot_list(path, fs_options)] == [("me", 7)]
    assert _rows(path, fs_options) == [("a", 1), ("a", 2)]
