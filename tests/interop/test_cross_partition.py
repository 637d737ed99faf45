"""Cross-partition primary-key tables (bucket=-1, a primary key without every partition column)
written by lakesink and by Apache Paimon's own Java writer (its `GlobalIndexAssigner`, bootstrapped
from the table's keys by `IndexBootstrap`), each continuing the other's table.

A key left in two partitions would read twice: every table is read key for key by Java Paimon,
pypaimon and `lakesink.read`; Java reports the bucket mode as CROSS_PARTITION.
"""

from __future__ import annotations

from collections import Counter

import pytest

import lakesink
from tests.helpers import read_table

pytestmark = [pytest.mark.interop, pytest.mark.spark]

COLUMNS = [["user_id", "BIGINT"], ["region", "STRING"], ["name", "STRING"]]
SCHEMA = "user_id long, region string, name string"


def _read_every_way(spark, java_paimon, path, tmp_path) -> dict:
    """{user_id: (region, name)} as Java Paimon, pypaimon and lakesink.read return it; a key read
    twice (left in two partitions) fails."""
    java = [(r["user_id"], (r["region"], r["name"])) for r in java_paimon.read(path, tmp_path / "java")]
    py = [(r["user_id"], (r["region"], r["name"])) for r in read_table(path).to_pylist()]
    lake = [(r.user_id, (r.region, r.name)) for r in lakesink.read(spark, path).collect()]
    for name, rows in (("java", java), ("pypaimon", py), ("lakesink", lake)):
        twice = [k for k, n in Counter(k for k, _ in rows).items() if n > 1]
        assert not twice, f"{name} reads keys {twice[:5]} more than once"
    assert dict(java) == dict(py) == dict(lake)
    return dict(java)


def test_java_reads_lakesinks_cross_partition_table_key_for_key(spark, java_paimon, tmp_path):
    path = str(tmp_path / "shop.db" / "profiles")
    lakesink.write(spark.createDataFrame([(i, ("eu", "us")[i % 2], f"a{i}") for i in range(12)], SCHEMA), path,
                   primary_key=["user_id"], partition_by=["region"], options={"dynamic-bucket.target-row-num": "4"})
    # users 0-3 move (0, 2 to us; 1, 3 to eu), 4 is updated in place, 20 is new
    moves = [(0, "us", "b0"), (1, "eu", "b1"), (2, "us", "b2"), (3, "eu", "b3"), (4, "eu", "b4"), (20, "ap", "b20")]
    lakesink.write(spark.createDataFrame(moves, SCHEMA), path)
    assert java_paimon.mode(path, tmp_path / "mode") == {"bucket": -1, "bucket_mode": "CROSS_PARTITION"}
    want = {i: (("eu", "us")[i % 2], f"a{i}") for i in range(12)}
    want.update({i: (region, name) for i, region, name in moves})
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want


@pytest.mark.full  # several Java runs; the default run reads lakesink's table with Java (above)
def test_java_and_lakesink_continue_each_others_cross_partition_table(spark, java_paimon, tmp_path):
    path = str(tmp_path / "shop.db" / "from_java")
    first = [(i, ("eu", "us")[i % 2], f"j{i}") for i in range(10)]
    java_paimon.replay({"columns": COLUMNS, "primary_key": ["user_id"], "partition": ["region"],
                        "options": {"dynamic-bucket.target-row-num": "3"},
                        "batches": [[["+I", list(r)] for r in first]]}, path, tmp_path / "replay")
    assert java_paimon.mode(path, tmp_path / "mode")["bucket_mode"] == "CROSS_PARTITION"
    want = {i: (region, name) for i, region, name in first}
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want

    # lakesink moves Java's keys (0 to us, 1 to ap), updates one in place, adds new ones
    ours = [(0, "us", "l0"), (1, "ap", "l1"), (2, "eu", "l2"), (30, "ap", "l30"), (31, "eu", "l31")]
    lakesink.write(spark.createDataFrame(ours, SCHEMA), path)
    want.update({i: (region, name) for i, region, name in ours})
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want

    # and Java's assigner, bootstrapped from the table, moves lakesink's keys back
    again = [(0, "eu", "k0"), (30, "us", "k30"), (5, "eu", "k5"), (40, "us", "k40")]
    java_paimon.replay({"columns": COLUMNS, "primary_key": ["user_id"], "partition": ["region"], "options": {},
                        "continue": True, "batches": [[["+I", list(r)] for r in again]]}, path, tmp_path / "replay2")
    want.update({i: (region, name) for i, region, name in again})
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want


@pytest.mark.full
def test_java_reads_lakesinks_cross_partition_dv_table_key_for_key(spark, java_paimon, tmp_path):
    """With deletion vectors a moved key's old row is only marked: Java's reader (no merge across
    files, marked rows skipped) reads each key once, in the partition it moved to last."""
    path = str(tmp_path / "shop.db" / "dv")
    lakesink.write(spark.createDataFrame([(i, ("eu", "us")[i % 2], f"a{i}") for i in range(12)], SCHEMA), path,
                   primary_key=["user_id"], partition_by=["region"],
                   options={"dynamic-bucket.target-row-num": "4", "deletion-vectors.enabled": "true"})
    want = {i: (("eu", "us")[i % 2], f"a{i}") for i in range(12)}
    for moves in ([(0, "us", "b0"), (1, "eu", "b1"), (5, "ap", "b5")],
                  [(0, "eu", "c0"), (1, "us", "c1"), (5, "us", "c5"), (20, "ap", "c20")]):
        lakesink.write(spark.createDataFrame(moves, SCHEMA), path)
        want.update({i: (region, name) for i, region, name in moves})
    assert java_paimon.mode(path, tmp_path / "mode") == {"bucket": -1, "bucket_mode": "CROSS_PARTITION"}
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want
