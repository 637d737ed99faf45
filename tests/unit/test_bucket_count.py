"""A table whose bucket count changed under its files (Paimon's `ALTER TABLE ... SET
('bucket' = 'N')` before a rescale rewrote the partitions): a keyed write planned with the new
count into a partition whose files still have the old one is refused at its commit, naming both
counts, and the table is left as it was. Without Spark: lakesink's keyed task writer and commit."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakesink.errors import CommitConflictError
from lakesink.options import WriteOptions
from lakesink.paimon.write.keyed_plan import prepare_keyed_target
from lakesink.paimon.table.tables import open_table
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


def planned_write(path: str, tmp_path, ids):
    """A lakesink keyed write planned and written, not committed: (target, its files)."""
    target, layout, spec, next_sequence = prepare_keyed_target(path, SCHEMA, WriteOptions.parse({}))
    writer = KeyedTaskWriter(KeyedTaskSpec(str(tmp_path / "staging"), layout, spec,
                                           KeyedPlan(next_sequence, target.bucket_check_from)), 0, "task")
    writer.write(pa.table({"id": list(ids), "v": [f"lakesink-{i}" for i in ids]}, schema=SCHEMA))
    return target, writer.finish()


def ids_in_bucket(path: str, bucket: int, count: int) -> list[int]:
    """Keys Paimon's bucket function puts into `bucket` of the table (pypaimon's, not ours)."""
    from pypaimon.write.row_key_extractor import FixedBucketRowKeyExtractor
    table = open_table(path)
    candidates = pa.record_batch({"id": pa.array(range(1000), pa.int64()), "v": ["x"] * 1000}, schema=SCHEMA)
    _, buckets = FixedBucketRowKeyExtractor(table.table_schema).extract_partition_bucket_batch(candidates)
    return [i for i, b in zip(range(1000), buckets) if b == bucket][:count]


def test_a_commit_planned_on_one_bucket_count_reads_no_files_for_the_count_check(tmp_path, monkeypatch):
    """The plan saw every file with the table's count and nothing landed since: the commit's
    bucket-count check needs no read of the partitions' files (a stream's every micro-batch)."""
    from lakesink.paimon.commit import live_files

    _, path = new_table(tmp_path, buckets=2)
    pypaimon_append(open_table(path), pa.table({"id": list(range(10)), "v": ["paimon"] * 10}, schema=SCHEMA))
    target, files = planned_write(path, tmp_path, range(5, 15))
    assert target.uniform_buckets == 2
    reads = []
    real = live_files.live_entries
    monkeypatch.setattr(live_files, "live_entries", lambda *a, **k: reads.append(a) or real(*a, **k))
    target.commit("lakesink-test", 1, files)
    assert reads == []
    assert sorted(read_table(path).column("id").to_pylist()) == list(range(15))


def test_a_partition_rescaled_after_the_plan_is_read_again_and_refused(tmp_path):
    """Planned on a 4-bucket table whose files all had 4 buckets; before the commit another writer
    rescales the partition to 2 buckets (ALTER, INSERT OVERWRITE) and sets the option back to 4.
    The rescale wrote none of this write's buckets, so only its files' bucket count tells: the
    commit reads the partition again, and pypaimon's check refuses it. Nothing committed."""
    from pypaimon.schema.schema_change import SchemaChange

    catalog, path = new_table(tmp_path, buckets=4)
    pypaimon_append(open_table(path), pa.table({"id": list(range(40)), "v": ["paimon"] * 40}, schema=SCHEMA))
    target, files = planned_write(path, tmp_path, ids_in_bucket(path, 3, 5))
    assert {f.bucket for f in files} == {3} and target.uniform_buckets == 4

    rescale(catalog, path, 2, range(40))
    catalog.alter_table("db.t", [SchemaChange.set_option("bucket", "4")], False)
    before_rows, before_snapshots = read_table(path).sort_by("id"), [s.id for s in snapshots(path)]
    assert {e.bucket for e in _live(path)} <= {0, 1}  # the rescale wrote buckets 0 and 1 only

    with pytest.raises(CommitConflictError, match=r"without rescaling"):
        target.commit("lakesink-test", 1, files)
    assert [s.id for s in snapshots(path)] == before_snapshots
    assert read_table(path).sort_by("id").equals(before_rows)


def rescale(catalog, path: str, buckets: int, ids=None, only_bucket: int | None = None) -> None:
    """Paimon's rescale: the `bucket` option changed, then the partition written anew by
    pypaimon's INSERT OVERWRITE with the new count (`ids`, or ten keys of `only_bucket`)."""
    from pypaimon.schema.schema_change import SchemaChange
    catalog.alter_table("db.t", [SchemaChange.set_option("bucket", str(buckets))], False)
    if only_bucket is not None:
        ids = ids_in_bucket(path, only_bucket, 10)
    builder = open_table(path).new_batch_write_builder().overwrite({})
    write, commit = builder.new_write(), builder.new_commit()
    try:
        write.write_arrow(pa.table({"id": list(ids), "v": ["rescaled"] * len(list(ids))}, schema=SCHEMA))
        commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()


def _live(path):
    from lakesink.paimon.commit.live_files import live_entries
    return live_entries(open_table(path))


def test_files_bucketed_for_the_count_the_table_had_before_a_rescale_are_refused(tmp_path):
    """Planned and written for 4 buckets (into bucket 1, which 2 buckets have too); the table is
    rescaled to 2 (ALTER, INSERT OVERWRITE) before the commit. The files' rows are in the
    buckets of 4, not of 2: committed under the new count, which their partition now has, they
    would sit in a bucket readers do not look for their keys in. Refused, nothing committed."""
    catalog, path = new_table(tmp_path, buckets=4)
    pypaimon_append(open_table(path), pa.table({"id": list(range(40)), "v": ["paimon"] * 40}, schema=SCHEMA))
    target, files = planned_write(path, tmp_path, ids_in_bucket(path, 1, 5))
    rescale(catalog, path, 2, only_bucket=0)  # the rescaled partition keeps keys of bucket 0 only
    before_rows, before_snapshots = read_table(path).sort_by("id"), [s.id for s in snapshots(path)]

    with pytest.raises(CommitConflictError, match=r"4 buckets.*now has 2") as refused:
        target.commit("lakesink-test", 1, files)
    assert "Nothing was committed" in str(refused.value)
    assert [s.id for s in snapshots(path)] == before_snapshots
    assert read_table(path).sort_by("id").equals(before_rows)
