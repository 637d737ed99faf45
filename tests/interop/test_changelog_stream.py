"""Streaming reads of primary-key tables: `lakesink.read_stream` emits the table's changelog
(`rowkind` first), the same rows Apache Paimon's own streaming reader returns from the same
snapshots, exactly once across restarts of the reading query."""

from __future__ import annotations

import pytest

import lakesink

from . import rows as R

pytestmark = [pytest.mark.interop, pytest.mark.spark]

SCHEMA = "id long, dt string, name string, op string"
BATCHES = [
    [(i, "ab"[i % 2], f"v0-{i}", "+I") for i in range(12)],
    [(i, "ab"[i % 2], f"v1-{i}", "+U") for i in range(0, 12, 3)] + [(i, "ab"[i % 2], None, "-D") for i in (1, 7)],
    [(i, "ab"[i % 2], f"v2-{i}", "+I") for i in range(12, 16)] + [(4, "a", "v1-4", "-U"), (4, "a", "v2-4", "+U")],
    [(i, "ab"[i % 2], None, "-D") for i in (12, 13)] + [(1, "b", "back-1", "+I")],
]


def _drain(spark, path, checkpoint, consumer_id="gold"):
    """Run the stream to the table's end (availableNow); the changes it delivered, batch by batch."""
    got = []
    query = (lakesink.read_stream(spark, path, consumer_id=consumer_id).writeStream
             .foreachBatch(lambda df, batch_id: got.append([r.asDict() for r in df.collect()]))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(300) and query.exception() is None
    return [rows for rows in got if rows]


def _apply(state: dict, changes: list[dict]) -> dict:
    for row in changes:
        key = (row["id"], row["dt"])
        if row["rowkind"] in ("-U", "-D"):
            state.pop(key, None)
        else:
            state[key] = row["name"]
    return state


# Default: compaction inline with the input producer; the other two modes in ./dev full.
@pytest.mark.parametrize("compaction, producer", [
    pytest.param("inline", "none", marks=pytest.mark.full), pytest.param("write-only", "none", marks=pytest.mark.full),
    ("inline", "input")])
# ./dev full: against Java's stream (the default run compares produced changelogs with Paimon's own, tests/interop/test_changelog_producers.py)
@pytest.mark.full
def test_a_keyed_tables_stream_is_its_changelog_as_paimon_streams_it(spark, java_paimon, tmp_path, compaction,
                                                                     producer):
    path, checkpoint = str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "chk")
    options = {"bucket": "2", "rowkind.field": "op", "num-sorted-run.compaction-trigger": "2",
               "write-only": "true" if compaction == "write-only" else "false", "changelog-producer": producer}

    def write(rows):
        lakesink.write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path, primary_key=["id", "dt"],
                       partition_by=["dt"], options=options)

    write(BATCHES[0])
    write(BATCHES[1])
    first = _drain(spark, path, checkpoint)
    # Starting latest-full: the current rows, each +I, then nothing more.
    assert [r["rowkind"] for batch in first for r in batch] == ["+I"] * 10
    after = lakesink.history(path).column("snapshot_id").to_pylist()[-1]
    write(BATCHES[2])
    write(BATCHES[3])
    second = _drain(spark, path, checkpoint)  # the restarted query: only what came after
    ours = [r for batch in second for r in batch]
    theirs = java_paimon.changes(path, after, tmp_path / "java")
    R.assert_same_rows(ours, theirs, f"{compaction}: lakesink's changelog vs Paimon's streaming read")
    if producer == "input":  # the changelog holds every input row, the -U before-image included
        assert sorted(r["rowkind"] for r in ours) == sorted(["+I"] * 5 + ["-U", "+U", "-D", "-D"])
    else:  # -U/+U of one key in one write: deduplicate keeps the last version only (as Paimon writes it)
        assert sorted(r["rowkind"] for r in ours) == sorted(["+I"] * 5 + ["+U", "-D", "-D"])
    state = _apply(_apply({}, [r for batch in first for r in batch]), ours)
    table = {(r["id"], r["dt"]): r["name"] for r in lakesink.read(spark, path).collect()}
    assert state == table
    assert _drain(spark, path, checkpoint) == []  # exactly once: a third run has nothing to deliver
    if compaction == "inline":
        kinds = lakesink.history(path).column("commit_kind").to_pylist()
        assert "COMPACT" in kinds  # compaction snapshots were skipped, not delivered twice


def test_a_keyed_table_streams_only_as_its_changelog(spark, tmp_path):
    path = str(tmp_path / "wh" / "db.db" / "t")
    lakesink.write(spark.createDataFrame(BATCHES[0], SCHEMA), path, primary_key=["id", "dt"],
                   options={"bucket": "2", "rowkind.field": "op"})
    with pytest.raises(Exception, match=r"read\.readChangeLog=true"):  # when the query starts planning
        query = (spark.readStream.format("paimon").load(path).writeStream.foreachBatch(lambda df, i: None)
                 .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        raise query.exception() or AssertionError("the query ran")
    sdf = spark.readStream.format("paimon").option("read.readChangeLog", "true").load(path)
    assert sdf.columns == ["rowkind", "id", "dt", "name", "op"]
