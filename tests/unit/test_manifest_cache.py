"""Live files and sequence numbers read only the manifests added since the last read (no Spark).

Tables are written by pypaimon's own writer; every answer is compared with pypaimon's
uncached manifest reader.
"""

from __future__ import annotations

import pyarrow as pa
from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager

from lakesink.paimon.keyed import next_sequence_numbers
from lakesink.paimon.maintenance.metadata import live_entries
from lakesink.paimon.tables import open_table
from tests.helpers import pypaimon_append

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def new_table(warehouse) -> str:
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table("db.t", Schema.from_pyarrow_schema(SCHEMA, primary_keys=["id"],
                                                            options={"bucket": "2"}), False)
    return f"{warehouse}/db.db/t"


def append(path: str, ids) -> None:
    pypaimon_append(open_table(path), pa.table({"id": list(ids), "v": [str(i) for i in ids]}, schema=SCHEMA))


def uncached(path: str) -> list[tuple]:
    table = open_table(path)
    snapshot = table.snapshot_manager().get_latest_snapshot()
    entries = ManifestFileManager(table).read_entries_parallel(
        ManifestListManager(table).read_all(snapshot), drop_stats=False)
    return sorted((tuple(e.partition.values), e.bucket, e.file.file_name, e.file.max_sequence_number)
                  for e in entries)


def as_rows(entries) -> list[tuple]:
    return sorted((tuple(e.partition.values), e.bucket, e.file.file_name, e.file.max_sequence_number)
                  for e in entries)


def test_a_second_read_opens_only_the_manifests_of_new_commits(tmp_path, monkeypatch):
    path = new_table(tmp_path)
    for start in (0, 10, 20):
        append(path, range(start, start + 10))
    reads = []
    real_read = ManifestFileManager.read

    def counting_read(self, name, *args, **kwargs):
        reads.append(name)
        return real_read(self, name, *args, **kwargs)

    monkeypatch.setattr(ManifestFileManager, "read", counting_read)
    assert as_rows(live_entries(open_table(path))) == uncached(path)
    first = len(reads)
    assert first >= 3  # one manifest per commit at least, all read once

    reads.clear()
    append(path, range(5, 15))  # updates keys in both buckets: a new manifest
    table = open_table(path)
    manifests = {m.file_name for m in ManifestListManager(table).read_all(
        table.snapshot_manager().get_latest_snapshot())}
    reads.clear()  # pypaimon's own commit reads manifests too: count only ours
    assert as_rows(live_entries(table)) == uncached(path)
    ours = [r for r in reads if r in manifests]
    assert 1 <= len(ours) < first  # the new commit's manifest, not the whole table again


def test_sequence_numbers_continue_above_every_live_file(tmp_path):
    path = new_table(tmp_path)
    append(path, range(10))
    before = next_sequence_numbers(open_table(path))
    append(path, range(10))  # the same keys again, in both buckets
    after = next_sequence_numbers(open_table(path))
    expected: dict[tuple, int] = {}
    for partition, bucket, _name, top in uncached(path):
        expected[(partition, bucket)] = max(expected.get((partition, bucket), 0), top + 1)
    assert after == expected
    assert all(after[k] > before[k] for k in before)
