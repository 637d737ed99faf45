"""Every durable state document lakesink writes: today's exact bytes still read through the readers
lakesink uses, what is written now has the same fields and version, and a document of a version this
lakesink does not read is a CorruptStateError naming the file, the version and the version read."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path

import pytest

from lakesink import storage
from lakesink.errors import BackgroundCommitError, CorruptStateError, MaintenanceError
from lakesink.paimon.catalog import staged_table
from lakesink.paimon.commit import identity, intents
from lakesink.paimon.compaction import merge_on_write
from lakesink.paimon.maintenance import background, expiry
from lakesink.protocol import coordinator, pipelined
from lakesink.protocol.binding import CheckpointBinding, sink_state
from lakesink.protocol.state import PENDING, PendingCheckpoint, PendingStore, StateStore

# Each kind's document exactly as lakesink wrote it before its state went through storage.documents
# (field names, order, spacing: the writers' own json.dumps), with where it lives.
TODAY = {
    "pending": ("state/pending-00000000000000000007.json",
                '{\n "acknowledged": true,\n "check_from": 12,\n "commit_user": "u",\n "committables": [\n  '
                '{\n   "path": "a"\n  }\n ],\n "format": "lakesink.pending-commit",\n "identifier": 7,\n '
                '"overwrite": null,\n "properties": {\n  "k": "v"\n },\n "version": 1\n}'),
    "aggregator": ("state/aggregator-00000000000000000003.json",
                   '{\n "aggregator": {},\n "bins": [],\n "checkpoint": 3,\n "commit_user": "u",\n '
                   '"format": "lakesink.aggregator-state",\n "held": [],\n "pending": null,\n "saved_at": 3,\n '
                   '"version": 1\n}'),
    "committer-error": ("state/committer-error.json",
                        '{\n "error": "CommitFailedError",\n "format": "lakesink.committer-error",\n '
                        '"identifier": 7,\n "message": "boom",\n "time_ms": 1763740000000,\n "version": 1\n}'),
    "binding": ("chk/lakesink/sink.json",
                '{\n "commit_user": "lakesink-stream-q1",\n "format": "lakesink.stream-sink",\n '
                '"query_id": "q1",\n "table": "/wh/db.db/t",\n "version": 1\n}'),
    "jdbc-binding": ("chk/lakesink/jdbc-sink.json",
                     '{\n "commit_user": "lakesink-stream-q1",\n "format": "lakesink.jdbc-stream-sink",\n '
                     '"query_id": "q1",\n "table": "jdbc:sqlite:/x.db t",\n "version": 1\n}'),
    "intent": ("t/_lakesink/staging/0123456789abcdef/intents/3-0a1b2c3d4e5f.json",
               '{"format": "lakesink.intent", "version": 1, "files": ["/t/dt=1/bucket-0/data-1.parquet"]}'),
    "commit-user": ("t/_lakesink/commit-users/" + identity.marker_path("", "u").rsplit("/", 1)[1],
                    '{"format": "lakesink.commit-user", "version": 1, "commit_user": "u", "last_identifier": 7, '
                    '"last_snapshot": 12, "scan_from": null}'),
    "expiry": ("t/_lakesink/expiry.json",
               '{"format": "lakesink.expiry", "version": 1, "begin": 1, "end": 3, "files": ["/t/manifest/m-1"]}'),
    "maintenance-failure": ("t/_lakesink/maintenance-failure.json",
                            '{"format": "lakesink.maintenance-failure", "version": 1, "at_ms": 1763740000000, '
                            '"error": "InvalidOptionError: bad"}'),
    "merged-runs": ("t/_lakesink/merged-runs/" + merge_on_write.record_path("", "u").rsplit("/", 1)[1],
                    '{"format": "lakesink.merged-runs", "version": 1, "commit_user": "u", "identifier": 7, '
                    '"files": ["/t/bucket-0/data-1.parquet"]}'),
    "staged-table": ("db.db/.t.lakesink-staging-0123456789ab/STAGED.json",
                     '{"format": "lakesink.staged-table", "version": 1, "target": "/wh/db.db/t", "pid": 1, '
                     '"host": "elsewhere", "created_at": 1763740000.5}'),
}


def _put(tmp_path: Path, kind: str, text: str | None = None) -> Path:
    relative, today = TODAY[kind]
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(today if text is None else text)
    return path


def _read(tmp_path: Path, kind: str):
    """The document read back by the code lakesink reads it with."""
    if kind == "pending":
        return PendingStore(StateStore(str(tmp_path / "state"))).get(7)
    if kind == "aggregator":
        return StateStore(str(tmp_path / "state")).read_document("aggregator-00000000000000000003.json",
                                                                  coordinator.STATE)
    if kind == "committer-error":
        with pytest.raises(BackgroundCommitError) as raised:
            pipelined.raise_recorded_error(StateStore(str(tmp_path / "state")))
        return raised.value
    if kind in ("binding", "jdbc-binding"):
        name, fmt, table = (("sink.json", "lakesink.stream-sink", "/wh/db.db/t") if kind == "binding" else
                            ("jdbc-sink.json", "lakesink.jdbc-stream-sink", "jdbc:sqlite:/x.db t"))
        checkpoint = str(tmp_path / "chk")
        return CheckpointBinding(sink_state(checkpoint), checkpoint, name, fmt, table).commit_user(None)
    if kind == "intent":
        return intents.read_intent_files(str(tmp_path / "t/_lakesink/staging/0123456789abcdef"), None)
    if kind == "commit-user":
        return identity.read_marker(storage.file_io(str(tmp_path / "t")), str(tmp_path / "t"), "u")
    if kind == "expiry":
        return expiry.JOURNAL.read(None, str(tmp_path / "t/_lakesink/expiry.json"))
    if kind == "maintenance-failure":
        path = str(tmp_path / "t")
        with pytest.raises(MaintenanceError) as raised:
            background.raise_failure(path, storage.file_io(path))
        return raised.value
    if kind == "merged-runs":
        return merge_on_write.RECORD.read(None, str(tmp_path / "t/_lakesink/merged-runs") + "/"
                                          + merge_on_write.record_path("", "u").rsplit("/", 1)[1])
    if kind == "staged-table":
        return staged_table.staged_tables(str(tmp_path / "db.db"))
    raise AssertionError(kind)


def test_every_state_document_in_todays_format_reads(tmp_path):
    for kind in TODAY:
        _put(tmp_path, kind)
    pending = _read(tmp_path, "pending")
    assert (pending.commit_user, pending.identifier, pending.committables, pending.properties,
            pending.acknowledged, pending.check_from) == ("u", 7, [{"path": "a"}], {"k": "v"}, True, 12)
    assert _read(tmp_path, "aggregator")["checkpoint"] == 3
    assert "batch 7 failed: CommitFailedError: boom" in str(_read(tmp_path, "committer-error"))
    assert _read(tmp_path, "binding") == "lakesink-stream-q1"
    assert _read(tmp_path, "jdbc-binding") == "lakesink-stream-q1"
    assert list(_read(tmp_path, "intent").values()) == [["/t/dt=1/bucket-0/data-1.parquet"]]
    assert _read(tmp_path, "commit-user")["last_identifier"] == 7
    assert _read(tmp_path, "expiry")["files"] == ["/t/manifest/m-1"]
    assert "InvalidOptionError: bad" in str(_read(tmp_path, "maintenance-failure"))
    assert _read(tmp_path, "merged-runs")["files"] == ["/t/bucket-0/data-1.parquet"]
    ((where, marker),) = _read(tmp_path, "staged-table")
    assert where.endswith(".t.lakesink-staging-0123456789ab") and marker["target"] == "/wh/db.db/t"


@pytest.mark.parametrize("kind", sorted(TODAY))
def test_a_document_of_a_newer_version_names_the_file_the_version_and_the_version_read(tmp_path, kind):
    data = json.loads(TODAY[kind][1])
    data["version"] = 2
    path = _put(tmp_path, kind, json.dumps(data))
    if kind == "maintenance-failure":  # raised once all the same (a MaintenanceError), saying why
        assert re.search(rf"{path.name} is a .* of version 2; this lakesink \(\d[^)]*\) reads version 1 .* newer "
                         "lakesink", str(_read(tmp_path, kind)))
        return
    with pytest.raises(CorruptStateError) as raised:
        _read(tmp_path, kind)
    message = str(raised.value)
    assert f"{path.name} is a " in message and "of version 2; this lakesink (" in message
    assert f"reads version 1 of {data['format']!r} only" in message and "written by a newer lakesink" in message


def test_a_document_of_an_unknown_version_or_another_format_is_refused_too(tmp_path):
    path = str(tmp_path / "x.json")
    Path(path).write_text('{"format": "lakesink.expiry", "version": "1"}')
    with pytest.raises(CorruptStateError, match=r"x.json is a lakesink expiry plan of version '1'; this lakesink "
                                                r"\(.*\) reads version 1 of 'lakesink.expiry' only. Move it away"):
        expiry.JOURNAL.read(None, path)
    Path(path).write_text('{"format": "lakesink.intent", "version": 1}')
    with pytest.raises(CorruptStateError, match="x.json has an unknown format .*format='lakesink.intent'.*not a "
                                                "lakesink expiry plan"):
        expiry.JOURNAL.read(None, path)
    assert expiry.JOURNAL.read(None, path, skip_other_formats=True) is None
    Path(path).write_text('{"format": "lakesink.exp')
    with pytest.raises(CorruptStateError, match="x.json is not valid JSON"):
        expiry.JOURNAL.read(None, path)
    assert expiry.JOURNAL.read(None, str(tmp_path / "absent.json")) is None


def test_what_is_written_now_has_todays_fields_and_version(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    PendingStore(store).put(PendingCheckpoint("u", 7, [{"path": "a"}], None, {"k": "v"}, True, 12))
    written = json.loads((tmp_path / TODAY["pending"][0]).read_text())
    assert written == json.loads(TODAY["pending"][1]) and PENDING.version == 1

    pipelined.record_error(store, 7, RuntimeError("boom"))
    assert set(json.loads((tmp_path / TODAY["committer-error"][0]).read_text())) == \
        set(json.loads(TODAY["committer-error"][1]))

    checkpoint = str(tmp_path / "chk")
    CheckpointBinding(sink_state(checkpoint), checkpoint, "sink.json", "lakesink.stream-sink",
                      "/wh/db.db/t").bind(None, lambda: "q1")
    assert json.loads((tmp_path / TODAY["binding"][0]).read_text()) == json.loads(TODAY["binding"][1])

    table = str(tmp_path / "t")
    identity.write_marker(storage.file_io(table), table, "u", last_identifier=7, last_snapshot=12)
    assert json.loads((tmp_path / TODAY["commit-user"][0]).read_text()) == json.loads(TODAY["commit-user"][1])

    record = merge_on_write.record_path(table, "u")
    merge_on_write.MergedCommit(record=record).placing(None, "u", 7)  # nothing placed: no table needed
    assert json.loads(Path(record).read_text()) == {**json.loads(TODAY["merged-runs"][1]), "files": []}

    background.record_failure(table, ValueError("bad"))
    failure = json.loads((tmp_path / TODAY["maintenance-failure"][0]).read_text())
    assert set(failure) == set(json.loads(TODAY["maintenance-failure"][1])) and failure["version"] == 1

    staged = staged_table.PaimonStagedTable(str(tmp_path / "db.db" / "u"))
    staged.make_staging()
    marker = json.loads(Path(staged.staging_path, staged_table.MARKER).read_text())
    assert set(marker) == set(json.loads(TODAY["staged-table"][1]))
    assert (marker["format"], marker["version"], marker["pid"], marker["host"]) == \
        ("lakesink.staged-table", 1, os.getpid(), socket.gethostname())
    assert time.time() - marker["created_at"] < 60
    # written whole under a hidden temporary name, then renamed: nothing else is left beside it
    assert os.listdir(staged.staging_path) == [staged_table.MARKER]
