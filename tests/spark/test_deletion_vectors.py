"""Primary-key tables with `deletion-vectors.enabled`: every commit leaves no level-0 file and
each key live in one row of its bucket (merged on write, older rows marked in deletion vectors),
read back key for key by pypaimon as released (its own process) and by lakesink.read."""

from __future__ import annotations

import os

import pytest

import lakesink
from lakesink.errors import UnsupportedOptionError, UnsupportedTableError
from tests.helpers import leftover_files, read_table, write
from tests.spark.test_bad_input import Unchanged
from tests.unpatched import read_unpatched

pytestmark = pytest.mark.spark

DV = {"deletion-vectors.enabled": "true"}


def live_files(path: str):
    """(level, file name) of every data file of the latest snapshot, and its DV index entries."""
    from pypaimon.manifest.index_manifest_file import IndexManifestFile
    from pypaimon.manifest.schema.file_entry import FileEntry
    from lakesink.paimon.commit.live_files import live_entries
    from lakesink.paimon.table.tables import open_table

    table = open_table(path)  # lakesink's: it reads the manifests of Java's 1.0 writer too
    files = [(e.file.level, e.file.file_name) for e in FileEntry.merge_entries(live_entries(table)) if e.kind == 0]
    snapshot = table.snapshot_manager().get_latest_snapshot()
    index = [e for e in IndexManifestFile(table).read(snapshot.index_manifest)] if snapshot.index_manifest else []
    return files, [e for e in index if e.index_file.index_type == "DELETION_VECTORS"]


def check(spark, path: str, expected: dict, every_reader: bool = True) -> None:
    """Key for key, by pypaimon (as released in its own process, with `every_reader`) and by
    lakesink.read; no level-0 file."""
    rows = read_unpatched(path) if every_reader else read_table(path)
    got = dict(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist()))
    assert rows.num_rows == len(got), "a key is live in two rows"
    assert got == expected
    if every_reader:
        ours = lakesink.read(spark, path).collect()
        assert {r["id"]: r["v"] for r in ours} == expected and len(ours) == len(expected)
    files, _ = live_files(path)
    assert files and all(level > 0 for level, _ in files), files


def test_upserts_and_deletes_on_both_paths_stay_merged(spark, table_path):
    df = spark.createDataFrame([(i, f"a{i}", "+I") for i in range(200)], "id long, v string, op string")
    lakesink.write(df, table_path, primary_key=["id"],
                   options={"bucket": "2", "rowkind.field": "op", **DV})
    expected = {i: f"a{i}" for i in range(200)}
    check(spark, table_path, expected, every_reader=False)
    rounds = [("fast", [(5, "b5", "+I"), (6, "b6", "+U"), (7, None, "-D"), (300, "n300", "+I")]),
              ("native", [(6, "c6", "+I"), (8, None, "-D"), (300, None, "-D"), (301, "n301", "+I")]),
              ("fast", [(7, "d7", "+I"), (9, "d9", "+I"), (9, None, "-D"), (10, None, "-D"), (10, "d10", "+I")]),
              ("native", [(i, f"e{i}", "+I") for i in range(0, 200, 3)] + [(4, None, "-D")])]
    dv_seen = False
    for i, (path_kind, changes) in enumerate(rounds):
        write(spark.createDataFrame(changes, "id long, v string, op string").coalesce(1), table_path, path_kind)
        for key, value, op in changes:  # one task, in order: the last change of a key wins
            if op == "-D":
                expected.pop(key, None)
            else:
                expected[key] = value
        check(spark, table_path, expected, every_reader=i == len(rounds) - 1)
        dv_seen = dv_seen or bool(live_files(table_path)[1])
    assert dv_seen, "no deletion vector was ever written: the test only saw full rewrites"
    assert not leftover_files(table_path)
    # A small change marks rows of the big runs; then a full compaction applies the vectors.
    write(spark.createDataFrame([(11, "f11", "+I"), (12, None, "-D")], "id long, v string, op string").coalesce(1),
          table_path, "fast")
    expected[11] = "f11"
    expected.pop(12)
    compacted_fully(spark, table_path, lambda: check(spark, table_path, expected))


def compacted_fully(spark, path: str, check_rows) -> None:
    """`lakesink.compact` of a deletion-vector table holding vectors: one COMPACT snapshot leaves
    each bucket one run at the highest level and no deletion vector, and every reader
    (`check_rows`: the caller's check of the expected rows) reads the same rows as before."""
    from tests.helpers import snapshots
    files, vectors = live_files(path)
    assert vectors, "nothing for the compaction to apply"
    report = lakesink.compact(spark, path, progress=False)
    assert report.commit_kind == "COMPACT" and 0 < report.files_removed <= len(files)
    assert snapshots(path)[-1].commit_kind == "COMPACT"
    marked = {name for v in vectors for name in v.index_file.dv_ranges}
    after, vectors = live_files(path)
    assert not vectors and not marked & {name for _, name in after}  # the marked files rewritten
    assert {level for level, _ in after} == {5}  # num-levels 5: the highest level
    check_rows()
    # A fully compacted table without vectors: nothing more to do.
    assert lakesink.compact(spark, path, progress=False).snapshot_id is None


# ./dev full: a marked file merged again (the default run merges and reads on both paths)
@pytest.mark.full
def test_a_dv_file_rewritten_by_a_later_merge_loses_its_vector(spark, table_path):
    """A run whose rows were marked deleted, taken into a later merge: the marked rows are not
    read again, and its deletion vector leaves the index with it."""
    df = spark.createDataFrame([(i, f"a{i}", "+I") for i in range(100)], "id long, v string, op string")
    lakesink.write(df, table_path, primary_key=["id"], options={"bucket": "1", "rowkind.field": "op", **DV})
    lakesink.write(spark.createDataFrame([(1, None, "-D"), (2, "b2", "+I")], "id long, v string, op string"),
                   table_path)
    files, vectors = live_files(table_path)
    assert vectors and len(files) == 2
    marked = set(next(iter(vectors)).index_file.dv_ranges)
    # A bigger write: the size ratio takes every run, the marked file included (a full merge).
    big = spark.createDataFrame([(i, f"c{i}", "+I") for i in range(100, 400)], "id long, v string, op string")
    lakesink.write(big, table_path)
    files, vectors = live_files(table_path)
    assert not marked & {name for _, name in files}
    assert not any(set(v.index_file.dv_ranges) & marked for v in vectors)
    expected = {i: f"a{i}" for i in range(100)}
    expected.pop(1)
    expected[2] = "b2"
    expected.update({i: f"c{i}" for i in range(100, 400)})
    check(spark, table_path, expected)


@pytest.mark.parametrize("options, named", [
    ({"row-tracking.enabled": "true"}, "row-tracking.enabled=true"),
    ({"primary-key": "id", "bucket": "2", "changelog-producer": "lookup"}, "changelog-producer=lookup"),
    ({"primary-key": "id", "bucket": "2", "full-compaction.delta-commits": "5"}, "full-compaction.delta-commits"),
])
def test_deletion_vectors_lakesink_cannot_merge_are_refused_by_name(spark, table_path, options, named):
    df = spark.createDataFrame([(1, "a")], "id long, v string")
    with pytest.raises(UnsupportedOptionError, match=named):
        lakesink.write(df, table_path, options={**options, **DV})
    assert not os.path.exists(os.path.join(table_path, "schema"))


@pytest.mark.parametrize("path_kind", ["fast", pytest.param("native", marks=pytest.mark.full)])
def test_overwrite_of_a_dv_table_holding_rows_is_refused(spark, table_path, path_kind):
    """A new table may be created by an overwrite (nothing to replace); an overwrite of one holding
    rows is refused before anything is written."""
    df = spark.createDataFrame([(1, "a")], "id long, v string")
    write(df, table_path, path_kind, mode="overwrite", **{"primary-key": "id", "bucket": "1", **DV})
    check(spark, table_path, {1: "a"}, every_reader=False)
    before = Unchanged(table_path)
    with pytest.raises(Exception, match="does not overwrite such a table"):
        write(df, table_path, path_kind, mode="overwrite")
    before.check()
    assert not os.listdir(os.path.join(table_path, "_lakesink", "staging"))


# Default: one path in each commit mode; ./dev full: the other two.
@pytest.mark.parametrize("sink, commit_mode", [pytest.param("lakesink", "pipelined", marks=pytest.mark.full), ("format", "sync"),
                                               pytest.param("lakesink", "sync", marks=pytest.mark.full),
                                               pytest.param("format", "pipelined", marks=pytest.mark.full)])
def test_a_change_stream_into_a_dv_table_reads_key_for_key(spark, tmp_path, sink, commit_mode):
    """A change stream (one file, one input partition a micro-batch: its rows' order is the
    order of changes) into a deletion-vector table: key for key what the changes say, no
    level-0 file left."""
    from tests.spark.test_keyed_stream_write import SCHEMA, _cdc, _source
    from tests.spark.test_streaming import source_stream

    batches = [[(k, "x", "+I") for k in range(40)]] + _cdc(3, keys=30)
    source = tmp_path / "src"
    _source(source, batches)
    expected, n = {}, 0
    for batch in batches:
        for key, name, op in batch:
            if op == "-D":
                expected.pop(key, None)
            else:
                expected[key] = (name, n)
            n += 1
    path, chk = str(tmp_path / "wh" / "db.db" / "dv"), str(tmp_path / "chk")
    df = source_stream(spark, source, SCHEMA)
    options = {"primary-key": "id", "bucket": "2", "rowkind.field": "op", **DV}
    if sink == "lakesink":
        query = lakesink.stream(df, path, checkpoint=chk, trigger="availableNow",
                                options={**options, "commit.mode": commit_mode})
    else:  # format("paimon") streams into an existing table
        lakesink.write(spark.createDataFrame([], "id long, name string, n long, op string"), path,
                       primary_key=["id"], options={"bucket": "2", **DV})
        writer = df.writeStream.format("paimon").option("checkpointLocation", chk).option("rowkind.field", "op")
        query = writer.option("commit.mode", commit_mode).trigger(availableNow=True).start(path)
    query.awaitTermination()
    assert query.exception() is None
    lakesink.await_commits(chk)
    rows = read_unpatched(path)
    got = {r["id"]: (r["name"], r["n"]) for r in rows.to_pylist()}
    assert len(got) == rows.num_rows, "a key was returned twice"
    assert got == expected
    files, _ = live_files(path)
    assert files and all(level > 0 for level, _ in files)
    assert not leftover_files(path)


def test_row_level_statements_on_a_dv_table(spark, table_path):
    """DELETE, UPDATE and MERGE read a deletion-vector table through pypaimon (deletions honoured)
    and write their changes merged on write."""
    df = spark.createDataFrame([(i, f"a{i}") for i in range(50)], "id long, v string")
    lakesink.write(df, table_path, primary_key=["id"], options={"bucket": "2", **DV})
    lakesink.delete(spark, table_path, "id < 5")
    lakesink.update(spark, table_path, {"v": "'u'"}, "id >= 45")
    source = spark.createDataFrame([(10, "m10"), (11, None), (100, "n100")], "id long, v string")
    (lakesink.merge(spark, table_path, source, "t.id = s.id", target_alias="t")
     .when_matched_delete(condition="s.v is null").when_matched_update({"v": "s.v"}).when_not_matched_insert_all().execute())
    expected = {i: ("u" if i >= 45 else f"a{i}") for i in range(5, 50)}
    expected.update({10: "m10", 100: "n100"})
    expected.pop(11)
    check(spark, table_path, expected)


def test_expiry_deletes_the_deletion_vector_files_only_expired_snapshots_list(spark, table_path):
    from lakesink.paimon import maintenance

    df = spark.createDataFrame([(i, f"a{i}") for i in range(60)], "id long, v string")
    lakesink.write(df, table_path, primary_key=["id"], options={"bucket": "1", **DV, "maintenance.enabled": "false",
                                                                 "snapshot.num-retained.min": "1",
                                                                 "snapshot.num-retained.max": "1"})
    for i in range(3):
        lakesink.write(spark.createDataFrame([(i, "b")], "id long, v string"), table_path,
                       options={"maintenance.enabled": "false"})
    on_disk = lambda: set(os.listdir(os.path.join(table_path, "index")))  # noqa: E731
    assert len(on_disk()) >= 2  # a deletion-vector file per commit that changed one, each replacing the last
    maintenance.expire_snapshots(table_path, limit=None)
    _, vectors = live_files(table_path)
    assert on_disk() == {v.index_file.file_name for v in vectors} and len(vectors) == 1
    check(spark, table_path, {**{i: f"a{i}" for i in range(60)}, 0: "b", 1: "b", 2: "b"}, every_reader=False)


@pytest.mark.parametrize("engine, options, expected", [
    ("partial-update", {}, {1: ("a1", "y2", 10), 2: ("a2", None, 2), 3: (None, "y3", 3)}),
    ("aggregation", {"fields.n.aggregate-function": "sum", "fields.x.aggregate-function": "last_non_null_value",
                     "fields.y.aggregate-function": "last_non_null_value"},
     {1: ("a1", "y2", 11), 2: ("a2", None, 2), 3: (None, "y3", 3)}),
    ("first-row", {}, {1: ("a1", None, 1), 2: ("a2", None, 2), 3: (None, "y3", 3)}),
])
def test_merge_engines_merge_a_key_with_its_row_in_older_files(spark, table_path, engine, options, expected):
    """A DV table's readers merge nothing: the merged value of a key whose older version lies in
    another file is written at commit (looked up there), the older row marked deleted."""
    schema = "id long, x string, y string, n long"
    first = spark.createDataFrame([(i, f"a{i}", None, i) for i in range(1, 3)] + [(i, "z", "z", i) for i in range(4, 60)],
                                  schema)
    lakesink.write(first, table_path, primary_key=["id"],
                   options={"bucket": "1", "merge-engine": engine, **options, **DV})
    lakesink.write(spark.createDataFrame([(1, None, "y2", 10), (3, None, "y3", 3)], schema), table_path)
    rows = read_unpatched(table_path)
    got = {r["id"]: (r["x"], r["y"], r["n"]) for r in rows.to_pylist() if r["id"] < 4}
    assert rows.num_rows == len({r["id"] for r in rows.to_pylist()})
    assert got == expected
    assert live_files(table_path)[1], "the older version was rewritten, not marked deleted"


@pytest.mark.parametrize("path_kind", ["fast", pytest.param("native", marks=pytest.mark.full)])
def test_level0_files_written_in_place_leave_with_the_commit(spark, table_path, path_kind):
    """`write.in-place`: the write's level-0 files sit at their table paths before the commit; the
    merged runs replace them in the snapshot, and the job's end deletes them (named in its intents)."""
    df = spark.createDataFrame([(i, f"a{i}") for i in range(40)], "id long, v string")
    lakesink.write(df, table_path, primary_key=["id"], options={"bucket": "2", **DV})
    for i in range(2):
        write(spark.createDataFrame([(i, "b"), (100 + i, "n")], "id long, v string").repartition(2), table_path,
              path_kind, **{"write.in-place": "true"})
    check(spark, table_path, {**{i: f"a{i}" for i in range(40)}, 0: "b", 1: "b", 100: "n", 101: "n"},
          every_reader=False)
    assert not leftover_files(table_path)


# ./dev full: each path killed with its merged runs placed but not committed, then after the
# snapshot (the replay). Deletion vectors change what a commit holds, not the protocol the default
# run kills on both paths (tests/crash/matrix.py).
@pytest.mark.crash
@pytest.mark.parametrize("mode, points", [
    pytest.param("fast", ["files-placed@2", "after-snapshot@3"], id="fast", marks=pytest.mark.full),
    pytest.param("native", ["files-placed@2", "after-snapshot@3"], id="native", marks=pytest.mark.full)])
def test_a_summing_dv_table_killed_mid_commit_counts_every_batch_once(tmp_path, mode, points):
    """A summing (aggregation) DV table shows a batch merged twice or lost in its sums: killed
    where the merged runs are placed but not committed, and after the snapshot, then restarted:
    every batch once, no level-0 file, no data file outside the snapshots."""
    from tests.crash.harness import SUM_OPTIONS, Case, kill_at_each_summing, make_sum_source

    case = Case(tmp_path, mode, "sync", cdc=True, options={**SUM_OPTIONS, **DV, "bucket": "2"},
                extra_column="score")
    prefixes = make_sum_source(case.source, files=len(points) + 3)
    tally = kill_at_each_summing(case, points, prefixes)
    assert tally.kills == len(points)
    assert tally.exactly_once and not tally.problems, tally.problems
    files, vectors = live_files(case.table)
    assert files and all(level > 0 for level, _ in files) and vectors


# ./dev full: older schemas merged on write (the default run merges files of one schema on both paths; schema evolution alone: tests/spark/test_schema_evolution.py)
@pytest.mark.full
def test_files_of_an_older_schema_are_merged_with_added_columns_null(spark, table_path):
    lakesink.write(spark.createDataFrame([(i, f"a{i}") for i in range(30)], "id long, v string"), table_path,
                   primary_key=["id"], options={"bucket": "1", **DV})
    lakesink.write(spark.createDataFrame([(1, "b1", 7), (40, "n40", 8)], "id long, v string, extra long"),
                   table_path, options={"write.merge-schema": "true"})
    lakesink.write(spark.createDataFrame([(2, "c2", 9)], "id long, v string, extra long"), table_path)
    rows = read_unpatched(table_path).to_pylist()
    got = {r["id"]: (r["v"], r["extra"]) for r in rows}
    expected = {i: (f"a{i}", None) for i in range(30)}
    expected.update({1: ("b1", 7), 40: ("n40", 8), 2: ("c2", 9)})
    assert got == expected and len(rows) == len(expected)
    files, _ = live_files(table_path)
    assert all(level > 0 for level, _ in files)


@pytest.mark.parametrize("options, expected", [
    ({"sequence.field": "ts"}, {1: ("old", 9), 2: ("new", 5)}),  # an older file's row may win
    ({"ignore-delete": "true"}, {1: ("old", 9), 2: ("old", 1)}),  # a delete ignored keeps the old row
])
def test_deduplicate_orders_by_sequence_field_and_ignores_deletes_across_files(spark, table_path, options, expected):
    schema = "id long, v string, ts long, op string"
    first = [(1, "old", 9, "+I"), (2, "old", 1, "+I")] + [(i, "x", 0, "+I") for i in range(3, 60)]
    lakesink.write(spark.createDataFrame(first, schema), table_path, primary_key=["id"],
                   options={"bucket": "1", "rowkind.field": "op", **options, **DV})
    later = [(1, "new", 5, "+I"), (2, "new", 5, "+I")] if "sequence.field" in options else \
        [(1, None, 0, "-D"), (2, None, 0, "-D")]
    lakesink.write(spark.createDataFrame(later, schema).coalesce(1), table_path)
    rows = read_unpatched(table_path).to_pylist()
    assert {r["id"]: (r["v"], r["ts"]) for r in rows if r["id"] < 3} == expected
    assert len(rows) == len({r["id"] for r in rows}) == 59


@pytest.mark.full
def test_a_compaction_whose_input_gets_rows_marked_meanwhile_plans_that_bucket_again(spark, table_path,
                                                                                      monkeypatch):
    """A delete lands between the compaction's rewrite and its commit, marking a row of the file the
    rewrite read (no file added or removed: only the vector grows). Committing the rewrite would bring
    that row back: the commit is a conflict; with one attempt the table is unchanged, with more the
    bucket is compacted again."""
    import lakesink.spark.compact as job
    from lakesink.errors import CommitConflictError

    schema = "id long, v string, op string"
    lakesink.write(spark.createDataFrame([(i, f"a{i}", "+I") for i in range(500)], schema), table_path,
                   primary_key=["id"], options={"bucket": "1", "rowkind.field": "op", **DV})
    lakesink.write(spark.createDataFrame([(1, None, "-D")], schema), table_path)
    expected = {i: f"a{i}" for i in range(500) if i != 1}
    files, vectors = live_files(table_path)
    assert len(files) == 1 and vectors  # one run at the highest level, with a vector
    run, deletes = job.rewrite_on_driver, []

    def meanwhile_a_delete_lands(tasks):
        outputs = run(tasks)
        if deletes:
            lakesink.write(spark.createDataFrame([(deletes.pop(), None, "-D")], schema), table_path)
        return outputs

    monkeypatch.setattr(job, "rewrite_on_driver", meanwhile_a_delete_lands)
    deletes.append(3)
    with pytest.raises(CommitConflictError, match="table is unchanged"):
        lakesink.compact(None, table_path, progress=False, max_attempts=1)
    expected.pop(3)
    check(spark, table_path, expected, every_reader=False)
    assert len(live_files(table_path)[0]) == 1 and not leftover_files(table_path)

    deletes.append(5)
    report = lakesink.compact(None, table_path, progress=False)
    assert report.extra["conflicts"] == 1 and report.snapshot_id is not None
    expected.pop(5)
    check(spark, table_path, expected)
    assert not live_files(table_path)[1] and not leftover_files(table_path)
