"""Iceberg metadata under the crash harness: a driver killed after a batch's Paimon snapshot,
before its Iceberg metadata, leaves Iceberg readers one snapshot behind; the restart's replay of that
batch commits nothing and brings the metadata up to the snapshot (no later commit needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import iceberg_oracle
from tests.crash.harness import Case, make_source
from tests.helpers import latest_snapshot_id, read_table

# Two driver starts, ~30 s: the default run shows the same repair without a kill
# (tests/unit/test_iceberg_metadata.py, a replay after a refresh that never ran).
pytestmark = [pytest.mark.spark, pytest.mark.crash, pytest.mark.full]


@pytest.mark.parametrize("mode", ["fast", "native"])
def test_a_driver_killed_between_the_snapshot_and_its_iceberg_metadata(tmp_path, mode):
    iceberg_oracle.require()
    case = Case(tmp_path, mode, "sync", options={"metadata.iceberg.storage": "table-location"})
    make_source(case.source, files=2, rows_per_file=20)
    case.crash("after-snapshot@2")  # the last batch's snapshot landed; the driver died right after
    hint = Path(case.table, "metadata", "version-hint.text").read_text()
    assert int(hint) == latest_snapshot_id(case.table) - 1
    case.finish()
    tally = case.check()
    assert tally.exactly_once, tally.problems
    rows, info = iceberg_oracle.read(tmp_path, case.table)
    assert info["snapshot_id"] == latest_snapshot_id(case.table)
    assert sorted(rows.column("id").to_pylist()) == sorted(read_table(case.table).column("id").to_pylist())


@pytest.mark.parametrize("mode", ["fast", "native"])
def test_a_keyed_table_killed_between_the_snapshot_and_its_iceberg_metadata(tmp_path, mode):
    """The same for a primary-key table compacted fully after every commit
    (`full-compaction.delta-commits=1`): after the restart Iceberg readers read the highest level,
    which then holds every key of the change stream once, as pypaimon reads it."""
    from tests.crash.harness import keyed_state, make_cdc_source

    iceberg_oracle.require()
    case = Case(tmp_path, mode, "sync", cdc=True,
                options={"metadata.iceberg.storage": "table-location", "full-compaction.delta-commits": "1"})
    expected = make_cdc_source(case.source, files=3, keys=30)
    case.crash("after-snapshot@2")
    hint = Path(case.table, "metadata", "version-hint.text").read_text()
    assert int(hint) == latest_snapshot_id(case.table) - 1
    case.finish()
    tally = case.check_keyed(expected)
    assert tally.exactly_once and not tally.problems, tally.problems
    rows, info = iceberg_oracle.read(tmp_path, case.table)
    assert info["snapshot_id"] == latest_snapshot_id(case.table)
    columns = ["id", "name", "grp"]
    got = sorted(zip(*[rows.column(c).to_pylist() for c in columns]))
    assert got == iceberg_oracle.highest_level_rows(case.table, columns)
    assert {r[0]: (r[1], r[2]) for r in got} == keyed_state(case.table) and len(got) == expected.num_rows
