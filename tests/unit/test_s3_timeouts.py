"""Timeouts of the store: a request whose answer comes later than the client waits.

The proxy in front of the S3 test server (tests/s3proxy.py) forwards the request, so
the store does it, and holds the answer longer than the client, told by the storage
options to wait 1 s (`fs.s3.connection.request.timeout`), waits: the client gives up
and retries a request that succeeded. Every commit must land once: a data file or manifest written twice is the
same object; a snapshot PUT that landed is refused on its retry (412) and recognised as
this commit's own; a store that stops answering fails the commit as unknown, and the
same commit run again once the store answers commits nothing twice.
"""

from __future__ import annotations

import threading
import time

import pytest

from ..s3proxy import S3Proxy, proxied_s3
from ..staged import commit, new_target, read_back, snapshot_list, stage
from .test_s3_requests import _attempt, _data_files, _in_place_job, _referenced

BUCKET = "lakesink-timeouts"
TIMEOUTS = {"fs.s3.connection.request.timeout": "1 s"}  # what the clients wait for an answer
DELAY = 4.0  # how long the proxy holds an answer: boto3 (the snapshot PUT) and pyarrow's reads give up after 1-2 s
# pyarrow's request timeout is curl's "slower than 1 byte/s for this long", with the speed averaged over
# the last 5 s: after sending a body, a PUT gives up about 6 s after the timeout (7 s here, measured).
PUT_DELAY = 12.0


@pytest.fixture(scope="module")
def s3():
    with proxied_s3(BUCKET) as both:
        yield both


@pytest.fixture()
def table(s3, request):
    server, proxy = s3
    proxy.reset()
    options = {**server.fs_options(), "fs.s3.endpoint": proxy.endpoint, **TIMEOUTS}
    yield f"s3://{BUCKET}/{request.node.name}/db.db/t", options, proxy
    proxy.reset()


def _sent_twice(proxy: S3Proxy, kind: str, match: str) -> list[str]:
    """Paths of `kind` requests matching `match` that reached the store more than once."""
    paths = [p for k, p in proxy.requests if k == kind and match in p]
    return sorted({p for p in paths if paths.count(p) > 1})


def test_a_data_file_and_a_manifest_put_whose_answers_time_out_are_retried_and_the_job_lands_once(table):
    """pyarrow retries both PUTs (the same object again); the task's data file, written in place,
    and the commit's manifest each land once, and the job commits one snapshot."""
    path, options, proxy = table
    job = _in_place_job(path, options)
    proxy.delay("PUT", "/bucket-0/data-", seconds=PUT_DELAY)  # a task's data file, written in place
    written = _attempt(job, 0, [1, 2, 3])
    proxy.delay("PUT", "/manifest/manifest-", seconds=PUT_DELAY)  # the commit's manifest
    job.commit(written)
    assert proxy.faults_left() == 0, "the faults were not reached"
    assert _sent_twice(proxy, "PUT", "/bucket-0/data-"), "the timed-out data file PUT was not retried"
    assert _sent_twice(proxy, "PUT", "/manifest/manifest-"), "the timed-out manifest PUT was not retried"
    assert [(s.id, s.commit_kind) for s in snapshot_list(path, options)] == [(1, "APPEND")]
    assert sorted(read_back(path, options).column("id").to_pylist()) == [1, 2, 3]
    assert _data_files(path, options) == _referenced(path, options)


def test_a_snapshot_put_that_landed_but_timed_out_is_recognised_as_this_commit(table):
    """The conditional PUT landed; its answer came after the client gave up. The client
    retries, the store refuses (412: the snapshot exists), and the commit must see that the
    snapshot is its own instead of committing again."""
    path, options, proxy = table
    target = new_target(path, options)
    commit(target, "w", 1, stage(target, [1, 2], "a", "w"))
    staged = stage(target, [3, 4], "a", "w")
    proxy.reset()
    proxy.delay("PUT", "/snapshot/snapshot-2", seconds=DELAY)
    report = commit(target, "w", 2, staged)
    assert proxy.faults_left() == 0, "the fault was not reached"
    assert _sent_twice(proxy, "PUT", "/snapshot/snapshot-2"), "the timed-out PUT was not retried"
    assert report.snapshot_id == 2
    assert [(s.id, s.commit_user, s.commit_identifier) for s in snapshot_list(path, options)] == [
        (1, "w", 1), (2, "w", 2)]
    assert sorted(read_back(path, options).column("id").to_pylist()) == [1, 2, 3, 4]


def _unresponsive_after(proxy: S3Proxy, kind: str, match: str, stop: threading.Event) -> threading.Thread:
    """From the first `kind` request matching `match` on, the store does what it is asked but
    answers nothing in time (every request of every kind is held)."""

    def watch():
        while not stop.is_set():
            if any(k == kind and match in p for k, p in list(proxy.requests)):
                for each in ("PUT", "POST", "GET", "HEAD", "LIST", "DELETE", "COPY", "MARKER"):
                    proxy.delay(each, "", seconds=DELAY, times=10_000)
                return
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_store_that_stops_answering_fails_the_commit_as_unknown_and_a_rerun_lands_once(table):
    """The snapshot PUT lands, then the store answers nothing in time: neither the publication's
    retry nor the check whether the commit landed gets an answer. The commit fails as
    `CommitStateUnknownError` (retryable; nothing deleted); run again, with the same commit
    user and identifier, once the store answers, it finds its snapshot and commits nothing."""
    from lakesink.errors import CommitStateUnknownError

    path, options, proxy = table
    options = {**options, "fs.s3.attempts.maximum": "2"}  # give up after 2 tries, not 10
    target = new_target(path, options)
    commit(target, "w", 1, stage(target, [1, 2], "a", "w"))
    staged = stage(target, [3, 4], "a", "w")
    proxy.reset()
    proxy.delay("PUT", "/snapshot/snapshot-2", seconds=DELAY)
    stop = threading.Event()
    watcher = _unresponsive_after(proxy, "PUT", "/snapshot/snapshot-2", stop)
    try:
        with pytest.raises(CommitStateUnknownError) as failed:
            commit(target, "w", 2, staged)
    finally:
        stop.set()
        watcher.join()
    assert failed.value.retryable
    assert "No file was deleted" in str(failed.value)

    proxy.reset()  # the store answers again
    again = commit(target, "w", 2, staged)
    assert again.skipped_replay
    assert [(s.id, s.commit_user, s.commit_identifier) for s in snapshot_list(path, options)] == [
        (1, "w", 1), (2, "w", 2)]
    assert sorted(read_back(path, options).column("id").to_pylist()) == [1, 2, 3, 4]
    assert _data_files(path, options) == _referenced(path, options)


# -- the options reach the clients ---------------------------------------------------------

def _timed_read(path: str, options: dict) -> tuple[float, object]:
    """Read `path` through lakesink's file system: (seconds taken, bytes or the error)."""
    from lakesink import storage
    filesystem, inner = storage.arrow_fs(path, options)
    started = time.monotonic()
    try:
        with filesystem.open_input_stream(inner) as stream:
            result = stream.read()
    except OSError as exc:
        result = exc
    return time.monotonic() - started, result


def test_the_timeout_and_attempts_options_reach_the_file_system(s3, request):
    from lakesink import storage
    server, proxy = s3
    plain = proxy.fs_options(server)
    path = f"s3://{BUCKET}/{request.node.name}/object"
    server.client().put_object(Bucket=BUCKET, Key=path.split("/", 3)[3], Body=b"landed")

    proxy.reset()
    proxy.delay("GET", "/object", seconds=DELAY, times=10)
    elapsed, result = _timed_read(path, plain)  # the library's timeout (60 s) waits for the answer
    assert result == b"landed" and elapsed >= DELAY, (elapsed, result)
    assert proxy.counts("/object")["GET"] == 1

    # Other spellings of the prefix count too (as pypaimon reads its S3 options).
    options = {**plain, "s3.connection.request.timeout": "1 s", "fs.s3a.attempts.maximum": "2",
               "fs.s3.connection.establish.timeout": "500 ms"}
    filesystem, _ = storage.arrow_fs(path, options)
    built = filesystem.__reduce__()[1][0]  # the keywords pyarrow rebuilds it from
    assert (built["request_timeout"], built["connect_timeout"]) == (1.0, 0.5)
    proxy.reset()
    proxy.delay("GET", "/object", seconds=DELAY, times=10)
    elapsed, result = _timed_read(path, options)
    assert isinstance(result, OSError) and "Timeout" in str(result), result
    assert proxy.counts("/object")["GET"] == 2  # 2 attempts, not pypaimon's 10
    assert elapsed < 2 * DELAY, elapsed  # gave up on each before its answer came
    proxy.reset()


def test_the_options_reach_the_snapshot_publication_client(s3, request):
    """The conditional snapshot PUT (boto3) waits and tries as the options say."""
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

    from lakesink.paimon.table.publish import _put_create, s3_client
    server, proxy = s3
    options = {**server.fs_options(), "fs.s3.endpoint": proxy.endpoint,
               "fs.s3.connection.request.timeout": "1 s", "fs.s3.connection.establish.timeout": "500 ms",
               "fs.s3.attempts.maximum": "2"}
    client = s3_client(options)
    assert (client.meta.config.read_timeout, client.meta.config.connect_timeout) == (1.0, 0.5)
    path = f"s3://{BUCKET}/{request.node.name}/snapshot-1"
    proxy.reset()
    proxy.delay("PUT", "/snapshot-1", seconds=DELAY, times=10)
    started = time.monotonic()
    with pytest.raises((ReadTimeoutError, ConnectTimeoutError)):
        _put_create(client, path, "{}")
    assert time.monotonic() - started < 2 * DELAY
    assert proxy.counts("/snapshot-1")["PUT"] == 2  # landed first, then refused; neither answer came
    proxy.reset()


def test_a_bad_timeout_is_an_error_naming_the_option():
    from lakesink import storage
    from lakesink.errors import InvalidOptionError
    with pytest.raises(InvalidOptionError, match="s3.connection.request.timeout"):
        storage.s3_client_options({"s3.connection.request.timeout": "soon"})
    with pytest.raises(InvalidOptionError, match="fs.s3.connection.establish.timeout"):
        storage.s3_client_options({"fs.s3.connection.establish.timeout": "0 s"})
    assert storage.s3_client_options({"fs.s3a.connection.request.timeout": "30s", "s3a.attempts.maximum": "3"}) == {
        storage.S3_REQUEST_TIMEOUT: 30_000, storage.S3_ATTEMPTS: 3}
