"""What a commit costs on S3, in requests, and what the store's faults do to it.

The S3 server (moto, tests/s3server.py) sits behind a counting, fault-injecting proxy
(tests/s3proxy.py); the driver's commit of N files (written and described before, as
tasks do: staged, or in place as format("paimon") writes them on object stores) is
counted by request kind, and the store's faults (503 SlowDown, a lost answer after a
PUT that landed) are injected into it. Every table is read back with pypaimon.
"""

from __future__ import annotations

import pytest

from ..s3proxy import S3Proxy, proxied_s3
from ..staged import SCHEMA, commit, new_target, read_back, snapshot_list, stage

BUCKET = "lakesink-requests"


@pytest.fixture(scope="module")
def s3():
    with proxied_s3(BUCKET) as both:
        yield both


@pytest.fixture()
def table(s3, request):
    server, proxy = s3
    proxy.reset()
    options = proxy.fs_options(server)
    return f"s3://{BUCKET}/{request.node.name}/db.db/t", options, proxy


def _commit_counts(path, options, proxy, files: int):
    target = new_target(path, options)
    commit(target, "setup", 1, stage(target, [0], "a", "setup"))  # the table exists; its first snapshot
    staged = [f for i in range(files) for f in stage(target, [i + 1], "a", "w")]
    proxy.reset()
    commit(target, "counted", 1, staged)
    counts = proxy.counts()
    assert read_back(path, options).num_rows == files + 1
    return counts


def test_the_metadata_writes_of_a_commit_do_not_grow_with_its_files(s3, request):
    server, proxy = s3
    options = proxy.fs_options(server)
    small = _commit_counts(f"s3://{BUCKET}/{request.node.name}-5/db.db/t", options, proxy, 5)
    large = _commit_counts(f"s3://{BUCKET}/{request.node.name}-20/db.db/t", options, proxy, 20)
    print(f"\nrequests per commit of 5 files: {dict(small)}; of 20 files: {dict(large)}")
    # Manifests, manifest lists, snapshot, hint, and the reads around them: as many for 20 files
    # as for 5. Per staged file (write.in-place=false; files written in place are counted below):
    # a COPY, a DELETE, and the empty directory marker pyarrow's S3 file system puts back.
    for kind in ("PUT", "POST", "GET", "HEAD", "LIST"):
        assert large[kind] == small[kind], (kind, small, large)
    assert large["COPY"] - small["COPY"] == large["DELETE"] - small["DELETE"] == 15


def test_throttled_puts_are_retried_and_the_commit_lands_once(table):
    path, options, proxy = table
    target = new_target(path, options)
    commit(target, "w", 1, stage(target, [1, 2], "a", "w"))
    staged = stage(target, [3, 4], "a", "w")
    proxy.fail("PUT", "/manifest/", times=2)        # SlowDown on writing the commit's manifests
    proxy.fail("PUT", "/snapshot/snapshot-", times=1)  # and on publishing the snapshot
    report = commit(target, "w", 2, staged)
    assert proxy.faults_left() == 0, "the faults were not reached"
    assert report.snapshot_id == 2
    assert [s.id for s in snapshot_list(path, options)] == [1, 2]
    assert sorted(read_back(path, options).column("id").to_pylist()) == [1, 2, 3, 4]


def test_a_snapshot_put_whose_answer_was_lost_is_recognised_as_this_commit(table):
    """The conditional PUT landed, its answer did not: the client retries, the store says the
    snapshot exists (412), and the commit must see that the snapshot is its own, not commit again."""
    path, options, proxy = table
    target = new_target(path, options)
    commit(target, "w", 1, stage(target, [1, 2], "a", "w"))
    staged = stage(target, [3, 4], "a", "w")
    proxy.drop_answer("PUT", "/snapshot/snapshot-2")
    report = commit(target, "w", 2, staged)
    assert proxy.faults_left() == 0, "the fault was not reached"
    snapshots = snapshot_list(path, options)
    assert [(s.id, s.commit_user, s.commit_identifier) for s in snapshots] == [(1, "w", 1), (2, "w", 2)]
    assert report.snapshot_id == 2
    assert sorted(read_back(path, options).column("id").to_pylist()) == [1, 2, 3, 4]


# -- data files written in place (write.in-place, the default on object stores) ----------------
# What format("paimon") does, minus Spark: the driver plans the job (BatchWrite), tasks write
# with the tasks' own writer (StagingWriter), the driver commits; the commit's requests counted.

def _in_place_job(path: str, options: dict, in_place: bool = True):
    from lakesink.options import WriteOptions
    from lakesink.paimon.write.batch import BatchWrite
    from lakesink.spark.tasks import mark_job_staging
    opts = WriteOptions.parse({**options, "partition": "part", "maintenance.enabled": "false",
                               "write.in-place": str(in_place).lower()})
    job = BatchWrite.plan(path, SCHEMA, opts, "append", "test")
    mark_job_staging(job.target.file_io, job.staging_dir)
    return job


def _attempt(job, attempt: int, ids, part: str = "a") -> list:
    """One task attempt: a file per id (the target file size is 1 byte), in partition `part`."""
    import pyarrow as pa

    from lakesink.paimon.commit.intents import planned_path_factory
    from lakesink.spark.tasks import StagingWriter, TaskSpec
    spec = TaskSpec(job.staging_dir, job.layout, target_file_size=1, fs_options=job.target.fs_options,
                    create_dir=False, paths=planned_path_factory(job.target) if job.in_place else None)
    writer = StagingWriter(spec, f"part00000-attempt{attempt}")
    for i in ids:
        writer.write(pa.table({"id": [i], "part": [part], "writer": [f"attempt{attempt}"]}, schema=SCHEMA))
    return writer.finish()


def _data_files(path: str, options: dict) -> set[str]:
    from lakesink import storage
    return {e.path.rsplit("/", 1)[-1] for e in storage.list_dir(path, options, recursive=True)
            if e.path.endswith(".parquet")}


def _referenced(path: str, options: dict) -> set[str]:
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(path, options)
    builder = table.new_read_builder()
    return {f.file_name for split in builder.new_scan().plan().splits() for f in split.files}


def _job_counts(path: str, options: dict, proxy: S3Proxy, files: int, in_place: bool):
    setup = _in_place_job(path, options, in_place)
    setup.commit(_attempt(setup, 0, [-1]))  # the table exists; its first snapshot
    job = _in_place_job(path, options, in_place)
    proxy.reset()
    written = _attempt(job, 0, range(files))
    tasks = proxy.counts()
    proxy.reset()
    job.commit(written)
    counts = proxy.counts()
    assert read_back(path, options).num_rows == files + 1
    assert _data_files(path, options) == _referenced(path, options)
    return tasks, counts


def test_a_commit_of_files_written_in_place_copies_none_and_costs_as_much_for_20_files_as_for_5(s3, request):
    server, proxy = s3
    options = proxy.fs_options(server)
    measured = {}
    for mode in ("in-place", "staged"):
        for files in (5, 20):
            path = f"s3://{BUCKET}/{request.node.name[:40]}-{mode}-{files}/db.db/t"
            measured[mode, files] = _job_counts(path, options, proxy, files, mode == "in-place")
    for (mode, files), (tasks, commit) in measured.items():
        print(f"\n{mode}, {files} files: task requests {dict(sorted(tasks.items()))}; "
              f"commit requests {dict(sorted(commit.items()))}")
    small, large = measured["in-place", 5][1], measured["in-place", 20][1]
    assert large["COPY"] == small["COPY"] == 0, (small, large)
    for kind in set(small) | set(large):
        assert large[kind] == small[kind], (kind, small, large)
    # Staged files (write.in-place=false) are each copied into the table by the commit.
    assert measured["staged", 20][1]["COPY"] - measured["staged", 5][1]["COPY"] == 15


def test_files_a_losing_attempt_wrote_in_place_are_removed_when_the_job_commits(table):
    path, options, proxy = table
    job = _in_place_job(path, options)
    winner = _attempt(job, 0, [1, 2, 3])
    loser = _attempt(job, 1, [1, 2, 3])  # a speculative copy: Spark never reports it
    assert all(f.staged_path is None for f in winner + loser)
    assert len(_data_files(path, options)) == 6
    report = job.commit(winner)
    assert report.files_added == 3
    assert sorted(read_back(path, options).column("id").to_pylist()) == [1, 2, 3]
    assert _data_files(path, options) == {f.meta.file_name for f in winner} == _referenced(path, options)
    from lakesink import storage
    assert storage.list_dir(job.staging_dir, options, recursive=True) == []


def test_an_aborted_job_leaves_none_of_the_files_its_attempts_wrote_in_place(table):
    path, options, proxy = table
    job = _in_place_job(path, options)
    reported = _attempt(job, 0, [1, 2])
    _attempt(job, 1, [3])  # a failed attempt: its message reaches neither commit nor abort
    job.abort(reported)
    assert _data_files(path, options) == set()
    from lakesink import storage
    assert storage.list_dir(f"{path}/_lakesink/staging", options, recursive=True) == []


def test_clean_staging_removes_what_killed_drivers_left_in_place_and_keeps_every_committed_file(table):
    """Job A committed, then its driver died before removing what a losing attempt wrote; job B's
    driver died before committing. clean_staging reads their intents: A's committed files stay."""
    import datetime as dt

    from lakesink.paimon.maintenance import clean_staging
    from lakesink.protocol import Committer
    path, options, proxy = table
    a = _in_place_job(path, options)
    committed = _attempt(a, 0, [1, 2])
    _attempt(a, 1, [1, 2])
    Committer(a.target, a.commit_user).commit(a.identifier, committed)  # no sweep: the driver died here
    b = _in_place_job(path, options)
    _attempt(b, 0, [3, 4])
    assert len(_data_files(path, options)) == 6

    entries = clean_staging(path, older_than=dt.timedelta(0), fs_options=options)

    assert sorted(e.kind for e in entries if e.remove) == ["batch-job", "batch-job"]
    assert _data_files(path, options) == {f.meta.file_name for f in committed} == _referenced(path, options)
    assert sorted(read_back(path, options).column("id").to_pylist()) == [1, 2]


def test_throttled_data_and_intent_puts_of_tasks_are_retried_and_the_job_lands_once(table):
    path, options, proxy = table
    job = _in_place_job(path, options)
    proxy.fail("PUT", "/intents/", times=2)        # SlowDown on the attempt's intent
    proxy.fail("PUT", "/bucket-0/data-", times=2)  # and on its data files
    written = _attempt(job, 0, [1, 2, 3])
    assert proxy.faults_left() == 0, "the faults were not reached"
    job.commit(written)
    assert [s.id for s in snapshot_list(path, options)] == [1]
    assert sorted(read_back(path, options).column("id").to_pylist()) == [1, 2, 3]
    assert _data_files(path, options) == _referenced(path, options)
