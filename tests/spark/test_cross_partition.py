"""scratch"""
from __future__ import annotations

import pytest

import lakesink
from tests.helpers import read_table

pytestmark = pytest.mark.spark

SCHEMA = "user_id long, region string, name string, score long"


def _by_key(path):
    rows = read_table(path).to_pylist()
    keys = [r["user_id"] for r in rows]
    assert len(set(keys)) == len(keys), f"a key was returned twice: {sorted(keys)}"
    return {r["user_id"]: (r["region"], r["name"], r["score"]) for r in rows}


def test_scratch(spark, tmp_path):
    import time
    path = str(tmp_path / "wh" / "shop.db" / "profiles")
    t = time.time()
    rows = [(i, "eu" if i % 2 == 0 else "us", f"a{i}", i) for i in range(10)]
    lakesink.write(spark.createDataFrame(rows, SCHEMA), path, primary_key=["user_id"], partition_by=["region"],
                   options={"dynamic-bucket.target-row-num": "3"})
    print("first", time.time() - t)
    print(_by_key(path))
    t = time.time()
    rows = [(0, "us", "b0", 100), (1, "eu", "b1", 101), (2, "eu", "b2", 102), (20, "ap", "b20", 120),
            (5, "eu", "c5", 5), (5, "ap", "d5", 5), (30, "eu", "x", 1), (30, "us", "y", 2)]
    lakesink.write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path)
    print("second", time.time() - t)
    print(_by_key(path))
