"""What Spark keeps in a streaming query's checkpoint that lakesink reads."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable

from .. import storage


def query_id_of(checkpoint: str, options: dict | None = None) -> str | None:
    """Spark keeps `{"id": <query id>}` in `<checkpoint>/metadata`, stable across restarts."""
    filesystem, root = storage.arrow_fs(checkpoint, options)
    try:
        with filesystem.open_input_stream(f"{root.rstrip('/')}/metadata") as src:
            first = src.read().decode().splitlines()[0]
        return json.loads(first).get("id")
    except (FileNotFoundError, IndexError, ValueError, OSError):
        return None


def query_id(checkpoint: str | None, options: dict | None = None) -> Callable[[], str | None]:
    """The query id of `checkpoint` when asked (Spark writes it when the query starts)."""
    return lambda: query_id_of(checkpoint, options) if checkpoint else None


def await_recorded(checkpoint: str, batch_id: int, timeout: float = 2.0,
                   cancel: threading.Event | None = None) -> bool:
    """Wait (at most `timeout`) until Spark has recorded micro-batch `batch_id` in the query's
    commit log (`<checkpoint>/commits/<batch>`, written after the sink's commit returned); from
    then the query idles until its next trigger. Only local checkpoints that have a commit log:
    polling an object store would cost more than waiting saves. True once it is recorded;
    `cancel` set: stop waiting."""
    local = storage.local_path(checkpoint)
    log_dir = os.path.join(local, "commits") if local is not None else None
    if log_dir is None or not os.path.isdir(log_dir):
        return False
    recorded = os.path.join(log_dir, str(batch_id))
    deadline = time.monotonic() + timeout
    cancel = cancel or threading.Event()
    while not os.path.exists(recorded) and time.monotonic() < deadline and not cancel.wait(0.005):
        pass
    return os.path.exists(recorded)


# Spark's bookkeeping after a batch's commit-log write (progress, listener events, old log
# entries purged): ~50 ms on 2 cores, before the query idles until its next trigger.
BATCH_END_SECONDS = 0.1


def await_batch_end(checkpoint: str, batch_id: int, cancel: threading.Event | None = None,
                    timeout: float = 2.0) -> None:
    """Wait until micro-batch `batch_id` is over: recorded in the commit log (`await_recorded`,
    at most `timeout`), then Spark's end of the batch. Work started here (a compaction round)
    runs while the query idles instead of beside Spark: measured on 2 cores, a round started
    as the commit returned made `commitOffsets` ~40 ms longer, one started as the commit log
    appeared still ~25 ms. `cancel` set: stop waiting (someone waits for that work)."""
    cancel = cancel or threading.Event()
    if await_recorded(checkpoint, batch_id, timeout, cancel):
        cancel.wait(BATCH_END_SECONDS)
