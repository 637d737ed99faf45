"""The crash harness: kill a streaming driver, restart it, prove every row landed once.

A `Case` is one table, one checkpoint and one source directory of Parquet files
with known rows. `Case.run` starts `tests.crash.driver` in a child process in a
process group of its own and either lets `protocol.crashpoints` SIGKILL the group
at a named point of the commit protocol (`crash_at="after-snapshot@2"`) or kills
the group itself after a delay (`kill_after=seconds`, counted from the moment the
driver's Spark session is up). `Case.finish` restarts the driver on the same
checkpoint once: it must catch up and exit 0 (a failed restart fails the case).
`Case.check` then reads the table with pypaimon as released, in a process of its
own that never imports lakesink (`tests.unpatched`), and counts duplicates, lost
rows, rows that are not in the source, batches committed twice, and data files no
snapshot references.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers import leftover_files, pypaimon_append, read_table, snapshots
from tests.unpatched import read_unpatched

from .driver import CDC_SCHEMA, MERGE_USER, READY, SOURCE_SCHEMA

REPO = Path(__file__).resolve().parents[2]
DRIVER_TIMEOUT = float(os.environ.get("LAKESINK_CRASH_DRIVER_TIMEOUT", "420"))


class HarnessError(AssertionError):
    """The harness could not do what a case asked (e.g. a crash point was never reached)."""


@dataclass
class Tally:
    cases: int = 0
    kills: int = 0
    restarts: int = 0
    rows_checked: int = 0
    duplicates: int = 0
    lost: int = 0
    foreign: int = 0            # rows in the table that no source file holds
    batches_committed_twice: int = 0
    leftover_files: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for name in ("cases", "kills", "restarts", "rows_checked", "duplicates", "lost", "foreign",
                     "batches_committed_twice", "leftover_files"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems.extend(other.problems)

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.lost or self.foreign or self.batches_committed_twice
                    or self.leftover_files)

    def summary(self) -> str:
        return (f"cases {self.cases}, kills {self.kills}, restarts {self.restarts}, "
                f"rows checked {self.rows_checked}, duplicates {self.duplicates}, lost {self.lost}, "
                f"foreign rows {self.foreign}, batches committed twice {self.batches_committed_twice}, "
                f"leftover files {self.leftover_files}")


@dataclass
class RunResult:
    returncode: int
    killed: bool        # the process group died of SIGKILL (a crash point or our timer)
    seconds: float
    log: Path

    def tail(self, lines: int = 25) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def make_source(directory: Path, files: int = 4, rows_per_file: int = 50,
                empty_files: tuple[int, ...] = (), extra_column: str | None = None) -> pa.Table:
    """Write the source: file k holds ids k*rows..(k+1)*rows-1 (none for `empty_files`);
    with `extra_column`, also that (double) column, holding id / 2."""
    directory.mkdir(parents=True, exist_ok=True)
    first_mtime = time.time() - files - 60
    for k in range(files):
        ids = [] if k in empty_files else list(range(k * rows_per_file, (k + 1) * rows_per_file))
        rows = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"row-{i}" for i in ids],
                         "grp": pa.array([i % 3 for i in ids], pa.int32())}, schema=SOURCE_SCHEMA)
        if extra_column:
            rows = rows.append_column(pa.field(extra_column, pa.float64()), pa.array([i / 2 for i in ids]))
        path = directory / f"part-{k:05d}.parquet"
        pq.write_table(rows, path)
        # Spark's file source takes files in modification-time order: make that file order.
        os.utime(path, (first_mtime + k, first_mtime + k))
    return source_rows(directory)


def make_cdc_source(directory: Path, files: int = 4, keys: int = 60, seed: int = 7) -> pa.Table:
    """A change stream: file 0 inserts every key, later files update, delete and re-insert
    some (at most one change per key and file, so the order of changes is the file order).
    Returns the final state the keyed table must hold (id, name, grp)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    state: dict[int, str] = {}
    first_mtime = time.time() - files - 60
    for k in range(files):
        ids, names, ops = [], [], []
        for key in range(keys):
            if k == 0:
                change = "+I"
            else:
                change = rng.choice(["", "", "+U", "-D"]) if key in state else rng.choice(["", "+I"])
            if not change:
                continue
            name = state.get(key, "") if change == "-D" else f"v{k}-{key}"
            ids.append(key)
            names.append(name)
            ops.append(change)
            if change == "-D":
                del state[key]
            else:
                state[key] = name
        rows = pa.table({"id": pa.array(ids, pa.int64()), "name": names,
                         "grp": pa.array([i % 3 for i in ids], pa.int32()), "op": ops}, schema=CDC_SCHEMA)
        path = directory / f"part-{k:05d}.parquet"
        pq.write_table(rows, path)
        os.utime(path, (first_mtime + k, first_mtime + k))
    ids = sorted(state)
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [state[i] for i in ids],
                     "grp": pa.array([i % 3 for i in ids], pa.int32())}, schema=SOURCE_SCHEMA)


# A keyed aggregation table summing `score` (with `--cdc --extra-column score`): the key is (id, grp).
SUM_OPTIONS = {"merge-engine": "aggregation", "fields.score.aggregate-function": "sum"}


def make_sum_source(directory: Path, files: int = 4, keys: int = 40, seed: int = 11) -> list[dict]:
    """Inserts into a summing table: file k adds a whole-numbered score to about half the
    keys (every key in file 0). Returns {id: sum of score} after each prefix of the files
    (none, first, ...): a batch applied twice or lost leaves sums no prefix has."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    first_mtime = time.time() - files - 60
    sums: dict[int, float] = {}
    prefixes = [dict(sums)]
    for k in range(files):
        ids = sorted(range(keys)) if k == 0 else sorted(rng.sample(range(keys), keys // 2))
        scores = [float(1 + (7 * k + i) % 13) for i in ids]
        rows = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"v{k}-{i}" for i in ids],
                         "grp": pa.array([i % 3 for i in ids], pa.int32()), "op": ["+I"] * len(ids),
                         "score": pa.array(scores, pa.float64())},
                        schema=CDC_SCHEMA.append(pa.field("score", pa.float64())))
        path = directory / f"part-{k:05d}.parquet"
        pq.write_table(rows, path)
        os.utime(path, (first_mtime + k, first_mtime + k))
        for i, score in zip(ids, scores):
            sums[i] = sums.get(i, 0.0) + score
        prefixes.append(dict(sums))
    return prefixes


def sums_of(rows: pa.Table) -> dict:
    return {r["id"]: r["score"] for r in rows.select(["id", "score"]).to_pylist()}


def cdc_prefix_states(directory: Path) -> list[dict]:
    """{id: (name, grp)} after each prefix of the change stream's files (none, first, ...)."""
    state: dict = {}
    out = [dict(state)]
    for path in sorted(directory.glob("*.parquet")):
        for row in pq.read_table(path, schema=CDC_SCHEMA).to_pylist():
            if row["op"] == "-D":
                state.pop(row["id"], None)
            else:
                state[row["id"]] = (row["name"], row["grp"])
        out.append(dict(state))
    return out


def keyed_state(table_path: str) -> dict:
    """{id: (name, grp)} as pypaimon reads the keyed table (merged on read)."""
    if not Path(table_path, "snapshot").exists():
        return {}
    return {r["id"]: (r["name"], r["grp"]) for r in read_table(table_path).select(SOURCE_SCHEMA.names).to_pylist()}


def source_rows(directory: Path) -> pa.Table:
    tables = [pq.read_table(p, schema=SOURCE_SCHEMA) for p in sorted(directory.glob("*.parquet"))]
    return pa.concat_tables(tables) if tables else SOURCE_SCHEMA.empty_table()


def _sorted_rows(table: pa.Table) -> list[tuple]:
    table = table.select(SOURCE_SCHEMA.names)
    return sorted(zip(*(table.column(n).to_pylist() for n in SOURCE_SCHEMA.names)))


class Case:
    def __init__(self, workdir: Path, mode: str, commit: str = "sync", source_table: str | None = None,
                 consumer_id: str | None = None, options: dict | None = None, cdc: bool = False,
                 extra_column: str | None = None, merge: bool = False):
        self.workdir = Path(workdir)
        self.merge = merge  # MERGE each micro-batch in foreachBatch (tests.crash.driver.merge_batch)
        self.cdc = cdc  # a change stream into a keyed table (tests.crash.driver.CDC_SCHEMA)
        self.extra_column = extra_column  # the driver reads the source with this (double) column too
        self.options = dict(options or {})  # extra writer options, e.g. the aggregator
        self.mode, self.commit = mode, commit
        # A Paimon table to stream from instead of the Parquet directory (a chain A -> query -> table).
        self.source_table, self.consumer_id = source_table, consumer_id
        self.source = self.workdir / "source"
        self.table = str(self.workdir / "warehouse" / "db.db" / "t")
        self.checkpoint = str(self.workdir / "checkpoint")
        self.logs = self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.tally = Tally(cases=1)
        self.runs: list[RunResult] = []

    def command(self, fail_first_attempt: float = 0.0, fail_always_partition: int | None = None) -> list[str]:
        source = ["--source-table", self.source_table] if self.source_table else ["--source", str(self.source)]
        if self.consumer_id:
            source += ["--consumer-id", self.consumer_id]
        cmd = [sys.executable, "-m", "tests.crash.driver", "--path", self.table, "--checkpoint",
               self.checkpoint, *source, "--mode", self.mode, "--commit", self.commit]
        if self.cdc:
            cmd.append("--cdc")
        if self.merge:
            cmd.append("--merge")
        for key, value in self.options.items():
            cmd += ["--option", f"{key}={value}"]
        if self.extra_column:
            cmd += ["--extra-column", self.extra_column]
        if fail_first_attempt:
            cmd += ["--fail-first-attempt", str(fail_first_attempt)]
        if fail_always_partition is not None:
            cmd += ["--fail-always-partition", str(fail_always_partition)]
        return cmd

    def run(self, crash_at: str | None = None, kill_after: float | None = None,
            fail_first_attempt: float = 0.0, fail_always_partition: int | None = None,
            timeout: float = DRIVER_TIMEOUT, fail_at: str | None = None) -> RunResult:
        """One driver run; `crash_at` or `kill_after` make it a run that is meant to die;
        `fail_at` makes the protocol raise at that point (LAKESINK_FAIL_AT)."""
        number = len(self.runs) + 1
        log = self.logs / f"run-{number:03d}.log"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LAKESINK_CRASH", "LAKESINK_FAIL"))}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        # The plain interpreter, not the test sessions' preloading one (tests/python-for-spark): a
        # driver that lives for a few micro-batches forks too few workers per daemon to repay it.
        env["PYSPARK_PYTHON"] = sys.executable
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if crash_at or fail_at:
            env["LAKESINK_CRASH_COUNTER"] = str(self.workdir / f"crash-counter-{number:03d}")
        if crash_at:
            env["LAKESINK_CRASH_AT"] = crash_at
        if fail_at:
            env["LAKESINK_FAIL_AT"] = fail_at
        started = time.monotonic()
        with open(log, "wb") as out:
            out.write(f"$ {' '.join(self.command(fail_first_attempt, fail_always_partition))}"
                      f"  # crash_at={crash_at} kill_after={kill_after} fail_at={fail_at}\n".encode())
            out.flush()
            child = subprocess.Popen(self.command(fail_first_attempt, fail_always_partition), cwd=REPO,
                                     env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
            killed_by_us = False
            try:
                if kill_after is not None:
                    killed_by_us = self._kill_later(child, log, kill_after, started + timeout)
                child.wait(timeout=max(1.0, started + timeout - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(child.pid)
                child.wait()
                raise HarnessError(f"driver run {number} of {self.workdir} did not finish in {timeout:.0f} s; "
                                   f"log: {log}") from None
            finally:
                _kill_group(child.pid)  # whatever the dead driver left in its group (its JVM, workers)
        result = RunResult(child.returncode, killed_by_us or child.returncode == -signal.SIGKILL,
                           time.monotonic() - started, log)
        self.runs.append(result)
        if kill_after is not None and not result.killed and result.returncode != 0:
            # Meant to die by our timer only: a run that failed on its own fails the case.
            raise HarnessError(f"driver run {number} failed before its kill (exit {result.returncode}); "
                               f"log {log}:\n{result.tail()}")
        if result.killed:
            self.tally.kills += 1
        if len(self.runs) > 1:
            self.tally.restarts += 1
        return result

    def _kill_later(self, child, log: Path, delay: float, deadline: float) -> bool:
        while child.poll() is None and READY.encode() not in log.read_bytes():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        kill_at = time.monotonic() + delay
        while child.poll() is None and time.monotonic() < kill_at:
            time.sleep(0.05)
        if child.poll() is not None:
            return False  # caught up before the kill: nothing to count
        _kill_group(child.pid)
        return True

    def crash(self, crash_at: str, **kwargs) -> RunResult:
        """A run that must be killed at `crash_at`; raises if the point was never reached."""
        result = self.run(crash_at=crash_at, **kwargs)
        if not result.killed:
            raise HarnessError(f"crash point {crash_at} was not reached (exit {result.returncode}); "
                               f"log {result.log}:\n{result.tail()}")
        return result

    def finish(self, **kwargs) -> RunResult:
        """One restart (no crash) that must catch up and exit 0: a failed restart fails the case,
        never retried into a pass."""
        result = self.run(**kwargs)
        if result.returncode != 0:
            raise HarnessError(f"the restart exited {result.returncode} instead of catching up; "
                               f"log {result.log}:\n{result.tail()}")
        return result

    def commit_user(self) -> str | None:
        import json
        if self.merge:
            return MERGE_USER  # the statements' own identity, not a sink's
        sink = Path(self.checkpoint) / "lakesink" / "sink.json"
        return json.loads(sink.read_text())["commit_user"] if sink.exists() else None

    def check_keyed(self, expected: pa.Table) -> Tally:
        """The keyed table holds exactly `expected`, key for key; no batch twice, no leftovers.

        A key missing is `lost`; a key present that the final state lacks (a delete that
        never landed, or a resurrected row) is `foreign`; a key whose row differs (an
        update lost, or applied out of order) is a problem."""
        tally = self.tally
        actual = read_unpatched(self.table) if Path(self.table, "snapshot").exists() else SOURCE_SCHEMA.empty_table()
        have = {r["id"]: (r["name"], r["grp"]) for r in actual.select(SOURCE_SCHEMA.names).to_pylist()}
        want = {r["id"]: (r["name"], r["grp"]) for r in expected.to_pylist()}
        tally.rows_checked += len(want)
        tally.duplicates += actual.num_rows - len(have)
        tally.lost += sum(1 for k in want if k not in have)
        tally.foreign += sum(1 for k in have if k not in want)
        stale = sorted(k for k in want if k in have and have[k] != want[k])
        if stale:
            tally.problems.append(f"{self.workdir}: {len(stale)} keys hold an old version, e.g. "
                                  f"{[(k, have[k], want[k]) for k in stale[:3]]}")
        self._check_batches_and_files(tally)
        if not tally.exactly_once or stale:
            tally.problems.append(f"{self.workdir}: {tally.summary()}")
        return tally

    def check_sums(self, expected: dict) -> Tally:
        """The summing table holds `expected` ({id: sum}) key for key: each batch counted once."""
        tally = self.tally
        actual = read_unpatched(self.table) if Path(self.table, "snapshot").exists() else None
        have = sums_of(actual) if actual is not None else {}
        tally.rows_checked += len(expected)
        tally.duplicates += (actual.num_rows - len(have)) if actual is not None else 0
        tally.lost += sum(1 for k in expected if k not in have)
        tally.foreign += sum(1 for k in have if k not in expected)
        wrong = sorted(k for k in expected if k in have and have[k] != expected[k])
        if wrong:
            tally.problems.append(f"{self.workdir}: {len(wrong)} keys hold a wrong sum (a batch lost or counted "
                                  f"twice), e.g. {[(k, have[k], expected[k]) for k in wrong[:3]]}")
        self._check_batches_and_files(tally)
        if not tally.exactly_once or wrong:
            tally.problems.append(f"{self.workdir}: {tally.summary()}")
        return tally

    def _check_batches_and_files(self, tally: Tally) -> None:
        user = self.commit_user()
        if user is not None and Path(self.table, "snapshot").exists():
            identifiers = Counter(s.commit_identifier for s in snapshots(self.table) if s.commit_user == user)
            tally.batches_committed_twice += sum(n - 1 for n in identifiers.values() if n > 1)
        leftovers = leftover_files(self.table)
        tally.leftover_files += len(leftovers)
        if leftovers:
            tally.problems.append(f"{self.workdir}: leftover files {sorted(leftovers)[:5]}")

    def check(self, expected: pa.Table | None = None, other_writer_rows: int = 0) -> Tally:
        """Every source row exactly once (rows with id < 0 belong to other writers), no leftovers."""
        expected = source_rows(self.source) if expected is None else expected
        tally = self.tally
        actual = read_unpatched(self.table) if Path(self.table, "snapshot").exists() else SOURCE_SCHEMA.empty_table()
        ids = actual.column("id").to_pylist()
        ours = Counter(i for i in ids if i >= 0)
        others = sum(1 for i in ids if i < 0)
        wanted = Counter(expected.column("id").to_pylist())
        tally.rows_checked += sum(wanted.values())
        tally.duplicates += sum(max(0, ours[i] - wanted[i]) for i in ours if i in wanted)
        tally.lost += sum(max(0, wanted[i] - ours[i]) for i in wanted)
        tally.foreign += sum(n for i, n in ours.items() if i not in wanted) + abs(others - other_writer_rows)
        if not (tally.duplicates or tally.lost or tally.foreign):
            ours_table = actual.filter(pa.compute.greater_equal(actual.column("id"), 0))
            if _sorted_rows(ours_table) != _sorted_rows(expected):
                tally.problems.append(f"{self.workdir}: ids match but row contents differ")
        self._check_batches_and_files(tally)
        if not tally.exactly_once:
            tally.problems.append(f"{self.workdir}: {tally.summary()}")
        return tally


def append_as_other_writer(table_path: str, snapshots_to_add: int, rows_each: int = 5, first: int = 1) -> int:
    """Commit a few snapshots with pypaimon's own writer and a commit user of its own (ids -first,
    -first-1, ...); columns the table has beyond the source's (a `score` a stream added) stay null."""
    from pypaimon.schema.data_types import PyarrowFieldParser
    from pypaimon.table.file_store_table import FileStoreTable

    table = FileStoreTable.from_path(table_path)
    schema = PyarrowFieldParser.from_paimon_schema(table.fields)
    added = 0
    for k in range(snapshots_to_add):
        ids = [-(first + k * rows_each + j) for j in range(rows_each)]
        rows = {"id": pa.array(ids, pa.int64()), "name": pa.array([f"other-{i}" for i in ids]),
                "grp": pa.array([abs(i) % 3 for i in ids], pa.int32())}
        pypaimon_append(table, pa.table([rows[f.name] if f.name in rows else pa.nulls(len(ids), f.type)
                                         for f in schema], schema=schema))
        added += len(ids)
    return added


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def random_kill_case(workdir: Path, mode: str, commit: str, rng: random.Random, max_kills: int,
                     files: int = 6, rows_per_file: int = 40, max_delay: float = 12.0) -> Tally:
    """Soak unit: kill the driver at random moments up to `max_kills` times, then let it catch up."""
    case = Case(workdir, mode, commit)
    make_source(case.source, files=files, rows_per_file=rows_per_file)
    for _ in range(max_kills):
        result = case.run(kill_after=rng.uniform(0.0, max_delay),
                          fail_first_attempt=rng.choice((0.0, 0.0, 0.3)))
        if not result.killed:
            if result.returncode != 0:
                raise HarnessError(f"driver failed without a kill; log {result.log}:\n{result.tail()}")
            break
    else:
        case.finish()
    return case.check()


# A chain step that is no kill: the protocol raises at the point (LAKESINK_FAIL_AT) in a
# pipelined query's background commit.
FAIL = "fail:"


def fail_background_commit(case: "Case", point: str) -> None:
    """Pipelined: Spark recorded the batch before its commit failed, so it will not replay it.
    The failure must stop the query (not pass silently), its files and pending state kept for
    the restart to commit."""
    failed = case.run(fail_at=point)
    assert failed.returncode == 1, failed.tail()
    log = failed.log.read_text()
    assert f"injected failure at {point.split('@')[0]}" in log, failed.tail()
    assert "retried when the query restarts" in log, failed.tail()


def kill_at_each_summing(case: "Case", points, prefixes) -> Tally:
    """Kill a summing keyed case at each point (after each kill its sums are those of a whole
    number of batches), restart it once more, and check the final sums: the tally. A point
    "pipelined:..." is killed in a run with commit.mode=pipelined (tests.crash.matrix.PIPELINED)."""
    from .matrix import PIPELINED

    own = case.commit
    for point in points:
        case.commit = "pipelined" if point.startswith(PIPELINED) else own
        point = point.removeprefix(PIPELINED)
        if point.startswith(FAIL):
            fail_background_commit(case, point[len(FAIL):])
        else:
            case.crash(point)
        have = sums_of(read_table(case.table)) if Path(case.table, "snapshot").exists() else {}
        assert have in prefixes, f"after {case.runs[-1].log} the sums are those of no whole number of batches"
    case.commit = own
    case.finish()
    return case.check_sums(prefixes[-1])
