"""Changelog producers `lookup` and `full-compaction`: the same input written once by lakesink
(its compaction after each commit produces the changelog) and once by Apache Paimon's own
Java writer must stream the same changes through Paimon's Java streaming reader, and through
`lakesink.read_stream`; a stream started on the full state never delivers a change twice."""

from __future__ import annotations

import pytest

import lakesink

from . import rows as R
from .test_changelog_stream import BATCHES, SCHEMA

pytestmark = [pytest.mark.interop, pytest.mark.spark]

COLUMNS = [("id", "BIGINT"), ("dt", "STRING"), ("name", "STRING"), ("op", "STRING")]
PRODUCERS = {
    "lookup": {"changelog-producer": "lookup"},
    "lookup-dedup": {"changelog-producer": "lookup", "changelog-producer.row-deduplicate": "true"},
    "lookup-partial-update": {"changelog-producer": "lookup", "merge-engine": "partial-update"},
    "full-compaction": {"changelog-producer": "full-compaction"},
}
# A big first write: later small ones are compacted above it (size ratio), looking old values up there.
BIG = [(i, "ab"[i % 2], f"big-{i}-" + "x" * 40, "+I") for i in range(100, 400)]
# Rewrites a value unchanged (row-deduplicate drops that pair) and updates one key twice in a write.
EXTRA = [(3, "b", "v1-3", "+U"), (5, "b", "five", "+U"), (5, "b", "five-again", "+U"), (20, "a", "new", "+I")]


def _write(spark, path, rows, options):
    df = spark.createDataFrame(rows, SCHEMA).coalesce(1)  # one partition: input order is row order
    lakesink.write(df, path, primary_key=["id", "dt"], partition_by=["dt"], options=options)


def _stream(spark, path, checkpoint, starting="latest-full"):
    """The changes a stream delivers up to the table's end (availableNow), flattened."""
    got = []
    query = (lakesink.read_stream(spark, path, starting=starting).writeStream
             .foreachBatch(lambda df, batch_id: got.extend(r.asDict() for r in df.collect()))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(300) and query.exception() is None
    return got


def _apply(state: dict, changes: list[dict]) -> dict:
    """Apply changes strictly: an insert of a live key or a retraction of a missing one means a
    change was delivered twice or lost."""
    for row in changes:
        key = (row["id"], row["dt"])
        if row["rowkind"] in ("-U", "-D"):
            assert key in state, f"{row['rowkind']} of {key}, which the stream never inserted"
            del state[key]
        else:
            assert key not in state, f"{row['rowkind']} of {key}, which the stream already holds"
            state[key] = row["name"]
    return state


# Default: the lookup producer; ./dev full adds full-compaction (its changelog comes from the same
# compaction code, tests/unit covers its rounds); the soak adds row-deduplicate and partial-update.
@pytest.mark.parametrize("label", [pytest.param(label, marks=pytest.mark.soak) if label in ("lookup-dedup",
                                   "lookup-partial-update") else
                                   pytest.param(label, marks=pytest.mark.full) if label == "full-compaction" else label
                                   for label in PRODUCERS])
def test_a_produced_changelog_streams_as_paimons_own(spark, java_paimon, tmp_path, label):
    options = {"bucket": "2", "rowkind.field": "op", **PRODUCERS[label]}
    ours, theirs = str(tmp_path / "wh" / "db.db" / "ours"), str(tmp_path / "wh" / "db.db" / "theirs")
    batches = [BIG, *BATCHES, EXTRA]
    if label == "lookup-partial-update":  # partial updates take no retractions
        batches = [[r for r in rows if r[3] in ("+I", "+U")] for rows in batches]
    for rows in batches:
        _write(spark, ours, rows, options)
    spec = {"columns": COLUMNS, "primary_key": ["id", "dt"], "partition": ["dt"], "options": options,
            "batches": [[[r[-1], list(r)] for r in rows] for rows in batches],
            "full_compact_each": options["changelog-producer"] == "full-compaction"}
    java_paimon.replay(spec, theirs, tmp_path / "replay")
    paimon_streams = java_paimon.changes(theirs, 0, tmp_path / "java")
    assert paimon_streams, "Paimon's own writer produced no changelog: the comparison would prove nothing"
    R.assert_same_rows(java_paimon.changes(ours, 0, tmp_path / "java"), paimon_streams,
                       f"{label}: Java Paimon streaming lakesink's changelog vs Paimon's own")
    ours_streamed = _stream(spark, ours, str(tmp_path / "chk"), starting=1)
    R.assert_same_rows(ours_streamed, paimon_streams, f"{label}: lakesink.read_stream vs Paimon's changelog")
    state = _apply({}, ours_streamed)
    assert state == {(r["id"], r["dt"]): r["name"] for r in lakesink.read(spark, ours).collect()}
    if label.startswith("lookup"):
        from lakesink.paimon.compaction.target import live_files
        from lakesink.paimon.keyed.lsm_policy import LsmOptions
        from lakesink.paimon.table.tables import open_table
        table = open_table(ours)
        levels = {f.meta.level for f in live_files(table)}
        assert 0 not in levels and levels - {LsmOptions.of_table(table).max_level}, levels  # lookups happened


# ./dev full: a stream starting on the full state (the default run streams the lookup changelog against Paimon's own)
@pytest.mark.full
@pytest.mark.parametrize("producer", ["lookup", pytest.param("full-compaction", marks=pytest.mark.soak)])
def test_a_stream_starting_on_the_full_state_skips_what_the_changelog_will_bring(spark, tmp_path, producer):
    """Files not compacted yet (write-only; or a driver killed between the append and the
    compaction) are not in the first full read: their changes come with the compaction."""
    path = str(tmp_path / "wh" / "db.db" / "t")
    options = {"bucket": "2", "rowkind.field": "op", "changelog-producer": producer, "write-only": "true"}
    _write(spark, path, BATCHES[0], options)
    lakesink.compact(spark, path, progress=False)
    _write(spark, path, BATCHES[1], options)  # level 0 only: its changelog needs a compaction
    first = _stream(spark, path, str(tmp_path / "chk"))
    assert sorted(r["id"] for r in first) == list(range(12))  # the first write's state, not the second's
    lakesink.compact(spark, path, progress=False)
    state = _apply(_apply({}, first), _stream(spark, path, str(tmp_path / "chk")))
    assert state == {(r["id"], r["dt"]): r["name"] for r in lakesink.read(spark, path).collect()}
