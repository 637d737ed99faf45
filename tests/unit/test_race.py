"""N processes commit to one table at the same moments: no commit is ever lost.

Each of WRITERS spawned processes commits ROUNDS times through lakesink's
commit core (PaimonTarget + Committer, StagedFile committables of small
Parquet files); a barrier lines all of them up before every commit, so every
round is a race for the same snapshot id. Afterwards every committed row is
in the table exactly once (read back with pypaimon) and there is one snapshot
per successful commit. On local disk (hard-link publication) and on an
S3-compatible server (conditional PUT).

`python -m tests.unit.test_race` runs the same harness and also pypaimon's
own publication (check, then rename) for comparison: that one loses commits.

The harness also races tables resolved by name through a JDBC catalog whose
commit lock guards publication (tests/catalog/test_catalog_lock.py): there
the storage's atomic step is replaced by a deliberately non-atomic one
(`racy`: check, pause, overwrite), so that only the catalog lock keeps
commits from being lost.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import uuid
from dataclasses import dataclass, field

import pytest

from lakesink.paimon.table import tables

from ..s3server import S3Server
from ..staged import PARTITION_KEYS, SCHEMA, commit, new_target, read_back, snapshot_list, stage

WRITERS = 6
ROUNDS = 6      # local disk
S3_ROUNDS = 3   # the S3 server is one more process on the same 2 cores
BARRIER_TIMEOUT = 120


@dataclass
class Tally:
    attempted: int = 0   # commits started
    succeeded: int = 0   # commits that returned a report with a snapshot
    failed: int = 0      # commits that raised
    retried: int = 0     # publications repeated after a lost race
    lost: int = 0        # returned without error, but no snapshot / rows of theirs in the table
    duplicated: int = 0  # rows in the table more than once
    snapshots: int = 0
    seconds: float = 0.0
    writers: int = WRITERS
    errors: list = field(default_factory=list)  # what failed commits raised

    def line(self, name: str) -> str:
        return (f"{name}: {self.writers} writers: attempted={self.attempted} "
                f"succeeded={self.succeeded} failed={self.failed} retried={self.retried} "
                f"lost={self.lost} duplicated={self.duplicated} snapshots={self.snapshots} "
                f"({self.seconds:.1f} s)")


RACY_PAUSE = 0.02  # seconds between the check and the write of the `racy` publication


def _racy_create(path: str, text: str, pause: float = RACY_PAUSE) -> bool:
    """A storage without an atomic create: check that `path` is absent, pause, then write it,
    replacing whatever another writer put there meanwhile. Only a lock around it keeps two
    writers of one snapshot id apart."""
    from lakesink import storage
    final = storage.local_path(path)
    if os.path.exists(final):
        return False
    time.sleep(pause)  # the window another writer's check falls into
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = f"{final}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, final)
    return True


def _writer(path, fs_options, index, rounds, barrier, results, publication, racy_pause):
    """One racing process: stage a file, wait for everyone, commit; report per round."""
    import logging
    logging.getLogger("pypaimon").setLevel(logging.ERROR)  # each lost race logs a warning
    if publication == "racy":
        # The storage's atomic step switched off: lakesink's publication (and the catalog lock
        # around it, if the table has one) runs as before, with a non-atomic create at its heart.
        import lakesink.paimon.table.publish as publish_module
        publish_module._link_create = lambda path, text: _racy_create(path, text, racy_pause)
    if publication == "pypaimon-rename":
        # The comparison only: pypaimon's own check-then-rename publication.
        from pypaimon.snapshot.renaming_snapshot_commit import RenamingSnapshotCommit

        import lakesink.paimon.commit.file_store as commit_module
        commit_module.atomic_snapshot_commit = lambda table: RenamingSnapshotCommit(table.snapshot_manager())
    target = new_target(path, fs_options)
    user = f"racer-{index}"
    for round_ in range(1, rounds + 1):
        ids = [index * 100_000 + round_ * 10 + k for k in range(3)]
        files = stage(target, ids, f"p{round_ % 2}", user)
        barrier.wait(BARRIER_TIMEOUT)
        try:
            report = commit(target, user, round_, files)
            results.put((index, round_, ids, report.attempts, report.snapshot_id is not None, None))
        except Exception as exc:  # counted as failed; the table is checked below
            results.put((index, round_, ids, 0, False, repr(exc)))


def race(path: str, fs_options: dict | None = None, publication: str = "lakesink",
         writers: int = WRITERS, rounds: int = ROUNDS, create: bool = True,
         racy_pause: float = RACY_PAUSE) -> Tally:
    if create:
        tables.create_table(path, SCHEMA, PARTITION_KEYS, [], {"bucket": "-1"}, fs_options)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(writers)
    results = ctx.Queue()
    started = time.perf_counter()
    procs = [ctx.Process(target=_writer, args=(path, fs_options, i, rounds, barrier, results, publication,
                                                            racy_pause))
             for i in range(writers)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=BARRIER_TIMEOUT) for _ in range(writers * rounds)]
    for p in procs:
        p.join(30)
    tally = Tally(attempted=len(outcomes), seconds=time.perf_counter() - started, writers=writers)
    expected = []
    for _, _, ids, attempts, ok, error in outcomes:
        if ok:
            tally.succeeded += 1
            tally.retried += attempts - 1
            expected.extend(ids)
        elif error is None:
            tally.lost += 1  # pypaimon said OK; lakesink's check found no snapshot of it
        else:
            tally.failed += 1
            tally.errors.append(error)
    in_table = read_back(path, fs_options).column("id").to_pylist()
    present = set(in_table)
    tally.lost += sum(1 for *_, ids, _, ok, _ in outcomes if ok and not set(ids) <= present)
    tally.duplicated = len(in_table) - len(present)
    tally.snapshots = len(snapshot_list(path, fs_options))
    return tally, sorted(expected), sorted(in_table)


def _check(tally: Tally, expected, in_table, rounds: int, writers: int = WRITERS) -> None:
    print("\n" + tally.line("race"))
    assert tally.failed == 0, tally.errors[:3]
    assert tally.lost == 0 and tally.duplicated == 0
    assert in_table == expected  # every committed row exactly once, nothing else
    assert tally.snapshots == tally.succeeded == writers * rounds


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        server.create_bucket("lakesink-race")
        yield server


def test_racing_processes_on_local_disk_never_lose_a_commit(tmp_path):
    _check(*race(str(tmp_path / "wh" / "db.db" / "t")), ROUNDS)


# ./dev full: the same race on an S3 store (the default run races on local disk)
@pytest.mark.full
def test_racing_processes_on_an_s3_store_never_lose_a_commit(s3):
    _check(*race("s3://lakesink-race/wh/db.db/t", s3.fs_options(), rounds=S3_ROUNDS), S3_ROUNDS)


def main() -> int:
    """Tallies of lakesink's publication and pypaimon's own, on both storages."""
    import tempfile

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    with tempfile.TemporaryDirectory() as tmp, S3Server() as server:
        server.create_bucket("lakesink-race")
        for publication in ("lakesink", "pypaimon-rename"):
            tally, _, _ = race(f"{tmp}/{publication}/db.db/t", None, publication, rounds=rounds)
            print(tally.line(f"local, {publication}"), flush=True)
            tally, _, _ = race(f"s3://lakesink-race/{publication}/db.db/t", server.fs_options(), publication,
                               rounds=rounds)
            print(tally.line(f"s3, {publication}"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
