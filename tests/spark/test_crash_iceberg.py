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
