"""Bad input: a clear error naming the problem, and nothing changes (same snapshot, no new file)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lakesink
from tests.helpers import PATHS, write, latest_snapshot_id

pytestmark = pytest.mark.spark




def all_files(path: str) -> set[str]:
    return {os.path.join(root, name) for root, _, names in os.walk(path) for name in names}


class Unchanged:
    """Records a table directory's latest snapshot and files; `check()` asserts both stayed."""

    def __init__(self, path: str):
        self.path = path
        self.snapshot = latest_snapshot_id(path) if os.path.exists(os.path.join(path, "schema")) else None
        self.files = all_files(path)

    def check(self) -> None:
        if self.snapshot is not None:
            assert latest_snapshot_id(self.path) == self.snapshot
        assert all_files(self.path) == self.files


@pytest.fixture()
def table(spark, table_path):
    """An existing table: id BIGINT, s STRING, p STRING partitioned by p, one snapshot."""
    df = spark.createDataFrame([(1, "x", "a")], "id long, s string, p string")
    lakesink.write(df, table_path, partition_by=["p"])
    # The commit's background maintenance reads the metadata some tests then damage: let it end.
    from lakesink.paimon.maintenance.background import maintenance_for
    maintenance_for(table_path).wait(60)
    return table_path


def fails_cleanly(df, path: str, path_kind: str, *patterns: str, mode: str = "append", **options) -> str:
    before = Unchanged(path)
    with pytest.raises(Exception) as info:
        write(df, path, path_kind, mode=mode, **options)
    message = str(info.value)
    for pattern in patterns:
        assert pattern in message, message
    before.check()
    return message


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_missing_column_is_named(spark, table, path_kind):
    df = spark.createDataFrame([(2, "b")], "id long, p string")
    fails_cleanly(df, table, path_kind, "missing column(s) ['s']", "nothing was written")


@pytest.mark.parametrize("path_kind", PATHS)
def test_an_extra_column_is_named(spark, table, path_kind):
    df = spark.createDataFrame([(2, "y", "b", 1.5)], "id long, s string, p string, extra double")
    fails_cleanly(df, table, path_kind, "['extra'] not in the table")


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_retyped_column_is_named_with_both_types(spark, table, path_kind):
    df = spark.createDataFrame([(2, "y", "b")], "id int, s string, p string")
    fails_cleanly(df, table, path_kind, "column 'id' is int32 but the table has int64")


def _pypaimon_table(warehouse, name: str, schema: pa.Schema, rows: list[dict], **schema_args) -> str:
    """A table made by pypaimon itself, with one snapshot written by pypaimon's writer."""
    from pypaimon import CatalogFactory, Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table(f"db.{name}", Schema.from_pyarrow_schema(schema, **schema_args), False)
    table = catalog.get_table(f"db.{name}")
    builder = table.new_batch_write_builder()
    writer, commit = builder.new_write(), builder.new_commit()
    writer.write_arrow(pa.Table.from_pylist(rows, schema))
    commit.commit(writer.prepare_commit())
    writer.close()
    commit.close()
    return str(warehouse / "db.db" / name)


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_null_in_a_not_null_column_is_refused_when_it_arrives(spark, warehouse, path_kind):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    path = _pypaimon_table(warehouse, f"strict_{path_kind}", schema, [{"id": 1, "s": "a"}])
    df = spark.createDataFrame([(None, "b")], "id long, s string")
    fails_cleanly(df, path, path_kind, "NOT NULL column 'id' is null in some row", "Nothing was written")


def test_non_null_data_into_a_not_null_column_is_accepted(spark, warehouse):
    from pyspark.sql import functions as F
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    path = _pypaimon_table(warehouse, "strict_ok", schema, [{"id": 1, "s": "a"}])
    df = spark.range(2, 4).select(F.col("id"), F.lit("b").alias("s"))  # id is NOT NULL in Spark
    lakesink.write(df, path)
    assert latest_snapshot_id(path) == 2


@pytest.mark.parametrize("path_kind", PATHS)
@pytest.mark.parametrize("expression, named", [
    ("interval 1 day as v", "interval"),
    ("parse_json('{\"a\": 1}') as v", "variant"),
    ("array(interval 2 hours) as v", "interval"),
])
def test_a_type_paimon_cannot_store_is_named_for_a_new_table(spark, warehouse, path_kind, expression, named):
    path = str(warehouse / "db.db" / "unstorable")
    df = spark.sql(f"SELECT 1L as id, {expression}")
    fails_cleanly(df, path, path_kind, "column 'v'", named, "Paimon tables written by lakesink cannot store it")
    assert not os.path.exists(os.path.join(path, "schema"))


@pytest.mark.parametrize("path_kind", PATHS)
def test_an_unknown_option_is_named_with_a_suggestion(spark, table, path_kind):
    df = spark.createDataFrame([(2, "y", "b")], "id long, s string, p string")
    fails_cleanly(df, table, path_kind, "Unknown option 'target_file_size'", "'target-file-size'",
                  target_file_size="1mb")


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_malformed_option_is_named_with_its_value(spark, table, path_kind):
    df = spark.createDataFrame([(2, "y", "b")], "id long, s string, p string")
    fails_cleanly(df, table, path_kind, "'commit.identifier'", "'soon'", "an integer",
                  **{"commit.user": "u", "commit.identifier": "soon"})


@pytest.mark.parametrize("path_kind", PATHS)
def test_an_option_contradicting_the_table_is_refused(spark, table, path_kind):
    df = spark.createDataFrame([(2, "y", "b")], "id long, s string, p string")
    fails_cleanly(df, table, path_kind, "partition columns ['s'] differ from the table's ['p']", partition="s")


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_directory_that_is_not_a_paimon_table_is_refused(spark, warehouse, path_kind):
    path = warehouse / "db.db" / "not_paimon"
    path.mkdir(parents=True)
    (path / "part-0000.csv").write_text("id\n1\n")
    fails_cleanly(spark.range(3), str(path), path_kind, "is not a Paimon table (no schema/ directory)")


@pytest.mark.parametrize("path_kind", PATHS)
def test_corrupt_schema_metadata_is_reported_as_such(spark, table, path_kind):
    with open(os.path.join(table, "schema", "schema-0"), "w") as out:
        out.write("{ this is not json")
    files = all_files(table)
    df = spark.createDataFrame([(2, "y", "b")], "id long, s string, p string")
    with pytest.raises(Exception, match="schema cannot be read.*corrupt"):
        write(df, table, path_kind)
    assert all_files(table) == files
    assert not os.path.exists(os.path.join(table, "snapshot", "snapshot-2"))


@pytest.mark.parametrize("mode", ["error", "errorifexists", "ignore"])
def test_the_fast_path_refuses_save_modes_other_than_append_and_overwrite(spark, table, mode):
    df = spark.createDataFrame([(2, "y", "b")], "id long, s string, p string")
    fails_cleanly(df, table, "fast", f"Save mode {mode!r} is not supported", "'append' or 'overwrite'", mode=mode)


@pytest.mark.parametrize("mode", ["error", "ignore"])
def test_the_spark_native_path_refuses_save_modes_other_than_append_and_overwrite(spark, table, mode):
    # Spark itself refuses these for a Python data source, before our writer exists.
    df = spark.createDataFrame([(2, "y", "b")], "id long, s string, p string")
    fails_cleanly(df, table, "native", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE", "Append", mode=mode)


def test_commit_user_without_identifier_is_refused_for_batch_writes(spark, table):
    df = spark.createDataFrame([(2, "y", "b")], "id long, s string, p string")
    fails_cleanly(df, table, "fast", "commit.user='u' needs commit.identifier", **{"commit.user": "u"})


# Spark's entry points for a table that does not exist: the Python API raises TableNotFoundError
# itself; a data source read fails in Spark, which names the error the data source raised.
MISSING_TABLE_READS = {
    "lakesink.read": (lambda spark, path: lakesink.read(spark, path), True),
    "lakesink.read_stream": (lambda spark, path: lakesink.read_stream(spark, path), True),
    "lakesink.compact": (lambda spark, path: lakesink.compact(spark, path, progress=False), True),
    "format(paimon) read": (lambda spark, path: spark.read.format("paimon").load(path).collect(), False),
    "format(paimon) readStream": (lambda spark, path: spark.readStream.format("paimon").load(path), False),
}


@pytest.mark.parametrize("entry", list(MISSING_TABLE_READS))
def test_every_spark_entry_point_reports_a_missing_table_as_table_not_found(spark, tmp_path, entry):
    from lakesink.errors import TableNotFoundError

    path = str(tmp_path / "wh" / "db.db" / "nothing")
    call, raised_here = MISSING_TABLE_READS[entry]
    with pytest.raises(Exception) as info:
        call(spark, path)
    if raised_here:
        assert isinstance(info.value, TableNotFoundError), repr(info.value)
    else:
        assert "TableNotFoundError" in str(info.value) and path in str(info.value), str(info.value)[-2000:]
    assert not os.path.exists(path)
