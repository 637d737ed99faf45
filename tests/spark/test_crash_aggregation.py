"""An aggregation table fed by a change stream, under driver kills: a micro-batch applied twice
would show at once (every value it carries would be aggregated twice), so the table after
the last restart must equal the source aggregated exactly once, key for key.

`merge-engine=aggregation` with `fields.name.aggregate-function=listagg`: each key's names in
stream order, joined by commas (the source changes a key at most once per file and the stream
reads one file per micro-batch, so stream order is file order). `ignore-delete=true` drops the
stream's deletes, as Paimon does (listagg cannot retract).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.crash.driver import CDC_SCHEMA, SOURCE_SCHEMA
from tests.crash.harness import Case, make_cdc_source

pytestmark = [pytest.mark.spark, pytest.mark.crash]

OPTIONS = {"merge-engine": "aggregation", "fields.name.aggregate-function": "listagg", "ignore-delete": "true"}


def aggregated_once(source_dir) -> pa.Table:
    names: dict[int, list[str]] = {}
    for path in sorted(source_dir.glob("*.parquet")):
        for row in pq.read_table(path, schema=CDC_SCHEMA).to_pylist():
            if row["op"] != "-D" and row["name"]:
                names.setdefault(row["id"], []).append(row["name"])
    ids = sorted(names)
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [",".join(names[i]) for i in ids],
                     "grp": pa.array([i % 3 for i in ids], pa.int32())}, schema=SOURCE_SCHEMA)


# The fast path's merge is Spark's window aggregate, the native path's Arrow code in the tasks:
# both in the soak (each case is ~1.5 min of child Spark runs); the default suite kills
# deduplicate change streams on both paths (test_crash.py, test_crash_format_keyed.py).
@pytest.mark.soak
@pytest.mark.parametrize("mode", ["fast", "native"])
def test_an_aggregation_table_killed_mid_protocol_aggregates_every_change_exactly_once(tmp_path, mode):
    points = ["before-snapshot@2", "after-snapshot@2"]
    case = Case(tmp_path, mode, "sync", cdc=True, options=OPTIONS)
    make_cdc_source(case.source, files=len(points) + 3)
    expected = aggregated_once(case.source)
    for point in points:
        case.crash(point)
    case.finish()
    tally = case.check_keyed(expected)
    print(f"\naggregation {mode}: {tally.summary()}")
    assert tally.exactly_once and not tally.problems, tally.problems
    assert tally.rows_checked == expected.num_rows > 0
