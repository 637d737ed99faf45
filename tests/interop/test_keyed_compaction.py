"""Primary-key tables compacted by lakesink, read by Apache Paimon's Java reader and paimon-rust:
the same rows as pypaimon reads and as the source's final state, key for key."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

import lakesink
from tests.helpers import pypaimon_append, read_table

from . import rows as R
from .oracle import JavaError

pytestmark = [pytest.mark.interop, pytest.mark.spark]

SCHEMA = "id long, part string, v string, amount decimal(12,2), op string"


def _money(amount) -> str:
    from decimal import Decimal
    return format(Decimal(amount).quantize(Decimal("0.01")), "f")


def _state(batches):
    state = {}
    for rows in batches:
        for i, part, v, amount, op in rows:
            if op == "-D":
                state.pop((i, part), None)
            else:
                state[(i, part)] = (v, _money(amount))
    return state


@pytest.fixture(scope="module")
def compacted(spark, tmp_path_factory):
    """{name: (path, expected {(id, part): (v, amount)})}, written once."""
    from decimal import Decimal

    wh = tmp_path_factory.mktemp("keyed-compacted") / "db.db"
    out = {}
    # deduplicate, with deletes: compacted automatically after the 3rd write (trigger 2), then a
    # 4th write with deletes on top (levels 0 and 2 mixed: "mixed"), then fully compacted ("full").
    path = str(wh / "dedupe")
    batches = [[(i, "ab"[i % 2], f"w{w}-{i}", Decimal(i * 10 + w) / 4, "+I" if w == 0 else "+U")
                for i in range(w * 10, w * 10 + 30)] for w in range(3)]
    batches.append([(i, "ab"[i % 2], None, None, "-D") for i in range(0, 50, 7)]
                   + [(i, "ab"[i % 2], f"w3-{i}", Decimal(i), "+U") for i in range(1, 50, 5) if i % 7])
    for rows in batches:
        lakesink.write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path, primary_key=["id", "part"],
                       partition_by=["part"], options={"bucket": "3", "rowkind.field": "op",
                                                       "num-sorted-run.compaction-trigger": "2"})
    from lakesink.paimon.compaction.target import live_files
    from lakesink.paimon.table.tables import open_table
    assert {f.meta.level for f in live_files(open_table(path))} == {0, 2}  # num-levels = trigger + 1
    shutil.copytree(path, str(wh / "dedupe_mixed"))
    out["dedupe_mixed"] = (str(wh / "dedupe_mixed"), _state(batches))
    lakesink.compact(spark, path, progress=False)
    out["dedupe_full"] = (path, _state(batches))

    # first-row, written by pypaimon's own writer (level 0 only: invisible), compacted by lakesink
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("part", pa.string(), nullable=False),
                        ("v", pa.string()), ("amount", pa.decimal128(12, 2)), ("op", pa.string())])
    catalog = CatalogFactory.create({"warehouse": str(wh.parent)})
    catalog.create_database("db", True)
    catalog.create_table("db.first_row", Schema.from_pyarrow_schema(
        schema, partition_keys=["part"], primary_keys=["id", "part"],
        options={"bucket": "2", "merge-engine": "first-row", "write-only": "true"}), False)
    table = catalog.get_table("db.first_row")
    first = {}
    for w in range(3):
        rows = [(i, "ab"[i % 2], f"w{w}-{i}", Decimal(i) / 4, "+I") for i in range(w * 5, w * 5 + 12)]
        pypaimon_append(table, pa.table({n: [r[k] for r in rows] for k, n in enumerate(schema.names)}, schema=schema))
        for i, part, v, amount, _ in rows:
            first.setdefault((i, part), (v, _money(amount)))
    path = str(wh / "first_row")
    lakesink.compact(None, path, progress=False)
    out["first_row_full"] = (path, first)

    # deduplicate under Paimon's universal picks (trigger 3, 5 levels): writes of growing and
    # shrinking size leave runs at intermediate levels that still hold deletes (not the highest
    # level: a -D there must hide the older version below).
    path = str(wh / "universal")
    batches = []
    for w, n in enumerate([300, 5, 5, 5, 5, 60, 5, 5, 5, 5, 5]):  # sizes that differ: long values
        rows = [(i, "ab"[i % 2], f"u{w}-{i}-" + "x" * 200, Decimal(w), "+U") for i in range(w * 3, w * 3 + n)]
        rows += [(i, "ab"[i % 2], None, None, "-D") for i in range(w, 60, 13)] if w % 2 else []
        batches.append(rows)
        lakesink.write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path, primary_key=["id", "part"],
                       partition_by=["part"], options={"bucket": "1", "rowkind.field": "op",
                                                       "num-sorted-run.compaction-trigger": "3", "num-levels": "5"})
    levels = {f.meta.level for f in live_files(open_table(path))}
    assert levels & {1, 2, 3}, levels  # a partial pick wrote below the highest level
    out["universal"] = (path, _state(batches))
    return out


def _keyed(rows) -> dict:
    got = {}
    for r in rows:
        key = (r["id"], r["part"])
        assert key not in got, f"key {key} returned twice"
        got[key] = (r["v"], None if r["amount"] is None else str(r["amount"]))
    return got


def test_java_paimon_reads_compacted_keyed_tables_key_for_key(compacted, java_paimon, tmp_path):
    reads = java_paimon.read_many([path for path, _ in compacted.values()], tmp_path)
    for name, (path, expected) in compacted.items():
        got = reads[path]
        if isinstance(got, JavaError):
            raise AssertionError(f"Java Paimon cannot read {name}:\n{got}")
        from_pypaimon = R.from_arrow(read_table(path))
        assert _keyed(from_pypaimon) == expected, name
        assert _keyed(got) == expected, name
        R.assert_same_rows(got, from_pypaimon, f"Java Paimon reading {name}")


def test_paimon_rust_reads_compacted_keyed_tables_key_for_key(compacted, rust_paimon):
    for name, (path, expected) in compacted.items():
        assert _keyed(R.from_arrow(rust_paimon.read(path))) == expected, name
