"""The JDBC commit target without Spark: staging tables, one-transaction commits, replays, failures.

Tasks are played by calling `tasks.stage` directly with Arrow batches, as Spark's workers do.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

from lakesink.errors import (CommitFailedError, ConfigurationError, DatabaseConnectionError, DuplicateKeyError,
                             SchemaMismatchError, TableAlreadyExistsError, UnsupportedTypeError)
from lakesink.jdbc.job import JdbcJob
from lakesink.jdbc.options import JdbcOptions
from lakesink.jdbc.staged import JdbcStagedTable
from lakesink.jdbc.stream_sink import JdbcStreamSink
from lakesink.jdbc.tasks import stage
from lakesink.protocol import PendingStore

SCHEMA = StructType([StructField("id", LongType()), StructField("name", StringType()),
                     StructField("amount", DecimalType(10, 2))])


def batch(ids) -> pa.RecordBatch:
    import decimal
    return pa.RecordBatch.from_pydict({"id": pa.array(list(ids), pa.int64()),
                                       "name": [f"n{i}" for i in ids],
                                       "amount": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(10, 2))})


def plan(db, table="orders", schema=SCHEMA, **options) -> JdbcJob:
    return JdbcJob.plan(JdbcOptions.parse({"url": db.url, "dbtable": db.table(table), **db.options, **options}), schema)


def ids(db, table="orders") -> list[int]:
    return [r[0] for r in db.rows(table)]


def test_the_committed_attempt_lands_and_every_staging_table_goes(db):
    job = plan(db)
    dead = stage(job, [batch(range(5))], 0, 0, job.token)  # an attempt Spark never reports
    won = stage(job, [batch(range(5))], 0, 1, job.token)
    other = stage(job, [batch(range(5, 8))], 1, 0, job.token)
    assert dead.rows == won.rows == 5
    report = job.commit([won, other])
    assert report.committed and report.rows_added == 8 and report.files_added == 2
    assert ids(db) == list(range(8))
    assert db.staging_tables() == [] and db.registered() == []


def test_a_rerun_with_the_same_identity_writes_nothing(db):
    first = plan(db, **{"commit.user": "nightly", "commit.identifier": "7"})
    first.commit([stage(first, [batch(range(3))], 0, 0, first.token)])
    again = plan(db, **{"commit.user": "nightly", "commit.identifier": "7"})
    assert again.already_committed()
    report = again.commit([stage(again, [batch(range(3))], 0, 0, again.token)])
    assert report.skipped_replay
    older = plan(db, **{"commit.user": "nightly", "commit.identifier": "6"})
    assert older.already_committed()  # at or below the last committed identifier: skipped
    assert ids(db) == [0, 1, 2] and db.staging_tables() == []


def test_a_commit_that_fails_before_the_transaction_ends_changes_nothing(db, monkeypatch):
    job = plan(db)
    job.commit([stage(job, [batch(range(3))], 0, 0, job.token)])
    again = plan(db)
    staged = stage(again, [batch(range(3, 6))], 0, 0, again.token)
    monkeypatch.setenv("LAKESINK_FAIL_AT", "before-snapshot")
    with pytest.raises(CommitFailedError, match="did not land"):
        again.commit([staged])
    assert ids(db) == [0, 1, 2] and db.staging_tables() == []


def test_a_staging_table_that_lost_rows_is_never_committed(db):
    job = plan(db)
    staged = stage(job, [batch(range(4))], 0, 0, job.token)
    table = f'"{db.staging}"."{staged.table}"' if db.dialect == "postgres" else f'"_lakesink_{staged.table}"'
    db.execute(f"DELETE FROM {table}")  # what a server crash does to an UNLOGGED table
    with pytest.raises(CommitFailedError, match="lost rows"):
        job.commit([staged])
    assert not db.exists("orders")


def test_an_abort_drops_the_jobs_staging_and_creates_no_table(db):
    job = plan(db)
    staged = [stage(job, [batch(range(3))], p, 0, job.token) for p in range(2)]
    job.abort(staged[:1])  # a failed partition's message is None: its table is found by the job token
    assert not db.exists("orders") and db.staging_tables() == []


def test_concurrent_commits_of_one_identity_land_once(db):
    jobs = [plan(db, **{"commit.user": "racer", "commit.identifier": "1"}) for _ in range(4)]
    staged = [stage(j, [batch(range(10))], 0, 0, j.token) for j in jobs]
    barrier = threading.Barrier(len(jobs))
    results, errors = [], []

    def run(job, s):
        barrier.wait()
        try:
            results.append(job.commit([s]))
        except Exception as exc:  # noqa: BLE001 - collected and checked below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=pair) for pair in zip(jobs, staged)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ids(db) == list(range(10))
    assert db.staging_tables() == []
    assert all(isinstance(e, CommitFailedError) for e in errors), errors


def test_upsert_updates_by_key_and_refuses_duplicate_keys(db):
    job = plan(db, **{"write.mode": "upsert", "upsert.key": "id"})
    job.commit([stage(job, [batch(range(4))], 0, 0, job.token)])
    changed = pa.RecordBatch.from_pydict({"id": pa.array([2, 9], pa.int64()), "name": ["two", "nine"],
                                          "amount": pa.array([None, None], pa.decimal128(10, 2))})
    job = plan(db, **{"write.mode": "upsert", "upsert.key": "id"})
    job.commit([stage(job, [changed], 0, 0, job.token)])
    assert [(r[0], r[1]) for r in db.rows("orders")] == [(0, "n0"), (1, "n1"), (2, "two"), (3, "n3"), (9, "nine")]
    job = plan(db, **{"write.mode": "upsert", "upsert.key": "id"})
    with pytest.raises(DuplicateKeyError, match="deduplicate"):
        job.commit([stage(job, [batch([5])], 0, 0, job.token), stage(job, [batch([5])], 1, 0, job.token)])
    assert len(db.rows("orders")) == 5 and db.staging_tables() == []


def test_bad_input_is_refused_before_anything_is_written(db):
    from pyspark.sql.types import ArrayType, IntegerType, MapType
    bad = StructType([StructField("id", LongType()), StructField("tags", ArrayType(StringType())),
                      StructField("m", MapType(StringType(), IntegerType()))])
    with pytest.raises(UnsupportedTypeError, match="tags .*m "):
        plan(db, schema=bad)
    with pytest.raises(ConfigurationError, match="upsert.key"):
        plan(db, **{"write.mode": "upsert"})
    db.execute(f"CREATE TABLE {_q(db, 'orders')} (id bigint, name integer)")
    with pytest.raises(SchemaMismatchError, match="name.*amount"):
        plan(db)
    with pytest.raises(ConfigurationError, match="unique index"):
        plan(db, schema=StructType(SCHEMA.fields[:1]), **{"write.mode": "upsert", "upsert.key": "id"})
    with pytest.raises(ConfigurationError, match="Unknown option 'batchSizes'"):
        plan(db, batchSizes="10")
    assert db.rows("orders") == [] and db.staging_tables() == []


def test_unreachable_databases_are_a_clear_error(tmp_path):
    with pytest.raises(DatabaseConnectionError, match="Cannot connect to postgresql://127.0.0.1:1/x"):
        JdbcJob.plan(JdbcOptions.parse({"url": "postgresql://u@127.0.0.1:1/x", "dbtable": "t"}), SCHEMA)
    with pytest.raises(DatabaseConnectionError, match="does not exist"):
        JdbcJob.plan(JdbcOptions.parse({"url": f"sqlite:///{tmp_path}/no/such/dir.db", "dbtable": "t"}), SCHEMA)
    with pytest.raises(ConfigurationError, match="unsupported scheme"):
        JdbcJob.plan(JdbcOptions.parse({"url": "mysql://u:secret@h/db", "dbtable": "t"}), SCHEMA)


def test_wrong_credentials_are_a_clear_error(pg):
    # This server trusts local users, so a wrong password passes; an unknown role is refused by any server.
    with pytest.raises(DatabaseConnectionError, match="Cannot connect.*no_such_role.*Nothing was written"):
        JdbcJob.plan(JdbcOptions.parse({"url": pg.url.replace("postgres@", "no_such_role@"), "password": "x",
                                        "dbtable": pg.table("t"), **pg.options}), SCHEMA)
    assert not pg.exists("t")


def test_a_restarted_stream_commits_what_the_dead_driver_accepted(db, tmp_path):
    options = JdbcOptions.parse({"url": db.url, "dbtable": db.table("orders"), "commit.user": "q1", **db.options})
    sink = JdbcStreamSink(options, SCHEMA, str(tmp_path / "chk"))
    target = sink.job.target()
    staged = [stage(sink.job, [batch(range(3))], 0, 0, sink.token(0))]
    sink.committer(target).accept(0, staged)  # the driver died here
    target.close()
    restarted = JdbcStreamSink(JdbcOptions.parse({"url": db.url, "dbtable": db.table("orders"), **db.options}),
                               SCHEMA, str(tmp_path / "chk"))
    assert restarted.commit_user == "q1"
    reports = restarted.restore()
    assert [r.identifier for r in reports] == [0] and ids(db) == [0, 1, 2]
    assert restarted.is_committed(0) and PendingStore(restarted.store).all() == []
    # the replay of batch 0 that Spark runs next is skipped
    stage(restarted.job, [batch(range(3))], 0, 0, restarted.token(0))
    assert restarted.skip_replay(0).skipped_replay
    assert ids(db) == [0, 1, 2] and db.staging_tables() == []


def test_staged_create_appears_only_on_commit_and_one_of_two_wins(db):
    options = {"url": db.url, "dbtable": db.table("daily"), **db.options}
    first = JdbcStagedTable(JdbcOptions.parse(options), SCHEMA, replace=False)
    second = JdbcStagedTable(JdbcOptions.parse(options), SCHEMA, replace=False)
    for staged in (first, second):
        staged.begin()
        staged.job.commit([stage(staged.job, [batch(range(3))], 0, 0, staged.job.token)])
    assert not db.exists("daily")
    barrier = threading.Barrier(2)
    outcomes = []

    def publish(staged):
        barrier.wait()
        try:
            staged.commit()
            outcomes.append("won")
        except TableAlreadyExistsError:
            staged.abort()
            outcomes.append("lost")

    threads = [threading.Thread(target=publish, args=(s,)) for s in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost", "won"]
    assert ids(db, "daily") == [0, 1, 2] and db.staging_tables() == [] and db.registered() == []
    failed = JdbcStagedTable(JdbcOptions.parse({**options, "dbtable": db.table("never")}), SCHEMA, replace=False)
    failed.begin()
    failed.abort()
    assert not db.exists("never") and db.staging_tables() == []


def _q(db, name: str) -> str:
    return f'"{db.schema}"."{name}"' if db.schema else f'"{name}"'


def test_spark_jdbc_option_names_are_honoured(db):
    from lakesink.errors import InvalidOptionError
    with pytest.raises(InvalidOptionError, match="exactly-once"):
        JdbcOptions.parse({"isolationLevel": "NONE"})
    amount = "NUMERIC(12, 2)" if db.dialect == "postgres" else "DECIMAL_TEXT(12, 2)"
    if db.dialect == "sqlite":
        with pytest.raises(ConfigurationError, match="affinity"):
            plan(db, createTableColumnTypes="amount NUMERIC(12, 2)")
    job = plan(db, createTableColumnTypes=f"name VARCHAR(64), amount {amount}", isolationLevel="serializable",
               BATCHSIZE="2")
    assert job.batch_size == 2 and job.db.isolation_level == "SERIALIZABLE"
    job.commit([stage(job, [batch(range(5))], 0, 0, job.token)])
    assert ids(db) == list(range(5))
    if db.dialect == "postgres":
        types = db.query("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
                         "AND attnum > 0 ORDER BY attnum", (f'"{db.schema}"."orders"',))
        assert [t[0] for t in types] == ["bigint", "character varying(64)", "numeric(12,2)"]
    else:
        assert [r[2] for r in db.query('PRAGMA table_info("orders")')] == ["BIGINT", "VARCHAR(64)", "DECIMAL_TEXT(12, 2)"]
    with pytest.raises(ConfigurationError, match="createTableColumnTypes names column"):
        plan(db, table="other", createTableColumnTypes="nope TEXT")


def test_clean_staging_drops_what_killed_drivers_left(db):
    from lakesink.jdbc import clean_staging
    job = plan(db)
    stage(job, [batch(range(3))], 0, 0, job.token)  # never committed nor aborted: the driver died
    assert clean_staging(db.url, older_than=3600, options=db.options) == []  # too young
    assert len(clean_staging(db.url, older_than=0, dry_run=True, options=db.options)) == 1
    assert len(clean_staging(db.url, older_than=0, options=db.options)) == 1
    assert db.staging_tables() == [] and db.registered() == []


def test_jdbc_options_come_from_the_registry_and_a_typo_names_the_known_keys():
    from lakesink import options as registry
    from lakesink.errors import InvalidOptionError, UnknownOptionError
    with pytest.raises(UnknownOptionError) as err:
        JdbcOptions.parse({"url": "sqlite:///x.db", "dbtable": "t", "batchsze": "5"})
    assert err.value.option == "batchsze" and "batchsize" in str(err.value)
    # File-system options are no database options: they reach a stream's checkpoint, nothing else.
    given = JdbcOptions.parse({"url": "sqlite:///x.db", "dbtable": "t", "fs.s3.accesskeyid": "id"})
    assert given.fs_options == {"fs.s3.accessKeyId": "id"}
    given.check(streaming=True)
    with pytest.raises(ConfigurationError, match="only reach a stream's checkpoint"):
        given.check()
    with pytest.raises(InvalidOptionError, match="BatchSize"):
        JdbcOptions.parse({"BatchSize": "0"})
    opts = JdbcOptions.parse({"URL": "sqlite:///x.db", "path": "t", "WRITE.MODE": "Upsert", "upsert.key": "a, b",
                              "checkpointLocation": "/chk", "commit.user": "u"})
    assert (opts.url, opts.table, opts.mode, opts.key, opts.checkpoint) == ("sqlite:///x.db", "t", "upsert",
                                                                          ["a", "b"], "/chk")
    jdbc_keys = {o.key for o in registry.REGISTRY.values() if "jdbc" in o.scopes}
    assert {"url", "dbtable", "isolationLevel", "commit.identifier", "checkpointLocation"} <= jdbc_keys
