"""A `lakesink.write` opens its table once: planning, commit, compaction and maintenance share it."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakesink
from lakesink import storage
from lakesink.paimon.maintenance.background import maintenance_for
from lakesink.paimon.table import tables
from tests.helpers import pypaimon_append, read_table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


@pytest.fixture
def opens(monkeypatch):
    """Every open of a table (`tables.open_table`, which every other way of opening one calls)."""
    calls = []
    original = tables.open_table

    def counting(path, *args, **kwargs):
        calls.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(tables, "open_table", counting)
    return calls


@pytest.mark.parametrize("kind", ["fixed-bucket primary key", "append"])
def test_one_write_into_a_table_with_a_snapshot_opens_it_once(spark, tmp_path, opens, kind):
    path = str(tmp_path / "db.db" / "t")
    keyed = kind != "append"
    # Made by pypaimon, without Spark: the write below is the test's only Spark job.
    table = tables.create_table(path, SCHEMA, [], ["id"] if keyed else [],
                                {"bucket": "2"} if keyed else {"bucket": "-1"})
    pypaimon_append(table, pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=SCHEMA))
    opens.clear()

    report = lakesink.write(spark.createDataFrame([(2, "B"), (3, "c")], "id long, name string"), path)
    maintenance_for(path).wait(timeout=30)  # the background maintenance after the commit counts too

    assert report.rows_added == 2
    assert opens == [storage.normalize(path)], f"{kind}: opened {len(opens)} times"
    rows = sorted((r["id"], r["name"]) for r in read_table(path).to_pylist())
    assert rows == ([(1, "a"), (2, "B"), (3, "c")] if keyed else [(1, "a"), (2, "B"), (2, "b"), (3, "c")])
