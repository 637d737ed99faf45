"""The JDBC sink end to end on a real local Spark session, against SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import shutil
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink.errors import (ConfigurationError, LakesinkError, SchemaMismatchError, TableAlreadyExistsError,
                             UnsupportedTypeError)

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc


def frame(spark, ids):
    return spark.createDataFrame([(i, f"name-{i}", decimal.Decimal(i) / 8) for i in ids],
                                 "id long, name string, amount decimal(12,3)").repartition(2)


def ids(db, table="orders") -> list[int]:
    return [r[0] for r in db.rows(table)]


def test_append_overwrite_and_upsert(spark, db):
    url, table = db.url, db.table("orders")
    report = lakesink.jdbc.write(frame(spark, range(10)), url, table, options=db.options)
    assert report.committed and report.rows_added == 10
    lakesink.jdbc.write(frame(spark, range(10, 15)), url, table, options=db.options)
    assert ids(db) == list(range(15))
    lakesink.jdbc.write(frame(spark, range(3)), url, table, mode="overwrite", options=db.options)
    assert ids(db) == [0, 1, 2]
    users = db.table("users")
    lakesink.jdbc.write(frame(spark, range(4)), url, users, mode="upsert", key=["id"], options=db.options)
    changed = spark.createDataFrame([(1, "one", None), (7, "seven", None)], "id long, name string, amount decimal(12,3)")
    report = lakesink.jdbc.write(changed, url, users, mode="upsert", key=["id"], options=db.options)
    assert report.commit_kind == "UPSERT"
    assert [(r[0], r[1]) for r in db.rows("users")] == [(0, "name-0"), (1, "one"), (2, "name-2"), (3, "name-3"),
                                                        (7, "seven")]
    assert db.staging_tables() == []


def test_a_rerun_with_the_same_commit_identity_is_skipped(spark, db):
    for _ in range(2):
        report = lakesink.jdbc.write(frame(spark, range(6)), db.url, db.table("orders"), commit_user="nightly",
                                     commit_identifier=3, options=db.options)
    assert report.skipped_replay and ids(db) == list(range(6))
    report = lakesink.jdbc.write(frame(spark, range(6, 8)), db.url, db.table("orders"), commit_user="nightly",
                                 commit_identifier=4, options=db.options)
    assert report.committed and ids(db) == list(range(8))


TYPES = ("b boolean, y tinyint, s smallint, i int, l long, f float, d double, dec decimal(38,10), "
         "small decimal(5,2), str string, bin binary, day date, ts timestamp, ntz timestamp_ntz, id int")


def typed_rows():
    big = decimal.Decimal("1234567890123456789012345678.0123456789")
    return [
        (True, -128, -32768, -2147483648, -9223372036854775808, 0.1, 1 / 3, big, decimal.Decimal("-999.99"),
         "", b"", dt.date(1, 1, 1), dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(1, 1, 1), 0),
        (False, 127, 32767, 2147483647, 9223372036854775807, 3.4e38, -1e308, -big, decimal.Decimal("0.00"),
         "ünïcødé 😀 \"quoted\", comma\nnewline\\back", b"\x00\xff\x10'\"", dt.date(9999, 12, 31),
         dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), dt.datetime(2026, 2, 28, 12, 30, 45, 123456), 1),
        (None, None, None, None, None, None, None, None, None, None, None, None, None, None, 2),
        (True, 0, 0, 0, 0, float("inf"), float("nan"), decimal.Decimal("0E-10"), decimal.Decimal("1.50"),
         "NULL", b"NULL", dt.date(1970, 1, 1), dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(1999, 12, 31), 3),
    ]


def normalise(row, dialect):
    """A database row as the Python values Spark collected, per the documented type mapping."""
    (b, y, s, i, long_, f, d, dec, small, text, binary, day, ts, ntz, id_) = row
    if dialect == "sqlite":
        b = None if b is None else bool(b)
        dec = None if dec is None else decimal.Decimal(dec)
        small = None if small is None else decimal.Decimal(small)
        day = None if day is None else dt.date.fromisoformat(day)
        ts = None if ts is None else dt.datetime.fromisoformat(ts)
        ntz = None if ntz is None else dt.datetime.fromisoformat(ntz)
    else:
        ts = None if ts is None else ts.astimezone(UTC)
    binary = None if binary is None else bytes(binary)
    return (b, y, s, i, long_, f, d, dec, small, text, binary, day, ts, ntz, id_)


def float32(x):
    return None if x is None else struct.unpack("f", struct.pack("f", x))[0]


def test_every_supported_type_round_trips_exactly(spark, db):
    rows = typed_rows()
    if db.dialect == "sqlite":  # SQLite has no NaN: refused, see below
        rows[3] = rows[3][:6] + (-0.0,) + rows[3][7:]
        nan = spark.createDataFrame(typed_rows(), TYPES)
        with pytest.raises(Exception, match="holds NaN, which SQLite cannot store"):
            lakesink.jdbc.write(nan, db.url, db.table("typed"), options=db.options)
        assert not db.exists("typed") and db.staging_tables() == []
    df = spark.createDataFrame(rows, TYPES)
    lakesink.jdbc.write(df, db.url, db.table("typed"), options=db.options)
    expected = rows  # the source (collect() cannot show year-1 timestamps in every local time zone)
    got = [normalise(r, db.dialect) for r in db.rows("typed")]
    assert len(got) == len(expected)
    for want, have in zip(expected, got):
        want = list(want)
        want[12] = None if want[12] is None else want[12].astimezone(UTC)
        want[5], have = float32(want[5]), list(have)
        have[5] = float32(have[5])
        for k, (w, h) in enumerate(zip(want, have)):
            if isinstance(w, float) and w != w:
                assert h != h, (k, w, h)  # NaN
            else:
                assert w == h and type(w) is type(h) or (w == h and isinstance(w, (int, float))), (k, w, h)


def test_unsupported_types_and_bad_tables_are_refused_with_the_target_unchanged(spark, db):
    url, table = db.url, db.table("orders")
    lakesink.jdbc.write(frame(spark, range(3)), url, table, options=db.options)
    with pytest.raises(UnsupportedTypeError, match="tags"):
        lakesink.jdbc.write(spark.sql("select 1L as id, array('a') as tags"), url, table, options=db.options)
    with pytest.raises(SchemaMismatchError, match="'extra' is not in the table"):
        lakesink.jdbc.write(frame(spark, [9]).selectExpr("*", "1 as extra"), url, table, options=db.options)
    with pytest.raises(ConfigurationError, match="upsert.key"):
        lakesink.jdbc.write(frame(spark, [9]), url, table, mode="upsert", options=db.options)
    with pytest.raises(LakesinkError, match="Cannot connect"):
        lakesink.jdbc.write(frame(spark, [9]), "postgresql://nobody@127.0.0.1:1/none", "t")
    assert ids(db) == [0, 1, 2] and db.staging_tables() == []


def test_a_job_that_fails_after_its_tasks_staged_leaves_the_table_unchanged(spark, db, monkeypatch):
    lakesink.jdbc.write(frame(spark, range(3)), db.url, db.table("orders"), options=db.options)
    monkeypatch.setenv("LAKESINK_FAIL_AT", "tasks-done")
    with pytest.raises(Exception, match="injected failure"):
        lakesink.jdbc.write(frame(spark, range(3, 9)), db.url, db.table("orders"), options=db.options)
    assert ids(db) == [0, 1, 2] and db.staging_tables() == [] and db.registered() == []


def test_a_failing_task_aborts_the_job_and_its_staging(spark, db):
    from pyspark.sql.functions import udf

    @udf("long")
    def explode_on_7(i):
        if i == 7:
            raise ValueError("bad row 7")
        return i

    df = frame(spark, range(20)).withColumn("id", explode_on_7("id"))
    with pytest.raises(Exception, match="bad row 7"):
        lakesink.jdbc.write(df, db.url, db.table("orders"), options=db.options)
    assert not db.exists("orders") and db.staging_tables() == []


def test_format_lakesink_jdbc_appends_and_overwrites(spark, db):
    def save(df, mode, **extra):
        writer = df.write.format("lakesink-jdbc").option("url", db.url).option("dbtable", db.table("orders"))
        for k, v in {**db.options, **extra}.items():
            writer = writer.option(k, v)
        writer.mode(mode).save()

    save(frame(spark, range(5)), "append")
    save(frame(spark, range(5, 7)), "append", batchsize="2")
    assert ids(db) == list(range(7))
    save(frame(spark, range(2)), "overwrite")
    assert ids(db) == [0, 1]
    save(frame(spark, range(2, 4)), "append", **{"commit.user": "job", "commit.identifier": "1"})
    save(frame(spark, range(2, 4)), "append", **{"commit.user": "job", "commit.identifier": "1"})
    assert ids(db) == [0, 1, 2, 3] and db.staging_tables() == []


def test_create_and_replace_table_as_are_all_or_nothing(spark, db):
    url, daily = db.url, db.table("daily")
    lakesink.jdbc.create_table_as(frame(spark, range(4)), url, daily, options=db.options)
    assert ids(db, "daily") == [0, 1, 2, 3]
    with pytest.raises(TableAlreadyExistsError):
        lakesink.jdbc.create_table_as(frame(spark, range(9)), url, daily, options=db.options)
    assert lakesink.jdbc.create_table_as(frame(spark, range(9)), url, daily, options=db.options,
                                         if_not_exists=True) is None
    other = spark.sql("select cast(id as int) as id, 'x' as label from range(3)")
    lakesink.jdbc.replace_table_as(other, url, daily, options=db.options)
    assert db.rows("daily") == [(0, "x"), (1, "x"), (2, "x")]

    from pyspark.sql.functions import udf

    @udf("int")
    def fail(i):
        raise ValueError("job fails")

    with pytest.raises(Exception, match="job fails"):
        lakesink.jdbc.replace_table_as(other.withColumn("id", fail("id")), url, daily, options=db.options)
    with pytest.raises(Exception, match="job fails"):
        lakesink.jdbc.create_table_as(other.withColumn("id", fail("id")), url, db.table("never"), options=db.options)
    assert db.rows("daily") == [(0, "x"), (1, "x"), (2, "x")] and not db.exists("never")
    assert db.staging_tables() == [] and db.registered() == []


def write_source(directory, batches):
    os.makedirs(directory, exist_ok=True)
    for k, batch_ids in enumerate(batches):
        path = f"{directory}/part-{k:05d}.parquet"
        pq.write_table(pa.table({"id": pa.array(batch_ids, pa.int64()), "name": [f"name-{i}" for i in batch_ids]}),
                       path)
        os.utime(path, (1_000_000 + k, 1_000_000 + k))  # Spark takes files in modification-time order


def source_stream(spark, directory):
    return spark.readStream.schema("id long, name string").option("maxFilesPerTrigger", 1).parquet(directory)


def replay_last_batch(checkpoint):
    """What a driver killed after the commit and before Spark's commit log does: batch N runs again."""
    commits = sorted(int(n) for n in os.listdir(f"{checkpoint}/commits") if n.isdigit())
    os.remove(f"{checkpoint}/commits/{commits[-1]}")
    if os.path.exists(f"{checkpoint}/commits/.{commits[-1]}.crc"):
        os.remove(f"{checkpoint}/commits/.{commits[-1]}.crc")
    return commits[-1]


@pytest.mark.parametrize("path", ["lakesink.jdbc.stream", "format"])
def test_streaming_writes_every_row_once_across_a_replayed_batch(spark, db, tmp_path, path):
    source, checkpoint = str(tmp_path / "source"), str(tmp_path / "chk")
    write_source(source, [list(range(0, 5)), list(range(5, 9)), list(range(9, 12))])

    def run():
        df = source_stream(spark, source)
        if path == "format":
            writer = (df.writeStream.format("lakesink-jdbc").option("url", db.url)
                      .option("dbtable", db.table("events")).option("checkpointLocation", checkpoint))
            for k, v in db.options.items():
                writer = writer.option(k, v)
            query = writer.trigger(availableNow=True).start()
        else:
            query = lakesink.jdbc.stream(df, db.url, db.table("events"), checkpoint=checkpoint,
                                         trigger="availableNow", options=db.options)
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        return query

    query = run()
    if path != "format":
        assert [r.rows_added for r in query.lakesink_sink.reports] == [5, 4, 3]
    assert ids(db, "events") == list(range(12))
    replayed = replay_last_batch(checkpoint)
    query = run()
    if path != "format":
        assert [(r.identifier, r.skipped_replay) for r in query.lakesink_sink.reports] == [(replayed, True)]
    assert ids(db, "events") == list(range(12)) and db.staging_tables() == []
    shutil.copy(f"{source}/part-00000.parquet", f"{source}/part-00009.parquet")  # a new file: same ids again
    os.utime(f"{source}/part-00009.parquet", (2_000_000, 2_000_000))
    run()
    assert ids(db, "events") == sorted(list(range(12)) + list(range(5)))


def test_a_checkpoint_bound_to_one_table_refuses_another(spark, db, tmp_path):
    from lakesink.errors import CheckpointMismatchError
    source, checkpoint = str(tmp_path / "source"), str(tmp_path / "chk")
    write_source(source, [[1, 2]])
    q = lakesink.jdbc.stream(source_stream(spark, source), db.url, db.table("a"), checkpoint=checkpoint,
                             trigger="availableNow", options=db.options)
    q.awaitTermination(120)
    with pytest.raises(CheckpointMismatchError, match="belongs to"):
        lakesink.jdbc.stream(source_stream(spark, source), db.url, db.table("b"), checkpoint=checkpoint,
                             trigger="availableNow", options=db.options)


def test_a_stream_upserts_by_key(spark, db, tmp_path):
    source, checkpoint = str(tmp_path / "source"), str(tmp_path / "chk")
    write_source(source, [[1, 2, 3], [2, 3, 4]])  # the second batch updates 2 and 3 (same names here)
    q = lakesink.jdbc.stream(source_stream(spark, source), db.url, db.table("latest"), checkpoint=checkpoint,
                             trigger="availableNow", mode="upsert", key=["id"], options=db.options)
    q.awaitTermination(120)
    assert q.exception() is None
    assert [r.commit_kind for r in q.lakesink_sink.reports] == ["UPSERT", "UPSERT"]
    assert db.rows("latest") == [(i, f"name-{i}") for i in (1, 2, 3, 4)]


def test_sqlite_tasks_take_the_write_lock_in_turn(spark, tmp_path):
    url = f"sqlite:///{tmp_path}/big.db"
    df = spark.range(0, 200_000, numPartitions=4).selectExpr("id", "concat('row-', cast(id as string)) as name")
    report = lakesink.jdbc.write(df, url, "big", options={"batchsize": "5000"})
    assert report.rows_added == 200_000 and report.files_added == 4
    import sqlite3
    conn = sqlite3.connect(f"{tmp_path}/big.db")
    assert conn.execute("SELECT count(*), count(DISTINCT id), sum(id) FROM big").fetchone() == \
        (200_000, 200_000, sum(range(200_000)))
    conn.close()
