"""A table whose bucket count changed under its files (Paimon's `ALTER TABLE ... SET
('bucket' = 'N')` before a rescale rewrote the partitions): a keyed write planned with the new
count into a partition whose files still have the old one is refused at its commit, naming both
counts, and the table is left as it was. Without Spark: lakesink's keyed task writer and commit."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakesink.errors import CommitConflictError
from lakesink.options import WriteOptions
from lakesink.paimon.keyed_target import prepare_keyed_target
from lakesink.paimon.tables import open_table
from lakesink.spark.keyed_tasks import KeyedPlan, KeyedTaskSpec, KeyedTaskWriter
from tests.helpers import pypaimon_append, read_table, snapshots

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def new_table(warehouse, buckets: int):
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table("db.t", Schema.from_pyarrow_schema(SCHEMA, primary_keys=["id"],
                                                            options={"bucket": str(buckets)}), False)
    return catalog, f"{warehouse}/db.db/t"


def lakesink_write(path: str, tmp_path, identifier: int, ids) -> None:
    target, layout, spec, next_sequence = prepare_keyed_target(path, SCHEMA, WriteOptions.parse({}))
    writer = KeyedTaskWriter(KeyedTaskSpec(str(tmp_path / f"staging-{identifier}"), layout, spec,
                                           KeyedPlan(next_sequence, target.bucket_check_from)), 0, "task")
    writer.write(pa.table({"id": list(ids), "v": [f"lakesink-{i}" for i in ids]}, schema=SCHEMA))
    target.commit("lakesink-test", identifier, writer.finish())


def test_a_write_with_a_bucket_count_the_partitions_files_do_not_have_is_refused(tmp_path):
    from pypaimon.schema.schema_change import SchemaChange

    catalog, path = new_table(tmp_path, buckets=2)
    pypaimon_append(open_table(path), pa.table({"id": list(range(10)), "v": ["paimon"] * 10}, schema=SCHEMA))
    lakesink_write(path, tmp_path, 1, range(5, 15))  # the same count: fine
    before_rows, before_snapshots = read_table(path).sort_by("id"), [s.id for s in snapshots(path)]
    assert before_rows.num_rows == 15

    catalog.alter_table("db.t", [SchemaChange.set_option("bucket", "4")], False)  # no rescale yet
    with pytest.raises(CommitConflictError, match=r"without rescaling") as refused:
        lakesink_write(path, tmp_path, 2, range(100, 120))
    assert "2" in str(refused.value) and "4" in str(refused.value)
    assert [s.id for s in snapshots(path)] == before_snapshots
    assert read_table(path).sort_by("id").equals(before_rows)
