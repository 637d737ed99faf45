"""Row tracking (`row-tracking.enabled`): lakesink's writes continue Paimon's row ids, and nothing
lakesink does gives an existing row a new `_ROW_ID` (its compaction would, so it is refused or
left out). Row ids read back with pypaimon."""

from __future__ import annotations

import pytest

import lakesink
from lakesink.errors import ConfigurationError, UnsupportedTableError
from tests.spark.test_bad_input import Unchanged

pytestmark = pytest.mark.spark


def row_ids(path: str) -> dict[int, int]:
    """id → _ROW_ID, read by pypaimon."""
    from lakesink.paimon.table.tables import open_table

    table = open_table(path)
    builder = table.new_read_builder().with_projection(["id", "_ROW_ID"])
    data = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    return dict(zip(data.column("id").to_pylist(), data.column("_ROW_ID").to_pylist()))


def test_row_ids_stay_through_small_appends_and_compaction_is_refused(spark, table_path, tmp_path):
    for i in range(4):
        lakesink.write(spark.range(i * 10, i * 10 + 10), table_path, options={"row-tracking.enabled": "true"})
    before = row_ids(table_path)
    assert sorted(before.values()) == list(range(40))
    unchanged = Unchanged(table_path)
    with pytest.raises(UnsupportedTableError, match="row-tracking"):
        lakesink.compact(spark, table_path)
    unchanged.check()
    with pytest.raises(ConfigurationError, match="row-tracking"):
        lakesink.write(spark.range(40, 50), table_path, options={"aggregator.enabled": "true"})
    unchanged.check()
    # A stream's compaction after each micro-batch (on for append tables) leaves such a table
    # alone: with 4 + 3 small files it would otherwise merge them (compaction.min.file-num=5).
    source = tmp_path / "source"
    for i in range(3):
        spark.range(40 + i * 10, 50 + i * 10).write.parquet(str(source / f"part{i}"))
    stream = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
              .parquet(str(source / "part*")))
    query = lakesink.stream(stream, table_path, checkpoint=str(tmp_path / "chk"), trigger="availableNow")
    query.awaitTermination(300)
    lakesink.await_commits(str(tmp_path / "chk"))
    after = row_ids(table_path)
    assert {k: after[k] for k in before} == before
    assert sorted(after.values()) == list(range(70))
