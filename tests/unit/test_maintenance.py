"""Manifest merging, expiry, tags, consumers, orphans and history, without Spark.

Tables are written through lakesink's commit core (PaimonTarget + Committer)
and always checked by reading them back with pypaimon directly.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.table.file_store_table import FileStoreTable

from lakesink.errors import MaintenanceError
from lakesink.paimon.commit import identity
from lakesink.paimon import PaimonTarget, TableLayout, TableSpec, describe_parquet
from lakesink.paimon import maintenance
from lakesink.protocol.committer import Committer
from lakesink.protocol.target import Overwrite
from tests.helpers import leftover_files, read_table, snapshots

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string())])


class Writer:
    """Commits small batches through lakesink's commit core."""

    def __init__(self, path: str, options: dict | None = None, partition=(), user="writer",
                 background=False):
        self.path = str(path)
        self.partition = list(partition)
        self.target = PaimonTarget(self.path, TableSpec(SCHEMA, self.partition, [],
                                                        {"bucket": "-1", **(options or {})}))
        self.target.maintenance = background
        self.committer = Committer(self.target, user)
        self.staging = os.path.join(os.path.dirname(self.path), "staging")
        os.makedirs(self.staging, exist_ok=True)
        self.next_id = 0
        self.identifier = 0

    def commit(self, rows=1, dt_value="2024-01-01", overwrite=None):
        ids = list(range(self.next_id, self.next_id + rows))
        self.next_id += rows
        staged = f"{self.staging}/f{self.identifier}-{time.monotonic_ns()}.parquet"
        pq.write_table(pa.table({"id": ids, "dt": [dt_value] * rows}, schema=SCHEMA), staged)
        layout = TableLayout.for_new_table(SCHEMA, self.partition)
        report = self.committer.commit(self.identifier, [describe_parquet(staged, layout, self.target.file_io)],
                                       overwrite=overwrite)
        self.identifier += 1
        return ids, report


def ids_of(path, snapshot_id=None) -> list[int]:
    return sorted(read_table(path, snapshot_id).column("id").to_pylist())


def manifest_files_on_disk(path) -> set[str]:
    return {os.path.normpath(os.path.join(path, "manifest", n)) for n in os.listdir(os.path.join(path, "manifest"))}


def referenced_metadata(path) -> set[str]:
    table = maintenance.open_table(str(path))
    refs = maintenance.Metadata(table).referenced(
        table.snapshot_manager().list_snapshots() + list(maintenance.list_tags(table).values()))
    return {os.path.normpath(p) for p in refs if "/manifest/" in p}


def base_list_length(path) -> int:
    table = FileStoreTable.from_path(str(path))
    return len(ManifestListManager(table).read_all(table.snapshot_manager().get_latest_snapshot()))


# -- manifest merging --------------------------------------------------------
def test_manifests_are_merged_and_the_table_reads_exactly_after_220_commits(table_path):
    writer = Writer(table_path)
    expected = []
    for _ in range(220):
        expected += writer.commit()[0]
    assert ids_of(table_path) == expected
    assert base_list_length(table_path) <= 31  # pypaimon alone: one manifest per commit (220)


def test_a_full_merge_drops_deleted_entries_and_keeps_the_live_files(table_path):
    writer = Writer(table_path, {"manifest.full-compaction-threshold-size": "1 b",
                                 "manifest.merge-min-count": "3"})
    for _ in range(6):
        writer.commit()
    kept, _ = writer.commit(overwrite=Overwrite())
    for _ in range(4):
        kept += writer.commit()[0]
    assert ids_of(table_path) == kept
    table = FileStoreTable.from_path(table_path)
    metas = ManifestListManager(table).read_all(table.snapshot_manager().get_latest_snapshot())
    assert sum(m.num_deleted_files for m in metas) == 0


# -- snapshot expiry ----------------------------------------------------------
def test_expiry_keeps_the_retained_snapshots_readable_and_deletes_only_unreferenced_files(table_path):
    writer = Writer(table_path, {"snapshot.num-retained.min": "3", "snapshot.num-retained.max": "5",
                                 "manifest.merge-min-count": "4"})
    expected_at = {}
    live = []
    for i in range(14):
        ids, report = writer.commit(overwrite=Overwrite() if i == 6 else None)
        live = ids if i == 6 else live + ids
        expected_at[report.snapshot_id] = sorted(live)
    report = maintenance.expire_snapshots(table_path, limit=None)
    assert report.snapshots_expired == 9
    assert [s.id for s in snapshots(table_path)] == [10, 11, 12, 13, 14]
    for snapshot_id in range(10, 15):
        assert ids_of(table_path, snapshot_id) == expected_at[snapshot_id]
    assert leftover_files(table_path) == set()  # the overwritten files are gone
    assert manifest_files_on_disk(table_path) == referenced_metadata(table_path)


def test_expiry_waits_for_snapshot_time_retained_beyond_the_minimum(table_path):
    writer = Writer(table_path, {"snapshot.num-retained.min": "2", "snapshot.time-retained": "1 h"})
    for _ in range(6):
        writer.commit()
    assert maintenance.expire_snapshots(table_path).snapshots_expired == 0
    later = int(time.time() * 1000) + 2 * 3_600_000
    assert maintenance.expire_snapshots(table_path, now_ms=later).snapshots_expired == 4
    assert ids_of(table_path) == list(range(6))


def test_expiry_never_passes_the_snapshot_a_registered_consumer_reads_next(table_path):
    writer = Writer(table_path, {"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1"})
    for _ in range(6):
        writer.commit()
    os.makedirs(f"{table_path}/consumer")
    with open(f"{table_path}/consumer/consumer-reader", "w") as out:
        json.dump({"nextSnapshot": 3}, out)
    maintenance.expire_snapshots(table_path, limit=None)
    assert [s.id for s in snapshots(table_path)] == [3, 4, 5, 6]
    assert ids_of(table_path, 3) == [0, 1, 2]


def test_a_tag_keeps_its_files_through_expiry_and_deleting_it_frees_them(table_path):
    writer = Writer(table_path, {"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1"})
    writer.commit()
    writer.commit()
    maintenance.create_tag(table_path, "before-overwrite")
    kept, _ = writer.commit(overwrite=Overwrite())
    maintenance.expire_snapshots(table_path, limit=None)
    assert [s.id for s in snapshots(table_path)] == [3]
    tagged = FileStoreTable.from_path(table_path).copy({"scan.tag-name": "before-overwrite"})
    builder = tagged.new_read_builder()
    assert sorted(builder.new_read().to_arrow(builder.new_scan().plan().splits()).column("id").to_pylist()) == [0, 1]
    assert maintenance.delete_tag(maintenance.open_table(table_path), "before-overwrite") > 0
    assert ids_of(table_path) == kept
    assert leftover_files(table_path) == set()
    assert manifest_files_on_disk(table_path) == referenced_metadata(table_path)


def test_expiry_keeps_a_commit_users_identifier_its_marker_would_only_find_in_expired_snapshots(table_path):
    streaming = Writer(table_path, {"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1"},
                       user="stream")
    for _ in range(3):
        streaming.commit()
    # A crash between publishing snapshot 3 (identifier 2) and updating the marker
    # leaves the marker pointing at snapshot 3 to scan from, with identifier 1.
    target = streaming.target
    identity.write_marker(target.file_io, target.path, "stream", last_identifier=1, last_snapshot=2, scan_from=3)
    other = Writer(table_path, user="batch")
    for _ in range(3):
        other.commit()
    maintenance.expire_snapshots(table_path, limit=None)
    assert snapshots(table_path)[0].id > 3  # snapshot 3 is gone
    assert PaimonTarget(table_path).last_committed("stream") == 2


# -- crash safety ----------------------------------------------------------------
CHILD = textwrap.dedent("""
    import sys
    from lakesink.paimon import maintenance
    maintenance.expire_snapshots(sys.argv[1], limit=None)
""")


@pytest.mark.parametrize("point", ["expire-planned", "expire-snapshot-deleted@2", "expire-file-deleted@3"])
def test_expiry_killed_half_way_leaves_a_readable_table_and_the_next_run_finishes(table_path, tmp_path, point):
    writer = Writer(table_path, {"snapshot.num-retained.min": "2", "snapshot.num-retained.max": "2",
                                 "manifest.merge-min-count": "3"})
    live = []
    for i in range(10):
        ids, _ = writer.commit(overwrite=Overwrite() if i == 4 else None)
        live = ids if i == 4 else live + ids
    env = dict(os.environ, LAKESINK_CRASH_AT=point, LAKESINK_CRASH_COUNTER=str(tmp_path / "hits"))
    child = subprocess.run([sys.executable, "-c", CHILD, table_path], env=env, start_new_session=True,
                           capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr.decode()[-2000:]
    assert ids_of(table_path) == sorted(live)
    for snapshot in snapshots(table_path):
        read_table(table_path, snapshot.id)  # every snapshot still listed is whole
    maintenance.expire_snapshots(table_path, limit=None)
    assert not os.path.exists(f"{table_path}/_lakesink/expiry.json")
    assert [s.id for s in snapshots(table_path)] == [9, 10]
    assert ids_of(table_path) == sorted(live)
    assert leftover_files(table_path) == set()
    assert manifest_files_on_disk(table_path) == referenced_metadata(table_path)


# -- after commit, in the background -------------------------------------------
def test_a_snapshot_expired_while_a_commit_reads_it_counts_as_gone(table_path, monkeypatch):
    """Expiry deletes a snapshot between pypaimon's existence check and its read (the race that
    failed a commit beside its own background maintenance): it is not found, nothing raises."""
    writer = Writer(table_path)
    for _ in range(3):
        writer.commit()
    table = maintenance.open_table(table_path)
    read = table.file_io.read_file_utf8

    def expired_meanwhile(path):
        if path.endswith("/snapshot/snapshot-1") and os.path.exists(path):
            os.remove(path)  # as expiry would, after the check saw the file
        return read(path)
    monkeypatch.setattr(table.file_io, "read_file_utf8", expired_meanwhile)
    assert table.snapshot_manager().get_snapshot_by_id(1) is None
    assert table.snapshot_manager().try_get_earliest_snapshot().id == 2
    assert identity.last_committed(table, "writer") == 2


def test_maintenance_runs_after_commits_in_the_background_and_bounds_the_snapshots(table_path):
    writer = Writer(table_path, {"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "4"},
                    background=True)
    expected = []
    for _ in range(25):
        expected += writer.commit()[0]
    maintenance.maintenance_for(table_path).wait(30)
    writer.commit()  # the last run may have started before the last commits
    maintenance.maintenance_for(table_path).wait(30)
    assert len(snapshots(table_path)) <= 5
    assert ids_of(table_path) == expected + [expected[-1] + 1]


def test_a_failed_background_run_is_raised_by_the_next_commit_once(table_path):
    writer = Writer(table_path, {"snapshot.num-retained.max": "lots"}, background=True)
    writer.commit()
    maintenance.maintenance_for(table_path).wait(30)
    with pytest.raises(MaintenanceError, match="snapshot.num-retained.max"):
        writer.target.commit("writer", 99, [])
    assert ids_of(table_path) == [0]


# -- partitions, tags, consumers -----------------------------------------------
def test_partition_expiry_drops_partitions_older_than_the_expiration_time(table_path):
    writer = Writer(table_path, {"partition.expiration-time": "7 d", "partition.timestamp-formatter": "yyyy-MM-dd"},
                    partition=["dt"])
    old, _ = writer.commit(dt_value="2024-01-01")
    recent, _ = writer.commit(dt_value="2024-03-01")
    dropped = maintenance.expire_partitions(maintenance.open_table(table_path), now=dt.datetime(2024, 3, 5))
    assert dropped == [{"dt": "2024-01-01"}]
    assert ids_of(table_path) == recent
    assert snapshots(table_path)[-1].commit_kind == "OVERWRITE"
    assert old[0] not in ids_of(table_path)


def test_daily_tags_are_created_after_each_day_and_only_the_newest_are_kept(table_path):
    writer = Writer(table_path, {"tag.automatic-creation": "process-time", "tag.creation-period": "daily",
                                 "tag.num-retained-max": "2"})
    for day in (2, 3, 4, 5):
        writer.commit()
        maintenance.create_automatic_tags(maintenance.open_table(table_path), now=dt.datetime(2024, 1, day, 0, 5))
    tags = maintenance.list_tags(maintenance.open_table(table_path))
    assert sorted(tags) == ["2024-01-03", "2024-01-04"]
    assert tags["2024-01-04"].id == 4


def test_consumers_unused_for_longer_than_the_expiration_time_are_removed(table_path):
    writer = Writer(table_path, {"consumer.expiration-time": "1 h"})
    writer.commit()
    os.makedirs(f"{table_path}/consumer")
    for name in ("stale", "active"):
        with open(f"{table_path}/consumer/consumer-{name}", "w") as out:
            json.dump({"nextSnapshot": 1}, out)
    old = time.time() - 7200
    os.utime(f"{table_path}/consumer/consumer-stale", (old, old))
    maintenance.expire_consumers(maintenance.open_table(table_path))
    assert os.listdir(f"{table_path}/consumer") == ["consumer-active"]


# -- orphans, history, rollback --------------------------------------------------
def test_orphan_removal_lists_in_a_dry_run_and_deletes_only_old_unreferenced_files(table_path):
    writer = Writer(table_path)
    expected = writer.commit()[0] + writer.commit()[0]
    bucket = next(os.path.join(r, d) for r, ds, _ in os.walk(table_path) for d in ds if d.startswith("bucket-"))
    stale = [f"{bucket}/data-orphan.parquet", f"{table_path}/manifest/manifest-orphan-0"]
    os.makedirs(f"{table_path}/_lakesink/staging/dead-job")
    stale_staging = f"{table_path}/_lakesink/staging/dead-job"
    fresh = f"{bucket}/data-in-flight.parquet"
    old = time.time() - 3 * 86400
    for path in stale + [fresh, f"{stale_staging}/part-0.parquet"]:
        with open(path, "wb") as out:
            out.write(b"x")
    for path in stale + [f"{stale_staging}/part-0.parquet", stale_staging]:
        os.utime(path, (old, old))

    listed = maintenance.remove_orphans(table_path, dry_run=True)
    assert sorted(listed) == sorted(stale + [stale_staging])
    assert all(os.path.exists(p) for p in listed)
    maintenance.remove_orphans(table_path)
    assert not any(os.path.exists(p) for p in listed)
    assert os.path.exists(fresh)  # younger than the safety age: may belong to a commit in flight
    assert ids_of(table_path) == expected
    assert maintenance.verify(table_path) == []


def test_history_has_one_row_per_retained_snapshot_with_commit_metrics(table_path):
    writer = Writer(table_path)
    writer.commit(rows=3)
    writer.commit(rows=2, overwrite=Overwrite())
    history = maintenance.history(table_path)
    assert history.num_rows == 2
    rows = history.to_pylist()
    assert [r["commit_kind"] for r in rows] == ["APPEND", "OVERWRITE"]
    assert [r["rows_added"] for r in rows] == [3, 2]
    assert [r["files_added"] for r in rows] == [1, 1]
    assert all(r["commit_user"] == "writer" and r["bytes_added"] > 0 and r["commit_duration_ms"] >= 0
               and r["attempts"] == 1 for r in rows)
    assert [r["commit_identifier"] for r in rows] == [0, 1]


def test_verify_reports_a_missing_and_a_resized_data_file(table_path):
    writer = Writer(table_path)
    writer.commit()
    writer.commit()
    paths = maintenance.files(table_path).column("file").to_pylist()
    os.remove(paths[0])
    with open(paths[1], "ab") as out:
        out.write(b"junk")
    problems = maintenance.verify(table_path)
    assert len(problems) == 2
    assert any("missing" in p for p in problems) and any("bytes" in p for p in problems)


def test_rollback_moves_the_commit_users_marker_back_so_removed_commits_are_not_taken_as_replays(table_path):
    writer = Writer(table_path)
    for _ in range(4):
        writer.commit()
    maintenance.rollback(table_path, 2)
    assert ids_of(table_path) == [0, 1]
    assert PaimonTarget(table_path).last_committed("writer") == 1
