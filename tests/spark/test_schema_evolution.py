"""Schema evolution on write (`write.merge-schema` / `mergeSchema`) through real Spark, read back with pypaimon.

Both batch paths, streaming across a restart, CTAS/RTAS. The connector-level
cases (crash after the schema, replays, concurrent evolutions) are in
tests/unit/test_evolution.py; the crash harness case is in tests/spark/test_crash.py.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink.errors import SchemaMismatchError
from tests.helpers import PATHS, read_table, snapshots, write

pytestmark = pytest.mark.spark


def schema_files(path: str) -> list[str]:
    return sorted(os.listdir(os.path.join(path, "schema")))


def file_schema_ids(path: str) -> list[int]:
    """Schema id of every data file of the latest snapshot, from its manifest entries."""
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(path)
    splits = table.new_read_builder().new_scan().plan().splits()
    return sorted(f.schema_id for split in splits for f in split.files)


@pytest.fixture()
def table(spark, table_path):
    """id INT, s STRING, one snapshot (schema 0)."""
    lakesink.write(spark.createDataFrame([(1, "a")], "id int, s string"), table_path)
    return table_path


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_new_column_is_added_with_the_data_in_one_snapshot(spark, table, path_kind):
    df = spark.createDataFrame([(2, "b", 2.5)], "id int, s string, x double")
    key = "write.merge-schema" if path_kind == "fast" else "mergeSchema"  # both spellings

    write(df, table, path_kind, **{key: "true"})

    assert schema_files(table) == ["schema-0", "schema-1"]
    latest = snapshots(table)[-1]
    assert (latest.id, latest.schema_id) == (2, 1)
    assert file_schema_ids(table) == [0, 1]  # the old file keeps its schema, the new one has 1
    rows = read_table(table).sort_by("id").to_pylist()
    assert rows == [{"id": 1, "s": "a", "x": None}, {"id": 2, "s": "b", "x": 2.5}]
    if path_kind == "native":  # lakesink's own reader too (files of two schema ids: pypaimon's read)
        assert [r["x"] for r in lakesink.read(spark, table).orderBy("id").collect()] == [None, 2.5]


@pytest.mark.parametrize("path_kind", PATHS)
def test_an_int_column_widens_to_bigint(spark, table, path_kind):
    df = spark.createDataFrame([(2**40, "b")], "id long, s string")
    write(df, table, path_kind, **{"write.merge-schema": "true"})
    data = read_table(table)
    assert data.schema.field("id").type == pa.int64()
    assert sorted(data.column("id").to_pylist()) == [1, 2**40]


@pytest.mark.parametrize("path_kind, ddl, words", [
    ("fast", "id smallint, s string", ["'id' is int16 but the table has int32", "never narrowed"]),
    ("native", "id string, s string", ["'id' is string but the table has int32", "write.merge-schema widens"]),
    ("native", "id int", ["missing column(s) ['s']", "never drops a column"]),
])
def test_a_refused_change_names_the_column_and_leaves_the_table_unchanged(spark, table, path_kind, ddl, words):
    before = (schema_files(table), [s.id for s in snapshots(table)], sorted(os.listdir(table)))
    values = {"id smallint, s string": (2, "b"), "id string, s string": ("2", "b"), "id int": (2,)}[ddl]
    with pytest.raises(Exception) as info:
        write(spark.createDataFrame([values], ddl), table, path_kind, **{"write.merge-schema": "true"})
    for word in words:
        assert word in str(info.value)
    assert (schema_files(table), [s.id for s in snapshots(table)], sorted(os.listdir(table))) == before


@pytest.mark.parametrize("path_kind", PATHS)
def test_without_the_option_a_new_column_is_refused_naming_it_and_the_option(spark, table, path_kind):
    df = spark.createDataFrame([(2, "b", 2.5)], "id int, s string, x double")
    with pytest.raises(Exception) as info:
        write(df, table, path_kind)
    assert "column(s) ['x'] not in the table: set write.merge-schema=true" in str(info.value)
    assert schema_files(table) == ["schema-0"] and len(snapshots(table)) == 1


@pytest.mark.parametrize("mode, commit", [
    ("fast", "sync"), ("native", "sync"),
    pytest.param("fast", "pipelined", marks=pytest.mark.soak),
    pytest.param("native", "pipelined", marks=pytest.mark.soak),
])
def test_a_stream_whose_source_gains_a_column_after_a_restart_writes_every_row_once(spark, tmp_path, mode,
                                                                                     commit):
    from pyspark.sql.pandas.types import from_arrow_schema
    source, table, checkpoint = tmp_path / "src", str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "chk")
    source.mkdir()
    old = pa.schema([("id", pa.int64()), ("name", pa.string())])
    new = old.append(pa.field("score", pa.float64()))

    def run(schema, options):
        options = dict(options, **{"commit.mode": commit})
        df = spark.readStream.schema(from_arrow_schema(schema)).option("maxFilesPerTrigger", 1).parquet(str(source))
        if mode == "fast":
            query = lakesink.stream(df, table, checkpoint=checkpoint, trigger="availableNow", options=options)
        else:
            writer = df.writeStream.format("paimon").option("checkpointLocation", checkpoint)
            for key, value in options.items():
                writer = writer.option(key, value)
            query = writer.trigger(availableNow=True).start(table)
        assert query.awaitTermination(300)
        assert query.exception() is None, query.exception()
        if mode == "fast":
            query.lakesink_sink.close()  # pipelined: commits still running in the background
        elif commit == "pipelined":
            lakesink.await_commits(checkpoint)

    for k in range(2):
        pq.write_table(pa.table({"id": [k], "name": [f"r{k}"]}, schema=old), source / f"{k}.parquet")
        os.utime(source / f"{k}.parquet", (1_700_000_000 + k,) * 2)
    run(old, {})
    for k in range(2, 4):  # the source gains a column; the query restarts on its checkpoint
        pq.write_table(pa.table({"id": [k], "name": [f"r{k}"], "score": [k / 2]}, schema=new),
                       source / f"{k}.parquet")
        os.utime(source / f"{k}.parquet", (1_700_000_000 + k,) * 2)
    run(new, {"write.merge-schema": "true"})

    rows = read_table(table).sort_by("id").to_pylist()
    assert rows == [{"id": 0, "name": "r0", "score": None}, {"id": 1, "name": "r1", "score": None},
                    {"id": 2, "name": "r2", "score": 1.0}, {"id": 3, "name": "r3", "score": 1.5}]
    assert schema_files(table) == ["schema-0", "schema-1"]
    assert [s.commit_identifier for s in snapshots(table)] == [0, 1, 2, 3]  # one snapshot per batch
    assert [s.schema_id for s in snapshots(table)] == [0, 0, 1, 1]


def test_replace_table_as_with_a_new_column_in_place_and_atomically(spark, table_path):
    lakesink.create_table_as(spark.createDataFrame([(1, "a")], "id int, s string"), table_path)
    wider = spark.createDataFrame([(2, "b", 2.5)], "id long, s string, x double")

    # In place (no atomic rename): an overwrite that evolves the schema, history kept.
    lakesink.replace_table_as(wider, table_path, options={"ctas.atomicity-enabled": "false"})
    assert read_table(table_path).to_pylist() == [{"id": 2, "s": "b", "x": 2.5}]
    assert schema_files(table_path) == ["schema-0", "schema-1"]
    with pytest.raises(SchemaMismatchError, match="never drops a column"):  # in place cannot drop
        lakesink.replace_table_as(spark.createDataFrame([(3,)], "id long"), table_path,
                                  options={"ctas.atomicity-enabled": "false"})

    # Atomic: a new table (its own schema 0) swapped in; any schema goes, columns may go.
    lakesink.replace_table_as(spark.createDataFrame([(3,)], "id long"), table_path)
    assert read_table(table_path).to_pylist() == [{"id": 3}]
    assert schema_files(table_path) == ["schema-0"]


def test_a_primary_key_table_gains_a_value_column_and_never_retypes_its_key(spark, table_path):
    lakesink.write(spark.createDataFrame([(1, "a"), (2, "b")], "id int, s string"), table_path,
                   primary_key=["id"], options={"bucket": "2"})
    lakesink.write(spark.createDataFrame([(2, "B", 2.5), (3, "c", 3.5)], "id int, s string, x double"),
                   table_path, options={"write.merge-schema": "true"})
    assert read_table(table_path).sort_by("id").to_pylist() == [
        {"id": 1, "s": "a", "x": None}, {"id": 2, "s": "B", "x": 2.5}, {"id": 3, "s": "c", "x": 3.5}]
    with pytest.raises(SchemaMismatchError, match="a primary-key column's type never changes"):
        lakesink.write(spark.createDataFrame([(4, "d", 1.0)], "id long, s string, x double"), table_path,
                       options={"write.merge-schema": "true"})
    assert schema_files(table_path) == ["schema-0", "schema-1"]
