"""An in-memory `CommitTarget` with fault-injection settings, for protocol tests without Spark or Paimon.

A committable is a `FakeFile`: a name that is either in staging or placed at its
table path. The "disk" is a set of paths; a snapshot lists the files it made
visible, tagged with (commit user, identifier), like Paimon's snapshots.

Faults (set the attribute, it applies to the next commits until reset):

* `fail_before_landing`: the commit raises an ordinary error before anything lands;
* `fail_definitely`: the commit raises `CommitFailedError` itself (target knows it did not land);
* `fail_after_landing`: the snapshot lands, then the commit raises ("landed but reported failed");
* `check_fails`: `last_committed` raises (the outcome cannot be checked) while set;
* `check_fails_once_committing`: `check_fails` turns on when a commit starts, so the
  committer's pre-commit check works but its "did it land?" check does not;
* `gate`: an Event each commit waits for first (holds a background commit back).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from lakesink.errors import CommitFailedError
from lakesink.protocol import CommitReport, CommitTarget, Overwrite


@dataclass(frozen=True)
class FakeFile:
    name: str

    @property
    def staged_path(self) -> str:
        return f"staging/{self.name}"

    @property
    def table_path(self) -> str:
        return f"table/{self.name}"


@dataclass
class FakeSnapshot:
    id: int
    commit_user: str
    identifier: int
    files: tuple[str, ...]
    overwrite: Overwrite | None = None


@dataclass
class FakeTarget(CommitTarget[FakeFile]):
    disk: set[str] = field(default_factory=set)
    snapshots: list[FakeSnapshot] = field(default_factory=list)
    fail_before_landing: bool = False
    fail_definitely: bool = False
    fail_after_landing: bool = False
    check_fails: bool = False
    check_fails_once_committing: bool = False
    gate: threading.Event | None = None
    commit_calls: int = 0

    # -- helpers for tests ---------------------------------------------------
    def stage(self, *names: str) -> list[FakeFile]:
        files = [FakeFile(n) for n in names]
        self.disk.update(f.staged_path for f in files)
        return files

    def visible_files(self) -> list[str]:
        """Every file name of every snapshot, duplicates kept (a double commit shows twice)."""
        return [name for s in self.snapshots for name in s.files]

    def identities(self) -> list[tuple[str, int]]:
        return [(s.commit_user, s.identifier) for s in self.snapshots]

    # -- CommitTarget --------------------------------------------------------
    def last_committed(self, commit_user: str) -> int | None:
        if self.check_fails:
            raise ConnectionError("metadata store unreachable")
        mine = [s.identifier for s in self.snapshots if s.commit_user == commit_user]
        return max(mine) if mine else None

    def commit(self, commit_user: str, identifier: int, committables: Sequence[FakeFile],
               overwrite: Overwrite | None = None,
               properties: dict[str, str] | None = None) -> CommitReport:
        if self.gate is not None:
            assert self.gate.wait(10), "test never opened the gate"
        self.commit_calls += 1
        if self.check_fails_once_committing:
            self.check_fails = True
        if self.fail_definitely:
            raise CommitFailedError("fake: rejected before landing")
        for f in committables:  # place, as the Paimon target does before publishing
            if f.staged_path in self.disk:
                self.disk.discard(f.staged_path)
                self.disk.add(f.table_path)
            elif f.table_path not in self.disk:
                raise FileNotFoundError(f.staged_path)
        if self.fail_before_landing:
            raise OSError("fake: storage error before the snapshot was published")
        snapshot = FakeSnapshot(len(self.snapshots) + 1, commit_user, identifier,
                                tuple(f.name for f in committables), overwrite)
        self.snapshots.append(snapshot)
        if self.fail_after_landing:
            raise TimeoutError("fake: snapshot published but the reply was lost")
        return CommitReport(commit_user, identifier, snapshot_id=snapshot.id,
                            files_added=len(committables))

    def discard(self, committables: Sequence[FakeFile], include_placed: bool = True) -> int:
        referenced = set(self.visible_files())
        removed = 0
        for f in committables:
            paths = [f.staged_path] + ([f.table_path] if include_placed else [])
            for p in paths:
                if p in self.disk:
                    assert not (p == f.table_path and f.name in referenced), \
                        f"protocol deleted {p}, which a snapshot references"
                    self.disk.discard(p)
                    removed += 1
        return removed

    def missing_files(self, committables: Sequence[FakeFile]) -> list[str]:
        return [f.staged_path for f in committables
                if f.staged_path not in self.disk and f.table_path not in self.disk]

    def encode(self, committable: FakeFile) -> dict:
        return {"name": committable.name}

    def decode(self, data: dict) -> FakeFile:
        return FakeFile(data["name"])
