"""What a stream keeps between micro-batches (no Spark): manifests already read, committables
already encoded.

Tables are written by pypaimon's own writer; every answer is compared with pypaimon's
uncached manifest reader.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager

from lakesink.paimon.keyed.layout import sequences_and_buckets
from lakesink.paimon.commit.live_files import live_entries
from lakesink.paimon.table.tables import open_table
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


def test_files_an_overwrite_removed_are_gone_from_the_cached_read_too(tmp_path, monkeypatch):
    """A snapshot whose one new manifest deletes files (an overwrite): the cached read, which
    reads that one manifest without a thread pool, drops what it deletes as pypaimon does."""
    path = new_table(tmp_path)
    for start in (0, 10):
        append(path, range(start, start + 10))
    assert as_rows(live_entries(open_table(path))) == uncached(path)  # the cache is warm
    table = open_table(path)
    builder = table.new_batch_write_builder().overwrite()
    write, commit = builder.new_write(), builder.new_commit()
    try:
        write.write_arrow(pa.table({"id": [100, 101], "v": ["a", "b"]}, schema=SCHEMA))
        commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()
    pools = []
    real_pool = ManifestFileManager.read_entries_parallel
    monkeypatch.setattr(ManifestFileManager, "read_entries_parallel",
                        lambda self, *a, **k: pools.append(1) or real_pool(self, *a, **k))
    got = as_rows(live_entries(open_table(path)))
    monkeypatch.undo()
    assert got == uncached(path) and len(got) >= 1
    assert not pools  # one new manifest: read here, not through pypaimon's pool
    assert all(name.startswith("data-") for _, _, name, _ in got)


def test_sequence_numbers_continue_above_every_live_file(tmp_path):
    path = new_table(tmp_path)
    append(path, range(10))
    before, _ = sequences_and_buckets(open_table(path))
    append(path, range(10))  # the same keys again, in both buckets
    after, buckets = sequences_and_buckets(open_table(path))
    expected: dict[tuple, int] = {}
    for partition, bucket, _name, top in uncached(path):
        expected[(partition, bucket)] = max(expected.get((partition, bucket), 0), top + 1)
    assert after == expected
    assert all(after[k] > before[k] for k in before)
    assert buckets == 2  # every file has the table's bucket count


def test_a_file_encoded_again_after_its_schema_or_level_changed_says_so(tmp_path):
    """Committable encodings are remembered per file; a new level or schema is a new encoding."""
    import dataclasses

    from lakesink.paimon import PaimonTarget
    from tests.unit.test_bucket_check_restore import new_table as new_keyed_table, rows, staged_batch

    path = new_keyed_table(tmp_path / "k")
    target = PaimonTarget(path)
    staged = staged_batch(path, rows((1, "a"), (2, "b")))[0]
    fields = ("file_name", "level", "schema_id", "row_count", "min_sequence_number", "max_sequence_number")
    back = target.decode(target.encode(staged)).meta
    assert all(getattr(back, k) == getattr(staged.meta, k) for k in fields)
    assert target.encode(staged) == target.encode(staged)
    for change in ({"level": 3}, {"schema_id": 7, "value_stats_cols": ["id", "v"]}):
        changed = dataclasses.replace(staged, meta=dataclasses.replace(staged.meta, **change))
        decoded = target.decode(target.encode(changed)).meta
        assert all(getattr(decoded, k) == v for k, v in change.items()), change


def test_an_encoding_made_where_the_file_was_described_is_the_drivers_own(tmp_path):
    """Tasks encode their files' committables (`with_encoding`), so the committing driver does
    not: the carried message must be the one the driver would make, partition keys in their own
    order; a decoded file carries its message; a file whose level changed is encoded afresh."""
    import dataclasses

    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    from lakesink.paimon import PaimonTarget
    from lakesink.paimon.files.datafiles import StagedFile, TableLayout, with_encoding

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()),
                        pa.field("day", pa.string(), nullable=False), pa.field("hour", pa.int32(), nullable=False)])
    catalog = CatalogFactory.create({"warehouse": str(tmp_path)})
    catalog.create_database("db", True)
    catalog.create_table("db.p", Schema.from_pyarrow_schema(schema, partition_keys=["hour", "day"],
                                                            primary_keys=["id", "day", "hour"],
                                                            options={"bucket": "2"}), False)
    path = f"{tmp_path}/db.db/p"
    table = open_table(path)
    write = table.new_batch_write_builder().new_write()
    try:
        write.write_arrow(pa.table({"id": [1, 2], "v": ["a", "b"], "day": ["d1", "d2"], "hour": [3, 4]},
                                   schema=schema))
        messages = write.prepare_commit()
    finally:
        write.close()
    files = [StagedFile(partition=tuple(m.partition), bucket=m.bucket, meta=f, staged_path=None)
             for m in messages for f in m.new_files]
    assert len(files) == 2
    layout = TableLayout.of(table)
    for staged in files:
        carried = with_encoding(dataclasses.replace(staged), layout)
        assert carried.encoded[1] == PaimonTarget(path).encode(staged)["message"]  # a fresh target: no cache
        decoded = PaimonTarget(path).decode(PaimonTarget(path).encode(carried))
        assert decoded.encoded == carried.encoded and decoded.partition == staged.partition
        moved = dataclasses.replace(carried, meta=dataclasses.replace(carried.meta, level=2))
        again = PaimonTarget(path).decode(PaimonTarget(path).encode(moved))
        assert again.meta.level == 2 and again.encoded[1] != carried.encoded[1]


def test_a_commit_message_is_encoded_byte_for_byte_as_pypaimon_serializes_it(tmp_path):
    """`message_bytes` lays out the rows itself (pypaimon's serializer is ~1 ms a file): the same
    bytes as pypaimon's `serialize_commit_message` for keyed and append files, changelog files,
    partitions of several types, stats of every column kind, optional fields set and unset."""
    import dataclasses
    import datetime as dt
    from decimal import Decimal

    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.data.timestamp import Timestamp
    from pypaimon.schema.schema import Schema
    from pypaimon.write.commit_message import CommitMessage
    from pypaimon.write.commit_message_serializer import serialize_commit_message

    from lakesink.paimon.files.datafiles import StagedFile, TableLayout, message_bytes, with_encoding

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("d", pa.decimal128(20, 3)),
                        ("ts", pa.timestamp("us")), ("f", pa.float64()), ("b", pa.binary()),
                        pa.field("day", pa.date32(), nullable=False), pa.field("hour", pa.int32(), nullable=False)])
    catalog = CatalogFactory.create({"warehouse": str(tmp_path)})
    catalog.create_database("db", True)
    checked = 0
    for name, keys, options in (("k", ["id", "day", "hour"], {"bucket": "2"}), ("a", [], {"bucket": "-1"})):
        catalog.create_table(f"db.{name}", Schema.from_pyarrow_schema(
            schema, partition_keys=["hour", "day"], primary_keys=keys, options=options), False)
        table = open_table(f"{tmp_path}/db.db/{name}")
        write = table.new_batch_write_builder().new_write()
        try:
            write.write_arrow(pa.table({
                "id": [1, 2, 3], "v": ["a", None, "a much longer string than seven bytes"],
                "d": [Decimal("1.5"), None, Decimal("-12345678901234567.891")],
                "ts": [dt.datetime(2026, 1, 2, 3, 4, 5, 678901), None, dt.datetime(1970, 1, 1)],
                "f": [1.5, float("nan"), None], "b": [b"x", b"0123456789", None],
                "day": [dt.date(2026, 11, 26)] * 3, "hour": [3, 3, 4]}, schema=schema))
            messages = write.prepare_commit()
        finally:
            write.close()
        layout = TableLayout.of(table)
        for m in messages:
            for meta in m.new_files:
                variants = [meta, dataclasses.replace(meta, level=4, extra_files=["x.index"], delete_row_count=None,
                                                      value_stats_cols=["id", "v"], first_row_id=7,
                                                      creation_time=Timestamp.from_epoch_millis(1_700_000_000_123),
                                                      write_cols=["id"], write_cols_sequences=[1, None, 3],
                                                      embedded_index=b"\x01\x02", external_path="s3://b/f.parquet",
                                                      key_stats=None)]
                for variant in variants:
                    for changelog in (False, True):
                        staged = StagedFile(partition=tuple(m.partition), bucket=m.bucket, meta=variant,
                                            staged_path=None, changelog=changelog)
                        expected = serialize_commit_message(CommitMessage(
                            partition=staged.partition, bucket=staged.bucket,
                            new_files=[] if changelog else [variant],
                            changelog_files=[variant] if changelog else []), layout.partition_fields)
                        assert message_bytes(staged, layout.partition_fields) == expected
                        # and with its rows already in binary form, as tasks carry them
                        encoded = with_encoding(dataclasses.replace(staged), layout)
                        assert message_bytes(encoded, layout.partition_fields) == expected
                        checked += 1
    assert checked >= 8
    with pytest.raises(ValueError, match="arity"):
        message_bytes(staged, [])
