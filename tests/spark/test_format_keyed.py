"""`format("paimon")` into primary-key and fixed-bucket tables (issue 15), batch and streaming.

A Python data source cannot repartition its input, so every task routes, sorts and merges its
own rows (spark.keyed_tasks); several tasks write the same bucket in one commit. Checked here:
the table key for key after upserts and deletes from several input partitions (the same input
gives the same table as the fast path, whose "order" it shares), `sequence.field` and the
partition-index tie-break, every merge engine against Apache Paimon's own Java writer given
the same input (read by Paimon's Java reader and pypaimon), refusals exactly as the fast path's,
bad rows failing the write with the table unchanged, and CDC streams, sync and pipelined.
A driver killed mid-stream: tests/spark/test_crash_format_keyed.py.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lakesink
from lakesink.protocol.coordinator import saved_progress
from lakesink.protocol.pipelined import COMPACTION, runtime_dir, runtime_name
from lakesink.protocol.state import StateStore
from tests.helpers import latest_snapshot_id, leftover_files, pypaimon_append, read_table, snapshots
from tests.requirements import unavailable
from tests.spark.test_keyed_write import _check_buckets

pytestmark = pytest.mark.spark

SCHEMA = "id long, name string, op string"


def _df(spark, rows, schema=SCHEMA, partitions=3):
    """`rows` in `partitions` input partitions, each a contiguous slice: input order is list order."""
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, partitions), schema)


def _save(df, path, **options):
    writer = df.write.format("paimon").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(path)


def _state(path) -> dict:
    rows = read_table(path).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key was returned twice"
    return {r["id"]: r["name"] for r in rows}


def _apply(state: dict, rows, rowkind: bool = True) -> dict:
    """Deduplicate in list order: the last version of a key wins, a -D removes it."""
    for i, name, op in rows:
        if rowkind and op == "-D":
            state.pop(i, None)
        elif not (rowkind and op == "-U"):
            state[i] = name
    return state


FIRST = ([(i, f"a{i}", "+I") for i in range(120)]
         + [(i, f"a{i}-again", "+I") for i in range(0, 120, 7)]      # later slices: they win
         + [(3, "a3-twice", "+I"), (3, "a3-last", "+I")])           # one slice: the later row wins
SECOND = ([(i, f"b{i}", "+U") for i in range(0, 120, 3)]
          + [(i, "", "-D") for i in range(1, 120, 5)]
          + [(1, "back", "+I"), (2, "gone", "+I"), (4, "", "-D"), (5, "", "-U"), (5, "b5-after", "+U")]
          + [(2, "", "-D")])
THIRD = [(i, f"c{i}", "x") for i in range(100, 140)]  # no rowkind.field: op is a value column
EXPECTED = _apply(_apply(_apply({}, FIRST), SECOND), THIRD, rowkind=False)


def test_upserts_and_deletes_from_several_input_partitions_end_key_for_key(spark, tmp_path):
    """Three writes, each from several input partitions holding versions of the same keys; the
    second takes row kinds (`rowkind.field` given on the write: the table stores none)."""
    path = str(tmp_path / "wh" / "db.db" / "t")
    df = _df(spark, FIRST, partitions=4)
    df.write.format("paimon").option("primary-key", "id").option("bucket", "8").mode("append").save(path)
    _save(_df(spark, SECOND), path, **{"rowkind.field": "op"})
    _save(_df(spark, THIRD, partitions=2), path)
    assert _state(path) == EXPECTED
    assert 2 not in EXPECTED and 4 not in EXPECTED and EXPECTED[1] == "back" and EXPECTED[5] == "b5-after"

    _check_buckets(path)  # every row in the bucket pypaimon's own extractor gives it
    appends = [s for s in snapshots(path) if s.commit_kind == "APPEND"]
    assert len(appends) == 3 and leftover_files(path) == set()
    from lakesink.paimon.table.tables import open_table
    table = open_table(path)
    assert table.primary_keys == ["id"] and table.options.bucket() == 8
    assert "rowkind.field" not in table.table_schema.options  # used by the write, not stored


@pytest.mark.soak
def test_the_fast_path_makes_the_same_table_of_the_same_input(spark, tmp_path):
    """The fast path's "order" is the same: the same writes give the same table."""
    path = str(tmp_path / "wh" / "db.db" / "fast")
    lakesink.write(_df(spark, FIRST, partitions=4), path, primary_key=["id"], options={"bucket": "8"})
    lakesink.write(_df(spark, SECOND), path, options={"rowkind.field": "op"})
    lakesink.write(_df(spark, THIRD, partitions=2), path)
    assert _state(path) == EXPECTED


def test_sequence_field_orders_versions_across_input_partitions_and_the_partition_breaks_ties(spark, tmp_path):
    """Versions of one key in several input partitions: `sequence.field` decides, nulls first;
    between equal sequence values the higher-numbered partition's row is the later."""
    path = str(tmp_path / "wh" / "db.db" / "t")
    rows = [(1, "p0-seq9", 9), (2, "p0-seq5", 5), (3, "p0-null", None), (4, "p0-seq1", 1),
            (1, "p1-seq3", 3), (2, "p1-seq5", 5), (3, "p1-seq0", 0), (4, "p1-seq1", 1),
            (1, "p2-seq7", 7), (2, "p2-seq4", 4), (4, "p2-null", None)]
    df = _df(spark, rows, "id long, name string, n long", partitions=3)  # partitions of 4, 4, 3 rows
    _save(df, path, **{"primary-key": "id", "bucket": "2", "sequence.field": "n"})
    assert _state(path) == {1: "p0-seq9", 2: "p1-seq5", 3: "p1-seq0", 4: "p1-seq1"}
    # A later write wins over an equal sequence value of an earlier one, a lower one loses.
    _save(_df(spark, [(1, "later-seq9", 9), (2, "later-seq4", 4)], "id long, name string, n long", 1), path)
    assert _state(path) == {1: "later-seq9", 2: "p1-seq5", 3: "p1-seq0", 4: "p1-seq1"}


def test_fixed_bucket_append_tables_and_a_table_pypaimons_writer_made(spark, tmp_path):
    """A fixed-bucket append table keeps every row, each in its bucket; a primary-key table
    created and written by pypaimon's own writer takes upserts above pypaimon's sequence numbers."""
    from pypaimon import CatalogFactory, Schema
    wh = tmp_path / "wh"
    visits = str(wh / "db.db" / "visits")
    rows = [(i % 17, f"v{i}", "+I") for i in range(90)]
    _save(_df(spark, rows), visits, bucket="4", **{"bucket-key": "id"})
    _save(_df(spark, rows[:10], partitions=1), visits)
    got = read_table(visits)
    assert sorted(got.column("name").to_pylist()) == sorted([r[1] for r in rows] + [r[1] for r in rows[:10]])
    _check_buckets(visits)

    catalog = CatalogFactory.create({"warehouse": str(wh)})
    catalog.create_database("db", True)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("op", pa.string())])
    catalog.create_table("db.theirs", Schema.from_pyarrow_schema(schema, primary_keys=["id"],
                                                                 options={"bucket": "2"}), False)
    theirs = catalog.get_table("db.theirs")
    pypaimon_append(theirs, pa.table({"id": pa.array(range(20), pa.int64()), "name": [f"p{i}" for i in range(20)],
                                      "op": ["+I"] * 20}, schema=schema))
    path = str(wh / "db.db" / "theirs")
    _save(_df(spark, [(i, f"ours{i}", "-D" if i % 5 == 0 else "+U") for i in range(0, 20, 2)]), path,
          **{"rowkind.field": "op"})
    expected = {i: f"p{i}" for i in range(20)}
    for i in range(0, 20, 2):
        if i % 5 == 0:
            del expected[i]
        else:
            expected[i] = f"ours{i}"
    assert _state(path) == expected


# -- every merge engine against Paimon's own Java writer --------------------------------------

# label -> (table options besides bucket/rowkind.field, change stream with -U/-D rows?)
ENGINES = {
    "deduplicate-cdc": ({}, True),
    "deduplicate-ignore-delete": ({"ignore-delete": "true"}, True),
    "first-row": ({"merge-engine": "first-row"}, False),
    "partial-update": ({"merge-engine": "partial-update"}, False),
    "partial-update-seq": ({"merge-engine": "partial-update", "sequence.field": "lo"}, False),
    "changelog-input": ({"changelog-producer": "input"}, True),
}
# CI: every engine once (aggregation with retractions); the soak: every aggregate function, partial-update
# without sequence.field, ignore-delete, and changelog-producer=input (its changelog read by Paimon too).
DEFAULT_LABELS = ["deduplicate-cdc", "first-row", "partial-update-seq", "aggregation-cdc"]


def _engines():
    from tests.interop.test_merge_engines import ENGINES as AGGREGATIONS
    return {**ENGINES, "aggregation": AGGREGATIONS["aggregation"], "aggregation-cdc": AGGREGATIONS["aggregation-cdc"]}


@pytest.fixture(scope="module")
def java_paimon():
    from tests.interop.oracle import JavaPaimon, Unavailable
    try:
        return JavaPaimon()
    except Unavailable as exc:
        unavailable(f"Java Paimon reader unavailable: {exc}")


def _compare_with_java(spark, java_paimon, labels, work) -> None:
    """Write each label's three batches with format("paimon") (three input partitions each) and
    with Paimon's Java writer (one commit per batch, rows in list order: the same order), then
    read both with Java's reader (one JVM) and ours with pypaimon: the same rows."""
    import json

    from tests.interop import rows as R
    from tests.interop.test_merge_engines import COLUMNS, SPARK_SCHEMA, _batches, _json
    engines = _engines()
    wh = work / "db.db"
    pairs, replays = {}, []
    for label in labels:
        engine_options, cdc = engines[label]
        options = {"bucket": "2", **engine_options, "num-sorted-run.compaction-trigger": "100"}
        if engine_options.get("merge-engine") != "first-row":
            options["rowkind.field"] = "op"  # (first-row tables take inserts only)
        ours, theirs = str(wh / f"ours_{label}"), str(wh / f"java_{label}")
        for rows in _batches(cdc):
            _save(spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), SPARK_SCHEMA), ours,
                  **{"primary-key": "id,dt", "partition": "dt", **options})
        spec = {"columns": COLUMNS, "primary_key": ["id", "dt"], "partition": ["dt"], "options": options,
                "batches": [[[r[-1], [_json(v) for v in r]] for r in rows] for rows in _batches(cdc)]}
        spec_file = work / f"replay-{label}.json"
        spec_file.write_text(json.dumps(spec), "utf-8")
        replays += [str(spec_file), theirs]
        pairs[label] = (ours, theirs)
    java_paimon._run(["replay", *replays])  # one JVM writes every Java table
    reads = java_paimon.read_many([t for pair in pairs.values() for t in pair], work / "reads")
    failures = []
    for label, (ours, theirs) in pairs.items():
        try:
            paimon_wrote, by_java = reads[theirs], reads[ours]
            for got in (paimon_wrote, by_java):
                if isinstance(got, Exception):
                    raise got
            assert paimon_wrote, f"{label}: Paimon's own table is empty"
            R.assert_same_rows(by_java, paimon_wrote, f"{label}: Java Paimon reading format('paimon')'s table")
            R.assert_same_rows(R.from_arrow(read_table(ours)), paimon_wrote, f"{label}: pypaimon reading it")
            if engines[label][0].get("changelog-producer") == "input":
                # The changelog: every input row, a key's changes in input order (several
                # tasks' changelog files in one bucket are read in write order).
                mine, java = (java_paimon.changes(t, 0, work / "changes") for t in (ours, theirs))
                by_key = {}
                for side, rows in (("ours", mine), ("java", java)):
                    for row in rows:
                        by_key.setdefault((row["id"], row["dt"]), {"ours": [], "java": []})[side].append(row)
                differ = {k: v for k, v in by_key.items() if v["ours"] != v["java"]}
                assert not differ, f"{label}: changelog differs for {len(differ)} keys, e.g. {list(differ.items())[:1]}"
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)


@pytest.mark.interop
def test_each_merge_engine_reads_as_if_paimons_own_writer_had_written_the_same_input(spark, java_paimon, tmp_path):
    _compare_with_java(spark, java_paimon, DEFAULT_LABELS, tmp_path)


@pytest.mark.interop
@pytest.mark.soak
def test_more_merge_options_read_as_if_paimons_own_writer_had_written_the_same_input(spark, java_paimon, tmp_path):
    _compare_with_java(spark, java_paimon, [label for label in _engines() if label not in DEFAULT_LABELS], tmp_path)


# -- refusals and bad rows: an error, and the table unchanged -----------------------------------

def _files(path: str) -> set[str]:
    return {os.path.join(root, name) for root, _, names in os.walk(path) for name in names}


class _Unchanged:
    def __init__(self, path: str):
        self.path, self.snapshot, self.files = path, latest_snapshot_id(path), _files(path)

    def check(self) -> None:
        assert latest_snapshot_id(self.path) == self.snapshot
        assert _files(self.path) == self.files  # no data file, no staging left behind


_REFUSALS = [
    ({"merge-engine": "partial-update", "fields.name.sequence-group": "op"}, "sequence groups are not supported"),
    ({"merge-engine": "aggregation", "fields.name.aggregate-function": "count"}, "Apache Paimon removed `count`"),
    ({"merge-engine": "first-row", "rowkind.field": "op"}, "rowkind.field with merge-engine=first-row"),
    ({"merge-engine": "first-row", "changelog-producer": "input"}, "changelog-producer=input with merge-engine=first"),
    ({"merge-engine": "aggregation", "fields.n.ignore-retract": "true"}, "fields.n.ignore-retract=true is not"),
    ({"merge-engine": "partial-update", "ignore-delete": "true"}, "ignore-delete=true with merge-engine=partial"),
    ({"bucket": "-2", "changelog-producer": "input"}, "changelog-producer=input on a postpone-bucket table"),
]


@pytest.mark.parametrize("options, message", [
    case if i < 3 else pytest.param(*case, marks=pytest.mark.soak) for i, case in enumerate(_REFUSALS)],
    ids=["sequence-group", "count", "first-row-rowkind", "first-row-input", "ignore-retract",
         "partial-update-ignore-delete", "postpone-bucket"])
def test_merge_options_are_refused_as_on_the_fast_path_before_anything_is_written(spark, tmp_path, options, message):
    path = str(tmp_path / "wh" / "db.db" / "t")
    df = spark.createDataFrame([(1, "a", "+I")], SCHEMA)
    options = {"bucket": "2", **options}
    with pytest.raises(Exception) as fast:
        lakesink.write(df, path, primary_key=["id"], options=options)
    with pytest.raises(Exception) as native:
        _save(df, path, **{"primary-key": "id", **options})
    assert message in str(fast.value) and str(fast.value) in str(native.value)
    assert not os.path.exists(path)


# ./dev full: bad rows through format("paimon") (the default run refuses them on the fast path, tests/spark/test_keyed_write.py, and fails native jobs past their retries, tests/spark/test_batch_failures.py)
@pytest.mark.full
def test_bad_rows_fail_the_write_and_leave_the_table_unchanged(spark, tmp_path):
    """Each bad row fails its task with the fast path's message; Spark aborts the job, the abort
    removes what every task staged: the same snapshot, not one file more."""
    path = str(tmp_path / "wh" / "db.db" / "t")
    _save(_df(spark, [(i, f"a{i}", "+I") for i in range(10)]), path,
          **{"primary-key": "id", "bucket": "2", "rowkind.field": "op", "merge-engine": "partial-update"})
    before, state = _Unchanged(path), _state(path)
    good = [(i, f"b{i}", "+U") for i in range(10)]
    for bad, message in [((3, "x", "upsert"), "rowkind.field 'op' holds 'upsert'; row kinds are +I, -U, +U, -D"),
                         ((3, "x", None), "rowkind.field 'op' holds null"),
                         ((None, "x", "+I"), "primary-key column 'id' is null in some row"),
                         ((3, "x", "-D"), "merge-engine=partial-update cannot merge them")]:
        with pytest.raises(Exception, match="Nothing was written") as info:
            _save(_df(spark, good[:7] + [bad] + good[7:]), path)
        assert message in str(info.value)
        before.check()
    assert _state(path) == state


# -- streams -------------------------------------------------------------------------------------

# Pipelined (and killed mid-protocol) in CI too: tests/spark/test_crash_format_keyed.py.
# dynamic: ./dev full (tests/spark/test_dynamic_buckets.py streams a dynamic-bucket table by default).
@pytest.mark.parametrize("commit_mode", ["sync", pytest.param("pipelined", marks=pytest.mark.soak),
                                         pytest.param("dynamic", marks=pytest.mark.full)])
def test_a_cdc_stream_through_format_paimon_ends_in_the_sources_final_state_key_for_key(spark, tmp_path,
                                                                                       commit_mode):
    """The promised call on a primary-key table made by a batch write: each micro-batch comes
    from three tasks (several per bucket), planned above the batches before it (pipelined: while
    the one before may still be committing); a restart on the checkpoint commits nothing twice."""
    from tests.spark.test_streaming import _cdc_files, commit_user_of, source_stream
    source, path, chk = tmp_path / "src", str(tmp_path / "wh" / "db.db" / "t"), str(tmp_path / "chk")
    batches = [[(i, f"v0-{i}", "+I") for i in range(40)],
               [(i, f"v1-{i}", "+U") for i in range(0, 40, 3)] + [(i, None, "-D") for i in range(1, 40, 5)],
               [(i, f"v2-{i}", "+I") for i in range(40, 60)] + [(5, "v1-5", "-U"), (5, "v2-5", "+U")],
               [(i, None, "-D") for i in range(50, 60)] + [(1, "back-1", "+I"), (6, None, "-D")]]
    # dynamic: a dynamic-bucket table (sync commits), buckets opened as 8 keys fill one
    buckets = {"dynamic-bucket.target-row-num": "8"} if commit_mode == "dynamic" else {"bucket": "4"}
    _save(_df(spark, [(100, "made by a batch write", "+I")], partitions=1), path,
          **{"primary-key": "id", **buckets, "num-sorted-run.compaction-trigger": "3"})
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("op", pa.string())])

    def run():
        cdc_sdf = source_stream(spark, source, schema).repartition(3, "id")  # a key's changes stay in order
        writer = cdc_sdf.writeStream.format("paimon")
        if commit_mode == "pipelined":
            writer = writer.option("commit.mode", "pipelined")
        query = writer.option("checkpointLocation", chk).option("rowkind.field", "op").start(path)
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        lakesink.await_commits(chk)  # pipelined: the commits; both: the compaction rounds after them

    _cdc_files(source, batches[:2])
    run()
    state = _cdc_files(source, batches)  # two more batches; the query restarts on its checkpoint
    run()
    assert _state(path) == {**state, 100: "made by a batch write"}
    user = commit_user_of(chk)
    assert [s.commit_identifier for s in snapshots(path) if s.commit_user == user and s.commit_kind == "APPEND"] \
        == [0, 1, 2, 3]
    # Rounds ran after the batches (three tasks write each bucket: past the trigger every batch),
    # the last one after batch 3 (await_commits waited for it); sync: in the checkpoint's
    # compaction service, not in Spark's per-batch commit process.
    assert {s.commit_user for s in snapshots(path) if s.commit_kind == "COMPACT"} == {user + ".compact"}
    assert saved_progress(StateStore(f"{chk}/lakesink")) == (3, False)
    service_log = runtime_dir() / runtime_name(chk, COMPACTION, ".log")
    assert service_log.exists() == (commit_mode != "pipelined")
    assert leftover_files(path) == set()
    if commit_mode == "dynamic":  # every key's hash in one bucket, compactions or not
        from tests.interop.test_dynamic_buckets import hash_index
        seen = [h for hashes, _ in hash_index(path).values() for h in hashes]
        assert len(seen) == len(set(seen)) == len(set(range(60)) | {100}) and len(hash_index(path)) > 1
