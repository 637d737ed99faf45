"""partial-update and aggregation tables through real Spark: what is refused (the table
unchanged), what "order" means inside one write, and a CDC stream into an aggregation table.
Paimon's own reading of the same input: tests/interop/test_merge_engines.py."""

from __future__ import annotations

import pytest

import lakesink
from lakesink.errors import ConfigurationError
from tests.helpers import latest_snapshot_id, leftover_files, read_table, snapshots

pytestmark = pytest.mark.spark

SCHEMA = "id long, name string, n long, op string"
AGG = {"bucket": "2", "merge-engine": "aggregation", "rowkind.field": "op", "fields.n.aggregate-function": "sum"}


def _by_id(path):
    rows = read_table(path).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key was returned twice"
    return {r["id"]: (r["name"], r["n"]) for r in rows}


def _write(spark, rows, path, **kw):
    return lakesink.write(spark.createDataFrame(rows, SCHEMA).coalesce(1), path, **kw)


@pytest.mark.parametrize("case", ["retract_partial_update", "retract_max", "sum_of_string"])
def test_input_a_merge_engine_cannot_merge_fails_and_changes_nothing(spark, table_path, case):
    options = {"retract_partial_update": {"bucket": "2", "merge-engine": "partial-update", "rowkind.field": "op"},
               "retract_max": {**AGG, "fields.name.aggregate-function": "max"},
               "sum_of_string": AGG}[case]
    _write(spark, [(1, "a", 1, "+I"), (2, "b", 2, "+I")], table_path, primary_key=["id"], options=options)
    before = (latest_snapshot_id(table_path), _by_id(table_path))
    if case == "sum_of_string":
        with pytest.raises(ConfigurationError, match="fields.name.aggregate-function=sum needs a numeric column"):
            _write(spark, [(3, "c", 3, "+I")], table_path + "_other", primary_key=["id"],
                   options={**AGG, "fields.name.aggregate-function": "sum"})
        return
    expected = "partial-update cannot merge them" if case == "retract_partial_update" else "name: max"
    with pytest.raises(ConfigurationError, match=expected):
        _write(spark, [(1, "a", 5, "+U"), (2, "b", 2, "-D"), (3, "c", 1, "+I")], table_path)
    assert (latest_snapshot_id(table_path), _by_id(table_path)) == before
    assert leftover_files(table_path) == set()


def test_ignore_delete_drops_the_retractions_of_an_aggregation_table(spark, table_path):
    options = {**AGG, "fields.name.aggregate-function": "max", "ignore-delete": "true"}
    _write(spark, [(1, "a", 1, "+I"), (2, "b", 2, "+I")], table_path, primary_key=["id"], options=options)
    _write(spark, [(1, "z", 5, "-U"), (1, "c", 5, "+U"), (2, "b", 2, "-D")], table_path)
    assert _by_id(table_path) == {1: ("c", 6), 2: ("b", 2)}


def test_ignore_delete_keeps_deleted_keys_of_a_deduplicate_table(spark, table_path):
    """The retractions never reach a file: pypaimon (which does not know the option) still sees the keys."""
    options = {"bucket": "2", "rowkind.field": "op", "ignore-delete": "true"}
    _write(spark, [(1, "a", 1, "+I"), (2, "b", 2, "+I")], table_path, primary_key=["id"], options=options)
    _write(spark, [(1, "a", 1, "-D"), (2, "b", 2, "-U"), (3, "c", 3, "+I"), (3, "c", 3, "-D")], table_path)
    assert _by_id(table_path) == {1: ("a", 1), 2: ("b", 2), 3: ("c", 3)}
    ops = set(read_table(table_path).column("op").to_pylist())
    assert ops <= {"+I", "+U"}


def test_sequence_field_orders_versions_across_input_partitions(spark, table_path):
    """Input order counts only inside one input partition; `sequence.field` orders the rest."""
    rows = [(1, "late", 9, "+I"), (1, None, 7, "+I"), (1, "early", 1, "+I")]
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)  # input order lost
    lakesink.write(df, table_path, primary_key=["id"],
                   options={"bucket": "1", "merge-engine": "partial-update", "sequence.field": "n"})
    assert _by_id(table_path) == {1: ("late", 9)}  # last by n; the null name of n=7 fills nothing
    assert read_table(table_path).column("op").to_pylist() == ["+I"]


def test_a_cdc_stream_into_an_aggregation_table_sums_exactly_once(spark, tmp_path):
    """Updates arrive as -U/+U pairs and deletes as -D: the running sums equal the source's
    final state; a restart on the checkpoint commits nothing twice."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.spark.test_streaming import source_stream
    source, table, checkpoint = tmp_path / "src", str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "chk")
    source.mkdir()
    batches = [[(i, f"a{i}", i, "+I") for i in range(20)],
               [(i, f"a{i}", i, "-U") for i in range(0, 20, 4)] + [(i, f"b{i}", 10 * i, "+U") for i in range(0, 20, 4)],
               [(i, f"a{i}", i, "-D") for i in range(1, 20, 5)] + [(i, f"c{i}", 1, "+I") for i in range(20, 25)]]
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("n", pa.int64()), ("op", pa.string())])
    expected = {}
    for b, rows in enumerate(batches):
        pq.write_table(pa.table(list(zip(*rows)), schema=schema), source / f"b{b}.parquet")
        os.utime(source / f"b{b}.parquet", (1_700_000_000 + b, 1_700_000_000 + b))
        for i, name, n, op in rows:
            old_name, old_n = expected.get(i, (None, None))
            if op in ("-U", "-D"):
                expected[i] = (None, (old_n or 0) - n)  # last_non_null_value retracted: null
            else:
                expected[i] = (name, n if old_n is None else old_n + n)
    options = {**AGG, "primary-key": "id"}
    for _ in range(2):  # the second run restarts on the checkpoint with nothing new
        query = lakesink.stream(source_stream(spark, source, schema), table, checkpoint=checkpoint,
                                trigger="availableNow", options=options)
        assert query.awaitTermination(300) and query.exception() is None
    # The last batch's compaction round runs in the background; pypaimon reads an aggregation
    # table's retractions only once a compaction merged them (Java Paimon reads them as they are).
    lakesink.await_commits(checkpoint)
    assert _by_id(table) == expected
    assert [s.commit_identifier for s in snapshots(table) if s.commit_kind == "APPEND"] == [0, 1, 2]


def test_changelog_producer_input_commits_the_writes_input_rows_as_the_snapshots_changelog(spark, table_path):
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager

    from lakesink.paimon.compaction.target import live_files
    from lakesink.paimon.table.tables import open_table
    from lakesink.paimon.commit.target import PaimonTarget
    options = {"bucket": "2", "rowkind.field": "op", "changelog-producer": "input", "write-only": "true"}
    _write(spark, [(1, "a", 1, "+I"), (2, "b", 2, "+I")], table_path, primary_key=["id"], options=options)
    changes = [(1, "a", 1, "-U"), (1, "c", 3, "+U"), (2, "b", 2, "-D"), (3, "d", 4, "+I")]
    report = _write(spark, changes, table_path)
    assert report.rows_added == 3  # data rows (one per key); the changelog is not counted as data
    assert _by_id(table_path) == {1: ("c", 3), 3: ("d", 4)}
    table = open_table(table_path)
    snapshot = table.snapshot_manager().get_latest_snapshot()
    assert snapshot.changelog_record_count == len(changes)
    entries = ManifestFileManager(table).read_entries_parallel(ManifestListManager(table).read_changelog(snapshot))
    assert entries and all(e.file.file_name.startswith("changelog-") for e in entries)
    assert not any(f.meta.file_name.startswith("changelog-") for f in live_files(table))
    # A pending changelog committable keeps what it is through the durable (pypaimon-serialized) form.
    from dataclasses import replace
    target = PaimonTarget(table_path)
    staged = replace(live_files(table)[0], changelog=True)
    assert target.decode(target.encode(staged)).changelog
