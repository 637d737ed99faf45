"""Iceberg metadata (`metadata.iceberg.storage=table-location`) through lakesink's commit core, without
Spark: rebuilt idempotently, never moved back by a slower writer, kept by orphan removal, covering files
other writers added; the schema mapping's names and refusals. Read back with pyiceberg where it matters."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest
from pypaimon import CatalogFactory, Schema
from pypaimon.schema.data_types import AtomicType, DataField, RowType

from lakesink.paimon import maintenance
from lakesink.paimon.iceberg import schema as ice_schema, sync
from lakesink.paimon.table import tables
from tests import iceberg_oracle
from tests.helpers import pypaimon_append, read_table
from tests.unit.test_maintenance import Writer

ICEBERG = {"metadata.iceberg.storage": "table-location"}


def listing(path: str) -> dict[str, bytes]:
    directory = os.path.join(path, "metadata")
    return {n: open(os.path.join(directory, n), "rb").read() for n in sorted(os.listdir(directory))}


def test_a_refresh_run_again_writes_the_same_files_and_no_more(table_path):
    writer = Writer(table_path, ICEBERG, partition=["dt"])
    writer.commit(3)
    writer.commit(2, dt_value="2024-01-02")
    before = listing(table_path)
    assert {"v1.metadata.json", "v2.metadata.json", "version-hint.text"} <= set(before)
    # Lost its newest version (a crash after the snapshot): rebuilt byte for byte, under the same names.
    os.remove(os.path.join(table_path, "metadata", "v2.metadata.json"))
    os.remove(os.path.join(table_path, "metadata", [n for n in before if n.startswith("snap-2-")][0]))
    assert sync.refresh(tables.open_table(table_path)) == 2
    assert listing(table_path) == before
    assert sync.refresh(tables.open_table(table_path)) == 2
    assert listing(table_path) == before


def test_a_slower_refresh_of_an_older_snapshot_never_moves_the_hint_back(table_path):
    writer = Writer(table_path, ICEBERG)
    for _ in range(3):
        writer.commit(1)
    table = tables.open_table(table_path)
    older = table.snapshot_manager().get_snapshot_by_id(2)
    sync._advance_hint(table, older)  # what a writer that saw snapshot 2 as latest does last
    assert open(os.path.join(table_path, "metadata", "version-hint.text")).read() == "3"


def _metadata_calls(monkeypatch, directory: str) -> dict[str, int]:
    """Counts of the listings of `directory` and of the statuses of files in it, from now on."""
    calls = {"listdir": 0, "scandir": 0, "stat": 0}
    for name in calls:
        real = getattr(os, name)

        def counted(path=".", *args, _real=real, _name=name, **kwargs):
            target = os.path.normpath(os.fspath(path))
            if target == directory or (_name == "stat" and os.path.dirname(target) == directory):
                calls[_name] += 1
            return _real(path, *args, **kwargs)
        monkeypatch.setattr(os, name, counted)
    return calls


def test_a_refresh_lists_the_metadata_directory_once_and_stats_no_version_it_lists(table_path, monkeypatch):
    writer = Writer(table_path, ICEBERG)
    directory = os.path.normpath(os.path.join(table_path, "metadata"))
    stats = []
    for kept in (3, 9):  # versions kept before the commit: each is three files in the directory
        while not os.path.exists(os.path.join(directory, f"v{kept}.metadata.json")):
            writer.commit(1)
        with monkeypatch.context() as patch:
            calls = _metadata_calls(patch, directory)
            writer.commit(1)  # its refresh writes the next version
        assert calls["listdir"] + calls["scandir"] == 1
        stats.append(calls["stat"])
    assert len(os.listdir(directory)) > 3 * 9
    assert stats[0] == stats[1]  # the files a refresh stats do not grow with the versions kept


def test_orphan_removal_keeps_the_iceberg_metadata(table_path):
    writer = Writer(table_path, ICEBERG)
    writer.commit(2)
    writer.commit(2)
    before = listing(table_path)
    maintenance.remove_orphans(table_path, older_than=dt.timedelta(0))
    assert listing(table_path) == before


def test_files_another_writer_added_are_listed_by_lakesinks_next_commit(table_path, tmp_path):
    iceberg_oracle.require()
    writer = Writer(table_path, ICEBERG, partition=["dt"])
    writer.commit(2)
    pypaimon_append(tables.open_table(table_path), pa.table({"id": [100, 101], "dt": ["x", "y"]}))
    rows, info = iceberg_oracle.read(tmp_path, table_path)
    assert len(rows) == 2 and info["snapshot_id"] == 1  # pypaimon wrote no Iceberg metadata
    writer.commit(1)
    rows, info = iceberg_oracle.read(tmp_path, table_path)
    assert sorted(rows.column("id").to_pylist()) == sorted(read_table(table_path).column("id").to_pylist())
    assert info["snapshot_id"] == 3 and info["summary"]["total-records"] == "5"
    assert info["summary"]["added-records"] == "1" and info["summary"]["paimon.commit-user"] == "writer"


def test_the_name_mapping_keeps_every_name_a_field_had():
    old = [DataField(0, "id", AtomicType("BIGINT")),
           DataField(1, "point", RowType(True, [DataField(2, "x", AtomicType("INT"))]))]
    new = [DataField(0, "key", AtomicType("BIGINT")),
           DataField(1, "point", RowType(True, [DataField(2, "x2", AtomicType("INT"))])),
           DataField(3, "extra", AtomicType("STRING"))]
    assert ice_schema.name_mapping([old, new]) == [
        {"field-id": 0, "names": ["key", "id"]},
        {"field-id": 1, "names": ["point"], "fields": [{"field-id": 2, "names": ["x2", "x"]}]},
        {"field-id": 3, "names": ["extra"]}]


def test_the_key_value_columns_of_keyed_files_are_mapped_to_the_ids_paimon_gives_them():
    old = [DataField(0, "id", AtomicType("BIGINT")), DataField(1, "v", AtomicType("STRING"))]
    new = [DataField(0, "key", AtomicType("BIGINT")), DataField(1, "v", AtomicType("STRING"))]
    # Paimon's SpecialFields: _KEY_<k> = Integer.MAX_VALUE / 2 + id; _SEQUENCE_NUMBER, _VALUE_KIND below MAX_VALUE.
    assert ice_schema.key_value_mapping([old, new], ["key"]) == [
        {"field-id": 1073741823, "names": ["_KEY_key", "_KEY_id"]},
        {"field-id": 2147483645, "names": ["_VALUE_KIND"]},
        {"field-id": 2147483646, "names": ["_SEQUENCE_NUMBER"]}]
    assert ice_schema.key_value_mapping([new], []) == []


@pytest.mark.parametrize("type_text, reason", [("TIMESTAMP(9)", "precision 3 to 6"), ("TIME(0)", "TIME"),
                                               ("TIMESTAMP(0)", "precision 3 to 6")])
def test_columns_without_an_iceberg_type_are_named(type_text, reason):
    problem = ice_schema.problem([DataField(0, "c", AtomicType(type_text))], [])
    assert "'c'" in problem and reason in problem


def test_partition_keys_without_an_identity_value_type_are_named():
    fields = [DataField(0, "ts", AtomicType("TIMESTAMP(6)")), DataField(1, "v", AtomicType("INT"))]
    assert "partition column 'ts'" in ice_schema.problem(fields, ["ts"])
    assert ice_schema.problem(fields, ["v"]) is None


def test_a_table_another_engine_created_with_an_unmappable_column_is_refused(warehouse):
    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    schema = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.int32()))])
    catalog.create_table("db.t", Schema.from_pyarrow_schema(schema, options=ICEBERG), False)
    from lakesink.errors import UnsupportedTableError
    with pytest.raises(UnsupportedTableError, match="'tags'.*Nothing was written"):
        sync.check(tables.open_table(str(warehouse / "db.db" / "t")))


@pytest.mark.parametrize("row_filter, ids, files", [
    ("id >= 3", [3, 4], 1), ("id < 1", [0], 1), ("id > 100", [], 0), ("id IS NULL", [], 0),
    ("dt = '2024-01-02'", [3, 4], 1), ("dt >= '2024-01-01'", [0, 1, 2, 3, 4], 2)])
def test_readers_skip_files_by_the_bounds_and_null_counts_and_lose_no_row(table_path, tmp_path, row_filter, ids,
                                                                          files):
    iceberg_oracle.require()
    writer = Writer(table_path, ICEBERG)  # unpartitioned: only the column metrics prune
    writer.commit(3)
    writer.commit(2, dt_value="2024-01-02")
    rows, info = iceberg_oracle.read(tmp_path, table_path, row_filter=row_filter)
    assert sorted(rows.column("id").to_pylist()) == ids
    assert info["files"] == files


def test_bounds_are_iceberg_single_values():
    import datetime as dt
    import decimal

    from lakesink.paimon.iceberg.metrics import encode
    assert encode("int", 1) == b"\x01\x00\x00\x00" and encode("long", -1) == b"\xff" * 8
    assert encode("date", dt.date(1970, 1, 2)) == b"\x01\x00\x00\x00"
    assert encode("decimal(10, 2)", decimal.Decimal("1.50")) == (150).to_bytes(2, "big", signed=True)
    assert encode("decimal(10, 2)", decimal.Decimal("-1.28")) == b"\x80"  # minimal two's complement
    assert encode("decimal(10, 2)", decimal.Decimal("-1.29")) == b"\xff\x7f"
    assert encode("decimal(10, 2)", decimal.Decimal("1.28")) == b"\x00\x80"
    assert encode("decimal(10, 2)", decimal.Decimal("1.27")) == b"\x7f"
    assert encode("decimal(10, 2)", decimal.Decimal("1.005")) is None  # finer than the column: no bound
    assert encode("string", "é") == "é".encode() and encode("boolean", True) == b"\x01"
    assert encode("double", 1.0) is None and encode("timestamp", dt.datetime(2024, 1, 1)) is None


def test_a_commit_that_died_before_its_iceberg_metadata_is_repaired_by_its_replay(table_path, monkeypatch):
    """The snapshot landed, the Iceberg metadata did not (the process died in between): the replay
    of that checkpoint commits nothing and writes the metadata."""
    import lakesink.paimon.iceberg as iceberg_metadata
    from lakesink.protocol.committer import Committer

    writer = Writer(table_path, ICEBERG)
    writer.commit(2)
    monkeypatch.setattr(iceberg_metadata, "refresh", lambda table: (_ for _ in ()).throw(OSError("killed")))
    writer.commit(3)
    assert open(os.path.join(table_path, "metadata", "version-hint.text")).read() == "1"
    monkeypatch.undo()
    # The engine replays checkpoint 1 (the batch whose commit "died"): a fresh committer, same user.
    replay = Committer(writer.target, "writer")
    report = replay.commit(1, [])
    assert report.skipped_replay
    assert open(os.path.join(table_path, "metadata", "version-hint.text")).read() == "2"
    assert os.path.exists(os.path.join(table_path, "metadata", "v2.metadata.json"))


def test_a_batch_job_skipped_as_a_replay_also_repairs_the_iceberg_metadata(table_path, monkeypatch):
    import lakesink.paimon.iceberg as iceberg_metadata
    from lakesink.protocol.committer import Committer

    writer = Writer(table_path, ICEBERG)
    monkeypatch.setattr(iceberg_metadata, "refresh", lambda table: (_ for _ in ()).throw(OSError("killed")))
    writer.commit(2)
    monkeypatch.undo()
    assert not os.path.exists(os.path.join(table_path, "metadata", "v1.metadata.json"))
    assert Committer(writer.target, "writer").skips_as_replay(0, table_path)
    assert os.path.exists(os.path.join(table_path, "metadata", "v1.metadata.json"))


def test_a_name_two_field_ids_had_is_refused():
    old = [DataField(0, "id", AtomicType("BIGINT")), DataField(1, "x", AtomicType("INT"))]
    dropped = [DataField(0, "id", AtomicType("BIGINT"))]
    again = [DataField(0, "id", AtomicType("BIGINT")), DataField(2, "x", AtomicType("INT"))]
    reason = ice_schema.reused_name([old, dropped, again])
    assert "'x' belonged to field 1 and then to field 2" in reason
    renamed = [DataField(0, "key", AtomicType("BIGINT")), DataField(1, "x", AtomicType("INT"))]
    assert ice_schema.reused_name([old, renamed]) is None


def _catalog_table(warehouse, schema: pa.Schema):
    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table("db.t", Schema.from_pyarrow_schema(schema, options=ICEBERG), False)
    return catalog, str(warehouse / "db.db" / "t")


def test_a_renamed_column_reads_by_field_id_in_files_of_both_names(warehouse, tmp_path):
    from pypaimon.schema.schema_change import SchemaChange

    iceberg_oracle.require()
    catalog, path = _catalog_table(warehouse, pa.schema([("id", pa.int64()), ("x", pa.int64())]))
    pypaimon_append(tables.open_table(path), pa.table({"id": [1], "x": [10]}))
    catalog.alter_table("db.t", [SchemaChange.rename_column("x", "y")])
    pypaimon_append(tables.open_table(path), pa.table({"id": [2], "y": [20]}))
    assert sync.refresh(tables.open_table(path)) == 2
    rows, info = iceberg_oracle.read(tmp_path, path)
    assert [f[1] for f in info["schema"]] == ["id", "y"]
    assert sorted(zip(rows.column("id").to_pylist(), rows.column("y").to_pylist())) == [(1, 10), (2, 20)]


def test_a_column_dropped_and_added_again_under_its_name_gets_no_iceberg_metadata(warehouse):
    from pypaimon.schema.data_types import AtomicType as Atomic
    from pypaimon.schema.schema_change import SchemaChange

    from lakesink.errors import UnsupportedTableError
    catalog, path = _catalog_table(warehouse, pa.schema([("id", pa.int64()), ("x", pa.int64())]))
    pypaimon_append(tables.open_table(path), pa.table({"id": [1], "x": [10]}))
    catalog.alter_table("db.t", [SchemaChange.drop_column("x")])
    catalog.alter_table("db.t", [SchemaChange.add_column("x", Atomic("BIGINT"))])
    with pytest.raises(UnsupportedTableError, match="'x' belonged to field 1 and then to field 2"):
        sync.check(tables.open_table(path))
    with pytest.raises(UnsupportedTableError, match="no Iceberg metadata written"):
        sync.refresh(tables.open_table(path))


@pytest.mark.parametrize("path, expected", [
    ("/data/wh/shop.db/orders", "/data/wh/iceberg/shop/orders"),
    ("/data/wh/shop.db/orders/", "/data/wh/iceberg/shop/orders"),
    ("s3://bucket/wh/shop.db/orders", "s3://bucket/wh/iceberg/shop/orders"),
    ("/data/loose/orders", None),  # no <db>.db parent: no warehouse
    ("/data/wh/.db/orders", None),
    ("/shop.db/orders", None),
])
def test_hadoop_catalog_storage_is_the_warehouse_iceberg_directory_paimon_uses(path, expected):
    assert sync.catalog_table_dir(path) == expected


def test_hadoop_catalog_metadata_is_written_to_the_warehouse_and_refreshed_there(warehouse):
    path = str(warehouse / "shop.db" / "orders")
    writer = Writer(path, {"metadata.iceberg.storage": "hadoop-catalog"})
    writer.commit(2)
    writer.commit(3)
    directory = warehouse / "iceberg" / "shop" / "orders" / "metadata"
    assert (directory / "version-hint.text").read_text() == "2"
    assert {"v1.metadata.json", "v2.metadata.json"} <= set(os.listdir(directory))
    assert not os.path.exists(os.path.join(path, "metadata"))
    assert sync.refresh(tables.open_table(path)) == 2
