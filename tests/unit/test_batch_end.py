"""`spark.checkpoint.await_batch_end`: where a compaction round waits for Spark to finish a
micro-batch (its commit-log entry, then Spark's end of the batch), so the round runs while the
query idles. Without Spark: the commit log is a directory of files, as Spark writes it."""

from __future__ import annotations

import threading
import time

from lakesink.spark.checkpoint import BATCH_END_SECONDS, await_batch_end


def test_it_returns_once_the_batch_is_recorded_and_spark_is_done_with_it(tmp_path):
    (tmp_path / "commits").mkdir()
    recorded_at = []

    def spark_records_batch_7():
        time.sleep(0.3)
        (tmp_path / "commits" / "7").write_text("v1\n{}")
        recorded_at.append(time.monotonic())

    threading.Thread(target=spark_records_batch_7).start()
    await_batch_end(str(tmp_path), 7, timeout=5)
    assert recorded_at and time.monotonic() - recorded_at[0] >= BATCH_END_SECONDS * 0.9


def test_a_batch_never_recorded_is_waited_for_at_most_the_timeout(tmp_path):
    (tmp_path / "commits").mkdir()
    started = time.monotonic()
    await_batch_end(str(tmp_path), 3, timeout=0.2)
    assert 0.2 <= time.monotonic() - started < 0.2 + BATCH_END_SECONDS  # no end-of-batch wait: not recorded


def test_it_stops_waiting_when_someone_waits_for_the_work_after_it(tmp_path):
    """A stopping query's last batch may never be recorded: `await_commits` cancels the wait."""
    (tmp_path / "commits").mkdir()
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    await_batch_end(str(tmp_path), 9, cancel, timeout=5)
    assert time.monotonic() - started < 1


def test_without_a_local_commit_log_it_does_not_wait(tmp_path):
    started = time.monotonic()
    await_batch_end(str(tmp_path / "no-such-checkpoint"), 1, timeout=5)
    await_batch_end("s3://bucket/chk", 1, timeout=5)
    assert time.monotonic() - started < 0.5
