"""Postpone-bucket tables without Spark: file names as Paimon's postpone writer makes and parses
them, the order the compaction gives versions, a partition's bucket count
(tests/spark/test_postpone_buckets.py writes and compacts real tables)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lakesink.errors import UnsupportedTableError
from lakesink.paimon.compaction.postpone import bucket_count, version_order
from lakesink.paimon.keyed.postpone import file_name, writer_prefix


def _java_writer_prefix(name: str) -> str:
    """PostponeBucketFileStoreWrite.getWriterPrefix: up to and with the last "-w-"."""
    return name[:name.rindex("-w-") + 3]


def _java_write_id(name: str) -> int:
    """PostponeBucketFileStoreWrite.getWriteId: between the last "-s-" before "-w-" and "-w-"."""
    writer = name.rindex("-w-")
    return int(name[name.rindex("-s-", 0, writer) + 3:writer])


def test_file_names_parse_as_paimons_postpone_writer_names():
    user = "lakesink-stream-3f2a-s-9"  # a commit user may itself hold "-s-"
    name = file_name(user, 7, 2)
    assert name.startswith("data--u-lakesink-stream-3f2a-s-9-s-7-w-") and name.endswith("-2.parquet")
    assert _java_writer_prefix(name) == writer_prefix(user, 7)
    assert _java_write_id(name) == 7
    assert file_name(user, 7) != file_name(user, 7)  # a new uuid each time
    assert writer_prefix("a/b c", 1) == "data--u-a_b_c-s-1-w-"  # never a path separator
    assert writer_prefix(None, 2**33 + 5) == "data--u-lakesink-s-5-w-"  # an int, as Java parses it


def _file(name, min_seq, max_seq=None, created=0, size=10, rows=5, level=0, bucket=-2, total=-2):
    meta = SimpleNamespace(file_name=name, min_sequence_number=min_seq,
                           max_sequence_number=min_seq if max_seq is None else max_seq,
                           creation_time=SimpleNamespace(get_millisecond=lambda: created),
                           file_size=size, row_count=rows, level=level)
    return SimpleNamespace(meta=meta, bucket=bucket, total_buckets=total, file_size=size, row_count=rows)


def test_versions_are_ordered_by_commit_then_sequence_numbers():
    a = _file("a", 0, 9, created=50)       # pypaimon's first commit: its writer numbers from 0
    b = _file("b", 10, 19, created=60)     # lakesink, above the live postpone files
    c = _file("c", 0, 4, created=70)       # pypaimon's next commit: from 0 again
    t0 = _file("t0", 20, created=90)       # one format("paimon") write: task 1 above task 0,
    t1 = _file("t1", 20 + (1 << 24), created=80)  # whatever the order the tasks ended in
    old = _file("old", 100, created=1)     # its snapshot expired: oldest
    added = {"a": 3, "b": 4, "c": 5, "t0": 7, "t1": 7}
    order = [f.meta.file_name for f in version_order([t1, c, old, b, t0, a], added)]
    assert order == ["old", "a", "b", "c", "t0", "t1"]


def _table(**options):
    return SimpleNamespace(table_path="/wh/t", options=SimpleNamespace(options=SimpleNamespace(to_map=lambda: options)))


def test_a_partition_keeps_the_bucket_count_of_its_real_buckets():
    postpone = [_file("p", 0, size=5 << 30)]
    real = [_file("r0", 3, bucket=0, total=4), _file("r3", 4, bucket=3, total=4)]
    assert bucket_count(_table(**{"postpone.default-bucket-num": "2"}), ("d0",), real, postpone) == 4
    with pytest.raises(UnsupportedTableError, match="different bucket counts"):
        bucket_count(_table(), ("d0",), real + [_file("r1", 5, bucket=1, total=2)], postpone)


def test_a_new_partition_gets_the_default_or_paimons_estimate():
    postpone = [_file("p1", 0, size=600 << 20, rows=30), _file("p2", 0, size=600 << 20, rows=15)]
    assert bucket_count(_table(**{"postpone.default-bucket-num": "3"}), (), [], postpone) == 3
    assert bucket_count(_table(**{"postpone.target-row-num-per-bucket": "10"}), (), [], postpone) == 5
    assert bucket_count(_table(), (), [], postpone) == 2  # 1.2 gb, 1 gb a bucket (Paimon's default)
    assert bucket_count(_table(**{"postpone.target-size-per-bucket": "100 mb"}), (), [], postpone) == 12
    assert bucket_count(_table(), (), [], [_file("tiny", 0, size=1)]) == 1
