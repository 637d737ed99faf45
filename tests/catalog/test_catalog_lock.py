"""Commits guarded by the JDBC catalog lock (Paimon's `paimon_distributed_locks`), on SQLite and PostgreSQL.

* Racing processes commit to one table resolved by name through a JDBC catalog with
  `lock.enabled=true`, with the storage's atomic create replaced by a non-atomic one
  (tests/unit/test_race.py's `racy`: check, pause, overwrite). No commit is lost: the catalog
  lock alone keeps them apart. The control runs the same race with `lock.enabled=false`
  and loses commits, so the race does test something.
* A lock row held by "another writer" (inserted as Paimon's Java writer inserts it) makes a
  commit wait `lock-acquire-timeout` and fail with `CatalogLockTimeoutError`; the table is
  unchanged and the commit's files are gone.
* A writer process SIGKILLed while holding the lock blocks the others only until its row
  expires (`expire_time_seconds` = its `lock-acquire-timeout`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from lakesink.errors import CatalogLockTimeoutError, CommitFailedError
from lakesink.paimon.table import catalog_lock, tables
from lakesink.paimon.catalog.catalog import open_catalog

from ..staged import PARTITION_KEYS, SCHEMA, commit, new_target, read_back, snapshot_list, stage
from ..unit.test_race import _check, race
from .conftest import POSTGRES_URL, catalog_options, forget_postgres_catalog

WRITERS = 3
ROUNDS = 3
# Short waits keep the test fast; the race waits for the lock, never times out.
RACE_LOCK = {"lock.enabled": "true", "lock-acquire-timeout": "60 s", "lock-check-max-sleep": "100 ms"}


@pytest.fixture(params=["sqlite", "postgres"])
def jdbc(request, tmp_path):
    opts = catalog_options(request.param, tmp_path)
    yield opts
    forget_postgres_catalog(opts)
    _forget_locks(opts)


def _forget_locks(opts: dict) -> None:
    """The test's rows of the shared PostgreSQL database's lock table (SQLite files go with tmp_path)."""
    if not opts.get("uri", "").startswith("jdbc:postgresql:"):
        return
    import psycopg
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {catalog_lock.TABLE} WHERE lock_id LIKE %s", (opts["catalog-key"] + ".%",))


def _named_table(opts: dict, extra: dict, name: str = "db.t"):
    """Create `name` in the catalog (opened with `extra` options) and resolve it for a write."""
    catalog = open_catalog({**opts, **extra})
    catalog.create_database("db")
    resolved = catalog.resolve(name, "write")
    table = tables.create_table(resolved.path, SCHEMA, PARTITION_KEYS, [], {"bucket": "-1"}, resolved.fs_options)
    assert catalog.register(resolved.name, table.table_schema)
    return catalog, catalog.resolve(name, "write")


def _lock_rows(catalog, lock) -> list[tuple]:
    db = catalog_lock._database(lock)
    with db.mutex:
        rows = db.conn.fetch_all(f"SELECT lock_id, expire_time_seconds FROM {catalog_lock.TABLE} WHERE lock_id = ?",
                                 (lock.lock_id,))
        db.conn.connection.commit()
    return [tuple(r) for r in rows]


def _hold_as_another_writer(lock, expire_seconds: int) -> None:
    """Insert the lock row as Paimon's JdbcCatalogLock does (lock_id, expire_time_seconds), on a
    connection of its own: another writer holds the lock."""
    from pypaimon.catalog.jdbc_catalog import _DbApiConnection
    catalog_lock._database(lock).held(lock)  # lakesink creates the lock table on first use
    conn = _DbApiConnection(dict(lock.connection))
    try:
        conn.execute(f"INSERT INTO {catalog_lock.TABLE} (lock_id, expire_time_seconds) VALUES (?, ?)",
                     (lock.lock_id, expire_seconds))
        conn.connection.commit()
    finally:
        conn.close()


def _data_files(path: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names
                  if f.endswith(".parquet") and "/_lakesink/" not in d + "/")


def test_racing_writers_by_name_lose_no_commit_under_the_catalog_lock(jdbc):
    catalog, resolved = _named_table(jdbc, RACE_LOCK)
    assert catalog_lock.OPTION in resolved.fs_options  # the lock travels with the table's options
    # The holder pauses 0.3 s inside the lock, so the others (released by the same barrier) have
    # planned the same snapshot id by the time they get the lock: every round is a collision.
    tally, expected, in_table = race(resolved.path, resolved.fs_options, "racy", writers=WRITERS,
                                     rounds=ROUNDS, create=False, racy_pause=0.3)
    _check(tally, expected, in_table, ROUNDS, WRITERS)
    assert tally.retried > 0  # the writers did collide on snapshot ids
    assert _lock_rows(catalog, catalog.config.lock(resolved.name)) == []  # every holder released it


def test_control_without_the_catalog_lock_the_same_race_loses_commits(tmp_path):
    catalog, resolved = _named_table(catalog_options("sqlite", tmp_path), {"lock.enabled": "false"})
    assert catalog_lock.OPTION not in resolved.fs_options
    tally, _, _ = race(resolved.path, resolved.fs_options, "racy", writers=WRITERS, rounds=ROUNDS, create=False)
    print("\n" + tally.line("race without the catalog lock"))
    assert tally.lost > 0


def test_a_held_lock_makes_a_commit_wait_then_fail_with_the_table_unchanged(jdbc):
    catalog, resolved = _named_table(jdbc, {"lock.enabled": "true", "lock-acquire-timeout": "1 s",
                                            "lock-check-max-sleep": "200 ms"})
    target = new_target(resolved.path, resolved.fs_options)
    commit(target, "first", 1, stage(target, [1, 2], "p0", "first"))
    lock = catalog.config.lock(resolved.name)
    _hold_as_another_writer(lock, expire_seconds=3600)

    files = stage(target, [3, 4], "p1", "second")
    data_before = _data_files(resolved.path)
    started = time.monotonic()
    with pytest.raises(CommitFailedError) as failure:
        commit(target, "second", 1, files)
    waited = time.monotonic() - started
    assert isinstance(failure.value, CatalogLockTimeoutError)
    message = str(failure.value)
    assert lock.lock_id in message and "lock-acquire-timeout" in message and "Nothing was published" in message
    assert 1.0 <= waited < 10
    assert len(snapshot_list(resolved.path, resolved.fs_options)) == 1  # the table is unchanged
    assert sorted(read_back(resolved.path, resolved.fs_options).column("id").to_pylist()) == [1, 2]
    assert not any(target.file_io.exists(f.staged_path) for f in files)  # its files were removed
    assert _data_files(resolved.path) == data_before
    assert _lock_rows(catalog, lock) == [(lock.lock_id, 3600)]  # the other writer's lock is left alone


def _hold_and_die(options: dict, name: str, ready) -> None:
    """A writer that takes the table's lock and is killed while holding it."""
    catalog = open_catalog(options)
    catalog.config.lock(catalog.parse_name(name)).acquire()
    ready.set()
    time.sleep(600)


def test_a_killed_holders_lock_expires_and_the_next_commit_goes_through(jdbc):
    holder_options = {**jdbc, "lock.enabled": "true", "lock-acquire-timeout": "1 s"}  # its row: 1 s
    catalog, resolved = _named_table(jdbc, {"lock.enabled": "true", "lock-acquire-timeout": "20 s",
                                            "lock-check-max-sleep": "200 ms"})
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_and_die, args=(holder_options, "db.t", ready))
    holder.start()
    try:
        assert ready.wait(60), "the holder did not take the lock"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
    lock = catalog.config.lock(resolved.name)
    assert _lock_rows(catalog, lock) == [(lock.lock_id, 1)]  # the dead writer's row stays behind

    target = new_target(resolved.path, resolved.fs_options)
    started = time.monotonic()
    report = commit(target, "after", 1, stage(target, [7], "p0", "after"))
    waited = time.monotonic() - started
    assert report.snapshot_id == 1
    assert waited < 10  # about the row's 1 s expiry (second precision), far from the 20 s timeout
    assert _lock_rows(catalog, lock) == []
    assert read_back(resolved.path, resolved.fs_options).column("id").to_pylist() == [7]


def test_a_schema_commit_takes_the_lock_too(jdbc):
    """Schema files (write.merge-schema) go through the same create-if-absent: under the lock."""
    from lakesink.paimon.table import publish
    catalog, resolved = _named_table(jdbc, {"lock.enabled": "true", "lock-acquire-timeout": "1 s",
                                            "lock-check-max-sleep": "200 ms"})
    table = tables.open_table(resolved.path, resolved.fs_options)
    _hold_as_another_writer(catalog.config.lock(resolved.name), expire_seconds=3600)
    target = f"{resolved.path}/schema/schema-1"
    with pytest.raises(CatalogLockTimeoutError):
        publish.create_if_absent(table, target, "{}")
    assert not table.file_io.exists(target)


def test_inside_pypaimons_retry_loop_a_timed_out_lock_is_not_waited_for_again(jdbc):
    """A timeout inside the publication (the lock taken by someone between the early wait and the
    publication) is raised; pypaimon's retries of that commit then fail at once, not after another
    full lock-acquire-timeout each."""
    from lakesink.paimon.table.publish import CatalogLockedSnapshotCommit

    class Never:
        def commit(self, *args):
            raise AssertionError("published without the lock")

        def close(self):
            pass

    catalog, resolved = _named_table(jdbc, {"lock.enabled": "true", "lock-acquire-timeout": "1 s",
                                            "lock-check-max-sleep": "200 ms"})
    lock = catalog.config.lock(resolved.name)
    _hold_as_another_writer(lock, expire_seconds=3600)
    publication = CatalogLockedSnapshotCommit(Never(), lock)
    started = time.monotonic()
    with pytest.raises(CatalogLockTimeoutError):
        publication.commit(None, None, [])
    assert time.monotonic() - started >= 1.0
    started = time.monotonic()
    with pytest.raises(CatalogLockTimeoutError):
        publication.commit(None, None, [])
    assert time.monotonic() - started < 0.5


def test_where_the_storage_has_no_atomic_create_the_catalog_lock_makes_writes_possible():
    from lakesink.errors import UnsafePublicationError
    from lakesink.paimon.catalog.config import CatalogConfig
    from lakesink.paimon.catalog.names import TableName
    from lakesink.paimon.table.publish import publication_kind

    config = CatalogConfig.parse({"metastore": "jdbc", "uri": "jdbc:sqlite:/nowhere/catalog.db",
                                  "warehouse": "hdfs://nn/wh", "lock.enabled": "true"})
    options = config.fs_options_of(TableName("db", "t"))
    assert publication_kind("hdfs://nn/wh/db.db/t", options) == "catalog-lock"
    with pytest.raises(UnsafePublicationError, match="lock.enabled=true"):
        publication_kind("hdfs://nn/wh/db.db/t", {})


def test_lock_enabled_follows_paimons_default_and_belongs_to_jdbc_catalogs():
    from lakesink.errors import ConfigurationError
    from lakesink.paimon.catalog.config import CatalogConfig

    def enabled(warehouse: str, **extra) -> bool:
        return CatalogConfig.parse({"metastore": "jdbc", "uri": "jdbc:sqlite:/x.db", "warehouse": warehouse,
                                    **extra}).lock_enabled

    assert enabled("s3://bucket/wh") and enabled("oss://bucket/wh") and enabled("gs://bucket/wh")
    assert not enabled("/data/wh") and not enabled("hdfs://nn/wh")
    assert enabled("/data/wh", **{"lock.enabled": "true"}) and not enabled("s3://b/wh", **{"lock.enabled": "false"})
    assert not CatalogConfig.parse({"warehouse": "s3://bucket/wh"}).lock_enabled  # filesystem: no JDBC lock
    with pytest.raises(ConfigurationError, match="lock.enabled"):
        CatalogConfig.parse({"warehouse": "/data/wh", "lock.enabled": "true"})
