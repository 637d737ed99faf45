"""Named points of the commit protocol where the crash harness kills the driver.

Production code calls `reached(name)` at each point; it does nothing unless the
environment asks for a crash there:

    LAKESINK_CRASH_AT=<point>[@<n>]   kill at the n-th time the point is reached (default 1)
    LAKESINK_CRASH_PGID=<pgid>        the process group to kill (default: our own)
    LAKESINK_CRASH_COUNTER=<dir>      where hits are counted across processes
    LAKESINK_FAIL_AT=<point>[@<n>]    raise `InjectedFailure` there instead (a failing commit)

Spark runs commit code in fresh Python processes, so hits are counted in
files, not in memory.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "tasks-done",            # every writer task has finished; nothing committed yet
    "schema-written",        # the table's next schema written (schema evolution); no snapshot yet
    "files-placed",          # staged files moved to their table paths; no snapshot yet
    "before-snapshot",       # snapshot about to be published
    "after-snapshot",        # snapshot published; engine has not recorded the checkpoint
    "accepted",              # committables durably accepted, commit not started (pipelined)
    "during-abort",          # an abort has deleted some files but not all
    "after-aggregate",       # small files rewritten, compact snapshot not yet committed
    "events-held",           # a writer event held by the aggregator's coordinator during a commit
    "mid-rewrite",           # a rewrite of small files has written part of its output
    "after-compact",         # compact snapshot published; coordinator state not yet saved
    "task-staged",           # a JDBC task attempt committed its staging table, has not returned yet
    "catalog-publish",       # CTAS in a JDBC catalog: row inserted, table moved in place, not committed
)


class InjectedFailure(RuntimeError):
    """Raised at a point named by LAKESINK_FAIL_AT (tests of failure handling)."""


def _nth_hit(wanted: str, point: str) -> bool:
    name, _, nth = wanted.partition("@")
    if name != point:
        return False
    counter_dir = os.environ.get("LAKESINK_CRASH_COUNTER")
    hits = 1
    if counter_dir:
        os.makedirs(counter_dir, exist_ok=True)
        # Each hit takes the first free number: atomic across processes and threads without
        # locks, so two hits at once never both see the same count (and skip `@1`).
        while True:
            try:
                os.close(os.open(os.path.join(counter_dir, f"{point}.{hits}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                break
            except FileExistsError:
                hits += 1
    return hits == int(nth or 1)


def reached(point: str) -> None:
    failing = os.environ.get("LAKESINK_FAIL_AT")
    if failing and _nth_hit(failing, point):
        raise InjectedFailure(f"injected failure at {point} (LAKESINK_FAIL_AT={failing})")
    wanted = os.environ.get("LAKESINK_CRASH_AT")
    if not wanted or not _nth_hit(wanted, point):
        return
    pgid = int(os.environ.get("LAKESINK_CRASH_PGID") or os.getpgid(0))
    os.killpg(pgid, signal.SIGKILL)
    # Spark's Python workers may sit in a process group of their own: a worker that
    # reached the point must die with the driver, not finish the commit alone.
    os.kill(os.getpid(), signal.SIGKILL)
