"""Table options lakesink cannot honour are refused before anything is written: at create, at a
write into an existing table, and on a table that already holds them (never accepted and then
ignored, which would hide rows or keep stale metadata)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lakesink
from lakesink.errors import ConfigurationError, UnsupportedOptionError, UnsupportedTableError
from tests.helpers import PATHS, read_table, write
from tests.spark.test_bad_input import Unchanged

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("op", pa.string())])


def rows(spark):
    return spark.createDataFrame([(1, "a", "+I"), (2, "b", "-D")], "id long, v string, op string")


def pypaimon_table(warehouse, name: str, options: dict, primary_keys=()) -> str:
    """A table another engine created (pypaimon here) holding `options`, with one row."""
    from pypaimon import CatalogFactory, Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table(f"db.{name}", Schema.from_pyarrow_schema(SCHEMA, primary_keys=list(primary_keys),
                                                                  options=options), False)
    table = catalog.get_table(f"db.{name}")
    builder = table.new_batch_write_builder()
    writer, commit = builder.new_write(), builder.new_commit()
    writer.write_arrow(pa.table({"id": [0], "v": ["z"], "op": ["+I"]}, schema=SCHEMA))
    commit.commit(writer.prepare_commit())
    writer.close()
    commit.close()
    return str(warehouse / "db.db" / name)


# Deletion vectors are written in primary-key tables of every bucket mode (tests/spark/test_deletion_vectors.py,
# tests/spark/test_dynamic_deletion_vectors.py, test_cross_partition.py, test_postpone_buckets.py) and in
# append tables without row tracking (tests/spark/test_deletion_vectors_append.py).
@pytest.mark.parametrize("path_kind", PATHS)
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed-lookup-changelog", "append-row-tracking"])
def test_deletion_vectors_on_create_are_refused_and_no_table_is_created(spark, table_path, path_kind, keyed):
    options = {"deletion-vectors.enabled": "true",
               **({"primary-key": "id", "bucket": "2", "changelog-producer": "lookup"} if keyed
                  else {"row-tracking.enabled": "true"})}
    with pytest.raises(Exception) as info:
        write(rows(spark), table_path, path_kind, **options)
    assert "deletion-vectors.enabled=true" in str(info.value)
    assert ("changelog-producer=lookup is not written with them" if keyed
            else "not together with row-tracking.enabled=true") in str(info.value)
    assert not os.path.exists(os.path.join(table_path, "schema"))
    assert not os.path.exists(os.path.join(table_path, "snapshot"))


def test_the_python_api_raises_the_typed_error_for_an_unhonoured_option(spark, table_path):
    with pytest.raises(UnsupportedOptionError) as info:
        lakesink.write(rows(spark), table_path, primary_key=["id"],
                       options={"bucket": "2", "deletion-vectors.enabled": "true",
                                "changelog-producer": "lookup"})
    assert info.value.option == "deletion-vectors.enabled"


@pytest.mark.parametrize("path_kind", PATHS)
def test_deletion_vectors_given_to_a_write_into_a_table_without_them_are_refused(spark, table_path, path_kind):
    lakesink.write(rows(spark).drop("op"), table_path, primary_key=["id"], options={"bucket": "2"})
    before = Unchanged(table_path)
    with pytest.raises(Exception, match="deletion-vectors.enabled"):
        write(rows(spark).drop("op"), table_path, path_kind, **{"deletion-vectors.enabled": "true"})
    before.check()


@pytest.mark.parametrize("option, value, options", [
    ("deletion-vectors.enabled", "true", {"bucket": "2", "changelog-producer": "lookup"}),
    ("metadata.iceberg.format-version", "3", {"bucket": "2", "metadata.iceberg.storage": "table-location"}),
    ("compaction.optimization-interval", "1h", {"bucket": "2", "metadata.iceberg.storage": "table-location"})])
def test_a_keyed_table_holding_an_unhonoured_option_is_not_written(spark, warehouse, option, value, options):
    path = pypaimon_table(warehouse, "k", {**options, option: value}, primary_keys=["id"])
    before = Unchanged(path)
    with pytest.raises(UnsupportedTableError, match=f"{option}={value}"):
        lakesink.write(rows(spark).drop("op"), path)
    before.check()


@pytest.mark.parametrize("path_kind", PATHS)
def test_an_append_table_with_iceberg_metadata_in_a_catalog_is_not_written_or_compacted(spark, warehouse,
                                                                                         path_kind):
    path = pypaimon_table(warehouse, "a", {"metadata.iceberg.storage": "hive-catalog"})
    before = Unchanged(path)
    with pytest.raises(Exception, match="Iceberg"):
        write(rows(spark), path, path_kind)
    before.check()
    if path_kind == "fast":
        with pytest.raises(UnsupportedTableError, match="metadata.iceberg.storage"):
            lakesink.compact(spark, path)
        before.check()


@pytest.mark.parametrize("path_kind, option", [
    pytest.param(p, o, id=f"{o}-{p}", marks=pytest.mark.full if (p, o) == ("native", "sequence.field") else ())
    for p in PATHS for o in ("rowkind.field", "sequence.field")])
def test_row_kind_and_sequence_fields_without_a_primary_key_are_refused(spark, table_path, path_kind, option):
    value = "op" if option == "rowkind.field" else "id"
    with pytest.raises(Exception, match=f"{option} applies to primary-key tables only"):
        write(rows(spark), table_path, path_kind, **{option: value})
    assert not os.path.exists(os.path.join(table_path, "schema"))
    # ... also into an existing append table
    write(rows(spark), table_path, path_kind)
    before = Unchanged(table_path)
    with pytest.raises(Exception, match=f"{option} applies to primary-key tables only"):
        write(rows(spark), table_path, path_kind, **{option: value})
    before.check()
    assert sorted(read_table(table_path).column("op").to_pylist()) == ["+I", "-D"]


def test_an_append_table_that_stores_a_row_kind_field_without_a_key_is_not_written(spark, warehouse):
    path = pypaimon_table(warehouse, "r", {"rowkind.field": "op"})
    before = Unchanged(path)
    with pytest.raises(UnsupportedTableError, match="no primary key"):
        lakesink.write(rows(spark), path)
    before.check()


def test_a_write_cannot_add_a_merge_engine_to_a_table_that_has_none(spark, table_path):
    lakesink.write(rows(spark).drop("op"), table_path, primary_key=["id"], options={"bucket": "2"})
    before = Unchanged(table_path)
    with pytest.raises(ConfigurationError, match="merge-engine"):
        lakesink.write(rows(spark).drop("op"), table_path, options={"merge-engine": "first-row"})
    before.check()
    # Paimon's default, named explicitly, is what the table already does: accepted.
    lakesink.write(rows(spark).drop("op"), table_path, options={"merge-engine": "deduplicate"})


# ---------------------------------------------------------------- sequence.snapshot-ordering (Paimon 2.0)

SNAPSHOT_ORDERING = {"sequence.snapshot-ordering": "true"}


@pytest.mark.parametrize("path_kind", PATHS)
def test_snapshot_ordering_is_refused_at_create_and_at_a_write(spark, table_path, path_kind):
    with pytest.raises(Exception, match="sequence.snapshot-ordering=true") as info:
        write(rows(spark).drop("op"), table_path, path_kind, **{"primary-key": "id", "bucket": "2"},
              **SNAPSHOT_ORDERING)
    assert "ordered first by the snapshot that committed them" in str(info.value)
    assert not os.path.exists(os.path.join(table_path, "schema"))
    # ... and given to a write into a keyed table without it
    lakesink.write(rows(spark).drop("op"), table_path, primary_key=["id"], options={"bucket": "2"})
    before = Unchanged(table_path)
    with pytest.raises(Exception, match="sequence.snapshot-ordering=true"):
        write(rows(spark).drop("op"), table_path, path_kind, **SNAPSHOT_ORDERING)
    before.check()
    # false is what lakesink does: accepted
    write(rows(spark).drop("op"), table_path, path_kind, **{"sequence.snapshot-ordering": "false"})


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_keyed_table_holding_snapshot_ordering_is_not_written(spark, warehouse, path_kind):
    path = pypaimon_table(warehouse, f"ordered_{path_kind}", {"bucket": "2", **SNAPSHOT_ORDERING},
                          primary_keys=["id"])
    before = Unchanged(path)
    with pytest.raises(Exception, match="has sequence.snapshot-ordering=true, which lakesink cannot write yet"):
        write(rows(spark).drop("op"), path, path_kind)
    before.check()
    if path_kind == "fast":
        with pytest.raises(UnsupportedTableError, match="sequence.snapshot-ordering"):
            lakesink.write(rows(spark).drop("op"), path)
