"""Full compaction of primary-key buckets (paimon.compaction.lsm) without Spark: tables written by pypaimon's
own writer (level-0 files, as lakesink's), compacted on the driver, read back with pypaimon."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakesink
from lakesink.errors import CommitConflictError, UnsupportedTableError
from lakesink.paimon.compaction.target import PaimonCompactionTarget, live_files
from lakesink.paimon.compaction.keyed_aggregator import KeyedCompactionAggregator, compacts_after_commit
from lakesink.paimon.files.datafiles import table_path_of
from lakesink.paimon.keyed.lsm_policy import LsmOptions
from lakesink.paimon.table.tables import open_table
from lakesink.paimon.commit.target import PaimonTarget
from lakesink.protocol.aggregator import group_by_key
from tests.helpers import leftover_files, pypaimon_append, read_table, snapshots

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("op", pa.string())])


def new_table(warehouse, options, schema=SCHEMA, name="t"):
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    catalog = CatalogFactory.create({"warehouse": str(warehouse)})
    catalog.create_database("db", True)
    catalog.create_table(f"db.{name}", Schema.from_pyarrow_schema(schema, primary_keys=["id"],
                                                                  options=dict(options)), False)
    return f"{warehouse}/db.db/{name}"


def append(path, rows, schema=SCHEMA):
    from pypaimon.table.file_store_table import FileStoreTable
    columns = list(zip(*rows)) if rows else [[] for _ in schema]
    pypaimon_append(FileStoreTable.from_path(path), pa.table(
        {f.name: pa.array(list(c), f.type) for f, c in zip(schema, columns)}, schema=schema))


def by_id(path, snapshot_id=None):
    rows = read_table(path, snapshot_id).to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a key was returned twice"
    return {r["id"]: r["v"] for r in rows}


def cdc_writes(path, writes=12, keys=60, seed=7):
    """Random upserts and deletes (rowkind.field op), one pypaimon commit each: the expected state."""
    rng = random.Random(seed)
    expected = {}
    for w in range(writes):
        batch = {}
        for k in rng.sample(range(keys), 15):
            if k in expected and rng.random() < 0.3:
                batch[k] = (k, None, "-D")
            else:
                batch[k] = (k, f"w{w}-{k}", "+U" if k in expected else "+I")
        append(path, list(batch.values()))
        for k, (_, v, op) in batch.items():
            if op == "-D":
                expected.pop(k, None)
            else:
                expected[k] = v
    return expected


def file_rows(table, f) -> pa.Table:
    return pq.read_table(table_path_of(table, f))


def test_full_compaction_leaves_one_sorted_run_per_bucket_at_the_highest_level(tmp_path):
    path = new_table(tmp_path, {"bucket": "3", "rowkind.field": "op", "write-only": "true"})
    expected = cdc_writes(path)
    assert by_id(path) == expected
    table = open_table(path)
    before = live_files(table)
    deleted = {k for f in before for k, kind in zip(file_rows(table, f).column("_KEY_id").to_pylist(),
                                                    file_rows(table, f).column("_VALUE_KIND").to_pylist())
               if kind == 3 and k not in expected}
    assert deleted and len(before) >= 30

    report = lakesink.compact(None, path, progress=False)

    assert snapshots(path)[-1].commit_kind == "COMPACT" and report.files_removed == len(before)
    assert by_id(path) == expected
    assert by_id(path, report.snapshot_id - 1) == expected  # the snapshot before it reads the same
    table = open_table(path)
    after = live_files(table)
    assert {f.meta.level for f in after} == {5}  # num-levels defaults to trigger (5) + 1
    for (_, bucket), files in group_by_key(KeyedCompactionAggregator(PaimonTarget(path), "unused"), after).items():
        assert len(files) == 1, bucket
    on_disk = set()
    for f in after:
        data = file_rows(table, f)
        keys = data.column("_KEY_id").to_pylist()
        assert keys == sorted(set(keys))                       # each key once, sorted
        assert set(data.column("_VALUE_KIND").to_pylist()) <= {0, 2}  # retractions gone
        seqs = data.column("_SEQUENCE_NUMBER").to_pylist()
        m = f.meta
        assert (m.min_key.values, m.max_key.values) == ([keys[0]], [keys[-1]])
        assert (m.key_stats.min_values.get_field(0), m.key_stats.max_values.get_field(0)) == (keys[0], keys[-1])
        assert (m.min_sequence_number, m.max_sequence_number) == (min(seqs), max(seqs))
        assert m.delete_row_count == 0 and m.row_count == len(keys) and m.file_source == 1
        on_disk |= set(keys)
    assert on_disk == set(expected) and not on_disk & deleted   # deleted keys physically gone
    assert leftover_files(path) == set()
    assert lakesink.compact(None, path, progress=False).snapshot_id is None  # nothing left to do


def test_a_small_target_file_size_splits_a_bucket_into_one_run_of_several_files(tmp_path):
    path = new_table(tmp_path, {"bucket": "1", "write-only": "true", "num-levels": "3"}, name="t")
    for w in range(3):
        append(path, [(i, f"w{w}-{i:05d}" + "x" * 40, "+I") for i in range(w * 500, w * 500 + 1500)])
    expected = by_id(path)
    lakesink.compact(None, path, progress=False, target_size=16 * 1024)
    assert by_id(path) == expected
    files = sorted(live_files(open_table(path)), key=lambda f: f.meta.min_key.values)
    assert len(files) > 3 and {f.meta.level for f in files} == {2}   # num-levels=3: level 2
    assert all(a.meta.max_key.values[0] < b.meta.min_key.values[0] for a, b in zip(files, files[1:]))


def test_first_row_tables_become_readable_once_compaction_moves_files_above_level_0(tmp_path):
    path = new_table(tmp_path, {"bucket": "2", "merge-engine": "first-row", "write-only": "true"})
    append(path, [(1, "first", "+I"), (2, "a", "+I")])
    append(path, [(1, "second", "+I"), (3, "b", "+I")])
    assert by_id(path) == {}   # pypaimon's reader skips level-0 files of first-row tables
    lakesink.compact(None, path, progress=False)
    assert by_id(path) == {1: "first", 2: "a", 3: "b"}
    append(path, [(1, "third", "+I"), (4, "c", "+I")])
    assert by_id(path) == {1: "first", 2: "a", 3: "b"}   # the new level-0 file is invisible again
    lakesink.compact(None, path, progress=False)
    assert by_id(path) == {1: "first", 2: "a", 3: "b", 4: "c"}


def test_sequence_field_orders_versions_before_the_sequence_number(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("ts", pa.int64())])
    path = new_table(tmp_path, {"bucket": "1", "sequence.field": "ts", "write-only": "true"}, schema)
    append(path, [(1, "new", 10), (2, "a", 1), (3, "null-ts-later", None)], schema)
    append(path, [(1, "stale", 7), (2, "b", 2), (3, "ts", 1)], schema)
    expected = {1: "new", 2: "b", 3: "ts"}  # a null sequence field sorts first
    assert by_id(path) == expected
    lakesink.compact(None, path, progress=False)
    assert by_id(path) == expected


@pytest.mark.parametrize("in_place", [False, True], ids=["staged", "in-place"])
def test_a_compaction_whose_input_another_commit_removed_gives_up_cleanly(tmp_path, in_place):
    path = new_table(tmp_path, {"bucket": "2", "rowkind.field": "op", "write-only": "true"})
    expected = cdc_writes(path, writes=4)
    target = PaimonTarget(path)
    compaction = PaimonCompactionTarget(target)
    aggregator = KeyedCompactionAggregator(target, compaction.staging_dir("mine"), force=True, in_place=in_place)
    groups = group_by_key(aggregator, live_files(open_table(path)))
    outputs = aggregator.rewrite([aggregator.task_for(files) for files in groups.values()])
    new = [o for out in outputs for o in out]
    # In place: the outputs already lie at their table paths (not in any snapshot yet).
    assert all((f.staged_path is None) == in_place for f in new)
    assert all(os.path.exists(table_path_of(open_table(path), f)) == in_place for f in new)
    lakesink.compact(None, path, progress=False)   # another commit removes every input first
    settled = snapshots(path)[-1].id

    with pytest.raises(CommitConflictError):
        compaction.commit_compaction("mine", 1, [f for files in groups.values() for f in files], new)
    compaction.discard(new)

    assert snapshots(path)[-1].id == settled and by_id(path) == expected
    assert leftover_files(path) == set()


def test_the_compaction_job_rebases_on_a_conflict_or_gives_up_with_its_outputs_deleted(tmp_path, monkeypatch):
    import lakesink.spark.compact as job
    path = new_table(tmp_path, {"bucket": "2", "rowkind.field": "op", "write-only": "true"})
    expected = cdc_writes(path, writes=4)
    run = job.rewrite_on_driver
    competing = []

    def meanwhile_someone_compacts(tasks):
        outputs = run(tasks)
        if not competing:   # once: a later compaction of the same files lands first
            competing.append(True)
            monkeypatch.setattr(job, "rewrite_on_driver", run)
            lakesink.compact(None, path, progress=False)
            monkeypatch.setattr(job, "rewrite_on_driver", meanwhile_someone_compacts)
        return outputs

    monkeypatch.setattr(job, "rewrite_on_driver", meanwhile_someone_compacts)
    with pytest.raises(CommitConflictError, match="table is unchanged"):
        lakesink.compact(None, path, progress=False, max_attempts=1)
    assert [s.commit_kind for s in snapshots(path)][-2:] == ["APPEND", "COMPACT"]
    assert by_id(path) == expected and leftover_files(path) == set()

    cdc_writes(path, writes=2, seed=8)  # new level-0 files, then the same race with retries
    expected = by_id(path)
    competing.clear()
    report = lakesink.compact(None, path, progress=False)
    assert report.extra["conflicts"] == 1
    assert by_id(path) == expected and leftover_files(path) == set()
    assert {f.meta.level for f in live_files(open_table(path))} == {5}


def test_a_commit_making_two_files_of_one_level_overlap_is_an_lsm_conflict(tmp_path):
    import shutil
    from dataclasses import replace

    from lakesink.paimon.files.datafiles import new_data_file_name
    path = new_table(tmp_path, {"bucket": "1", "write-only": "true"})
    append(path, [(1, "a", "+I"), (2, "b", "+I")])
    lakesink.compact(None, path, progress=False)
    table = open_table(path)
    (only,) = live_files(table)
    copy = str(tmp_path / "copy.parquet")
    shutil.copy(table_path_of(table, only), copy)
    twin = replace(only, meta=replace(only.meta, file_name=new_data_file_name()), staged_path=copy)
    with pytest.raises(CommitConflictError, match="LSM conflicts"):
        PaimonCompactionTarget(PaimonTarget(path)).commit_compaction("x", 1, [], [twin])
    assert by_id(path) == {1: "a", 2: "b"}


def test_policy_picks_runs_as_paimons_universal_compaction(tmp_path):
    """Size amplification, then size ratio, then the run count; output below the first run left
    out (never level 0); retractions dropped only at the bucket's highest level."""
    from dataclasses import replace

    path = new_table(tmp_path, {"bucket": "1"})
    append(path, [(1, "x", "+I")])
    (base,) = live_files(open_table(path))
    lsm = LsmOptions.of_table(open_table(path))
    assert (lsm.trigger, lsm.max_level, lsm.max_size_amp, lsm.size_ratio) == (5, 5, 200, 1)

    def run(name, size, level=0, seq=0):
        return replace(base, meta=replace(base.meta, file_name=name, file_size=size, level=level,
                                          min_sequence_number=seq, max_sequence_number=seq))

    def names(unit):
        return None if unit is None else (sorted(f.meta.file_name for f in unit.files), unit.output_level,
                                          unit.drop_deletes)

    fresh = [run(f"n{i}", 100, seq=i) for i in range(5)]
    assert lsm.pick(fresh[:4]) is None                      # fewer runs than the trigger
    assert names(lsm.pick(fresh)) == ([f"n{i}" for i in range(5)], 5, True)  # size amplification: all
    big = run("big", 10_000, level=5)
    assert names(lsm.pick(fresh + [big])) == ([f"n{i}" for i in range(5)], 4, False)  # size ratio
    uneven = [run(f"u{i}", s, seq=9 - i) for i, s in enumerate([10, 20, 400, 30, 30, 30])]
    mid = run("mid", 1_000, level=4)
    # Ratio stops at once (20 > 10 * 1.01); 8 runs > 5: the newest 4, grown by ratio to 6 runs.
    assert names(lsm.pick(uneven + [mid, big])) == ([f"u{i}" for i in range(6)], 3, False)
    assert compacts_after_commit({}, ["id"]) and not compacts_after_commit({"write-only": "true"}, ["id"])
    assert not compacts_after_commit({}, [])


@pytest.mark.parametrize("options, named", [
    ({"merge-engine": "partial-update", "fields.v.sequence-group": "op"}, "fields.v.sequence-group"),
    ({"merge-engine": "partial-update", "ignore-delete": "true"}, "ignore-delete"),
    ({"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
     "partial-update.remove-record-on-delete"),
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "count"}, "Paimon removed `count`"),
    ({"merge-engine": "aggregation", "fields.default-aggregate-function": "collect"},
     "fields.default-aggregate-function='collect'"),
    ({"merge-engine": "aggregation", "fields.v.ignore-retract": "true"}, "fields.v.ignore-retract"),
    ({"merge-engine": "aggregation", "fields.nope.aggregate-function": "sum"}, "names no value column"),
    ({"merge-engine": "aggregation", "sequence.field": "op", "fields.op.aggregate-function": "sum"},
     "sequence.field column"),
    ({"merge-engine": "deduplicate", "fields.v.aggregate-function": "sum"}, "aggregation only"),
    ({"merge-engine": "dedupe"}, "not a Paimon merge engine"),
    ({"changelog-producer": "lookups"}, "changelog-producer='lookups' is not one of"),
    ({"merge-engine": "first-row", "changelog-producer": "full-compaction"}, "first-row"),
    ({"changelog-producer": "lookup", "full-compaction.delta-commits": "2"}, "full-compaction.delta-commits"),
    ({"merge-engine": "first-row", "changelog-producer": "input"}, "first-row"),
])
def test_merge_options_lakesink_cannot_merge_are_refused_by_name(options, named):
    from lakesink.errors import ConfigurationError
    from lakesink.paimon.keyed.layout import KeyedSpec
    with pytest.raises(ConfigurationError, match=named.replace("(", r"\(")):
        KeyedSpec.resolve(("id",), (), {"bucket": "1", **options}, ["id", "v", "op"])


def test_partial_update_and_aggregation_merge_versions_as_paimon():
    """Several versions of a key merge into one +I row (the last version's sequence number); a
    key's only version stays as it came, a -D included, and then leaves at the highest level."""
    from decimal import Decimal

    from lakesink.paimon.keyed.layout import KeyedSpec
    from lakesink.paimon.keyed.merge_engines import merge
    data = pa.table({"_KEY_id": pa.array([1, 1, 1, 2, 3, 3], pa.int64()),
                     "_SEQUENCE_NUMBER": pa.array([1, 2, 3, 1, 1, 2], pa.int64()),
                     "_VALUE_KIND": pa.array([0, 2, 0, 3, 0, 1], pa.int8()),
                     "id": pa.array([1, 1, 1, 2, 3, 3], pa.int64()),
                     "s": pa.array([Decimal("1.5"), None, Decimal("2"), Decimal(9), Decimal(4), Decimal(1)],
                                   pa.decimal128(10, 2)),
                     "t": ["a", None, "c", "z", "x", "y"],
                     "l": ["p", "q", " ", None, "u", "w"],
                     "_lakesink_file_rank": pa.array([0, 1, 2, 0, 0, 1], pa.int32())})
    lsm = LsmOptions(5, 6, 1 << 20, False, False, "aggregation", "snappy")
    spec = KeyedSpec.resolve(("id",), (), {"bucket": "1", "merge-engine": "aggregation",
                                           "fields.s.aggregate-function": "sum",
                                           "fields.t.aggregate-function": "last_value",
                                           "fields.l.aggregate-function": "last_non_null_value"},
                             ["id", "s", "t", "l"])
    out = merge(data, spec, lsm).to_pylist()
    # key 1: sum 3.5, last t "c", last non-null l " "; key 2 (a lone -D) leaves; key 3: 4 - 1,
    # last_value retracted to null, last_non_null "w" retracted to null.
    assert [(r["id"], r["s"], r["t"], r["l"], r["_VALUE_KIND"], r["_SEQUENCE_NUMBER"]) for r in out] == [
        (1, Decimal("3.5"), "c", " ", 0, 3), (3, Decimal(3), None, None, 0, 2)]
    listagg = KeyedSpec.resolve(("id",), (), {"bucket": "1", "merge-engine": "aggregation",
                                              "fields.l.aggregate-function": "listagg",
                                              "fields.l.list-agg-delimiter": ";"}, ["id", "s", "t", "l"])
    keep = pa.compute.equal(data.column("_KEY_id"), 1)
    assert merge(data.filter(keep), listagg, lsm).column("l").to_pylist() == ["p;q"]  # blank skipped
    partial = KeyedSpec.resolve(("id",), (), {"bucket": "1", "merge-engine": "partial-update"},
                                ["id", "s", "t", "l"])
    from dataclasses import replace
    out = merge(data.filter(keep), partial, replace(lsm, merge_engine="partial-update")).to_pylist()
    assert [(r["s"], r["t"], r["l"]) for r in out] == [(Decimal(2), "c", " ")]
    with pytest.raises(UnsupportedTableError, match="partial-update cannot merge"):
        merge(data, partial, replace(lsm, merge_engine="partial-update"))  # key 3 holds a -U


def test_equal_versions_are_ordered_by_file_age(tmp_path):
    """Two writers from one base snapshot give equal sequence numbers: the newer file's row is the
    later version (deduplicate keeps it, first-row the older one); retractions surviving leave."""
    from dataclasses import replace

    from lakesink.paimon.keyed.layout import KeyedSpec
    from lakesink.paimon.keyed.merge_engines import merge
    data = pa.table({"_KEY_id": pa.array([1, 1, 2, 2, 3], pa.int64()),
                     "_SEQUENCE_NUMBER": pa.array([5, 5, 1, 2, 0], pa.int64()),
                     "_VALUE_KIND": pa.array([0, 0, 0, 3, 0], pa.int8()),
                     "v": ["old", "new", "x", None, "y"],
                     "_lakesink_file_rank": pa.array([0, 1, 1, 0, 0], pa.int32())})
    spec = KeyedSpec(("id",), ("id",), (), ("id",), 1)
    lsm = LsmOptions(5, 6, 1 << 20, False, False, "deduplicate", "snappy")
    assert merge(data, spec, lsm).column("v").to_pylist() == ["new", "y"]   # key 2 deleted
    kept = merge(data, spec, lsm, drop_deletes=False)  # not the highest level: the -D must cancel older rows
    assert kept.column("_VALUE_KIND").to_pylist() == [0, 3, 0]
    first = merge(data.filter(pa.compute.not_equal(data.column("_VALUE_KIND"), 3)), spec,
                  replace(lsm, merge_engine="first-row"))
    assert first.column("v").to_pylist() == ["old", "x", "y"]
    with pytest.raises(UnsupportedTableError, match="ignore-delete"):
        merge(data, spec, replace(lsm, merge_engine="first-row"))
    ignoring = merge(data, spec, replace(lsm, ignore_delete=True))
    assert ignoring.column("v").to_pylist() == ["new", "x", "y"]


def _changes_of_latest(path) -> list[tuple]:
    """(rowkind, id, v) of the changelog files of the latest snapshot, as stored."""
    from lakesink.paimon.read import changes

    table = open_table(path)
    latest = table.snapshot_manager().get_latest_snapshot().id
    schema = pa.schema([("rowkind", pa.string()), ("id", pa.int64()), ("v", pa.string()), ("op", pa.string())])
    out = []
    for f in changes.plan_changes(table, latest - 1, latest, False):
        out += [(r["rowkind"], r["id"], r["v"]) for r in changes.read_change_file(table, f, schema).to_pylist()]
    return sorted(out)


def _expected_changes(before: dict, after: dict, touched, dedupe=False) -> list[tuple]:
    out = []
    for k in sorted(set(before) | set(after)):
        b, a = before.get(k), after.get(k)
        if b is None and a is not None:
            out.append(("+I", k, a))
        elif b is not None and a is None:
            out.append(("-D", k, b))
        elif b is not None and k in touched and not (dedupe and a == b):
            out += [("-U", k, b), ("+U", k, a)]
    return sorted((kind, k, v[0]) for kind, k, v in out)


@pytest.mark.parametrize("producer, dedupe", [("lookup", False), ("lookup", True), ("full-compaction", False)])
def test_a_compaction_writes_each_keys_change_against_its_previous_value(tmp_path, producer, dedupe):
    """Commits by pypaimon (level 0), each followed by lakesink's round (lookup: the automatic
    pick, which moves every level-0 run up, often to an intermediate level above older runs it
    must look the old values up in; full-compaction: a full one): the COMPACT snapshot's
    changelog holds exactly each key's change since the last round."""
    path = new_table(tmp_path, {"bucket": "2", "rowkind.field": "op", "changelog-producer": producer,
                                "write-only": "true", "changelog-producer.row-deduplicate": str(dedupe).lower()})
    rng, state, levels = random.Random(3), {}, set()
    for w in range(7):
        batch = {}
        # A big first write, then small ones: the size ratio leaves the big run alone, so later
        # rounds write above it and look the old values up there.
        for k in range(200) if w == 0 else rng.sample(range(200), 8):
            if k in state and rng.random() < 0.3:
                batch[k] = (k, None, "-D")
            else:  # some rewrites keep the value: row-deduplicate drops those pairs
                value = state[k][0] if k in state and rng.random() < 0.3 else f"w{w}-{k}"
                batch[k] = (k, value, "+U" if k in state else "+I")
        append(path, list(batch.values()))
        before = dict(state)
        for k, (_, v, op) in batch.items():
            if op == "-D":
                state.pop(k, None)
            else:
                state[k] = (v, op)  # the row-kind column is a value column: it takes part in equality
        report = lakesink.compact(None, path, full=producer == "full-compaction", progress=False)
        assert report.snapshot_id is not None
        assert _changes_of_latest(path) == _expected_changes(before, state, batch, dedupe), f"write {w}"
        assert by_id(path) == {k: v for k, (v, _) in state.items()}
        levels |= {f.meta.level for f in live_files(open_table(path))}
    if producer == "lookup":
        assert 0 not in levels and len(levels) > 1  # runs at intermediate levels: lookups happened


def test_a_lookup_compaction_writes_complete_partial_updates_above_older_runs(tmp_path):
    """partial-update: the value a lookup round writes at an intermediate level is the key's whole
    merged row (Java's lookup readers take the newest run above level 0 as complete)."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("w", pa.string())])
    path = new_table(tmp_path, {"bucket": "1", "merge-engine": "partial-update", "changelog-producer": "lookup",
                                "write-only": "true"}, schema=schema)
    append(path, [(i, f"v{i}", f"w{i}") for i in range(50)], schema)
    lakesink.compact(None, path, full=False, progress=False)
    append(path, [(1, "new", None)], schema)
    lakesink.compact(None, path, full=False, progress=False)
    table = open_table(path)
    newest = min((f for f in live_files(table)), key=lambda f: f.meta.level)
    assert newest.meta.level not in (0, LsmOptions.of_table(table).max_level)
    assert file_rows(table, newest).select(["id", "v", "w"]).to_pylist() == [{"id": 1, "v": "new", "w": "w1"}]
    assert _changes_of_latest(path) == [("+U", 1, "new"), ("-U", 1, "v1")]


def test_full_compaction_delta_commits_are_counted_in_the_tables_history(tmp_path):
    from lakesink.paimon.compaction.keyed_aggregator import full_compaction_due

    path = new_table(tmp_path, {"bucket": "1", "full-compaction.delta-commits": "3"})
    assert not full_compaction_due(open_table(path), 3)
    for i in range(3):
        append(path, [(i, "x", "+I")])
        assert full_compaction_due(open_table(path), 3) == (i == 2)
    lakesink.compact(None, path, progress=False)  # a full compaction: counting starts again
    assert not full_compaction_due(open_table(path), 3)
    append(path, [(9, "x", "+I")])
    lakesink.compact(None, path, full=False, progress=False)  # not a full one
    append(path, [(10, "x", "+I")])
    assert not full_compaction_due(open_table(path), 3)
    append(path, [(11, "x", "+I")])
    assert full_compaction_due(open_table(path), 3)


# -- a driver killed while compacting, restarted (no Spark: tests/unit/keyed_compaction_child.py) --

def _run_keyed_child(tmp_path, table, batches: int, crash_at: str | None, in_place: bool, name: str):
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    if crash_at:
        env["LAKESINK_CRASH_AT"] = crash_at
        env["LAKESINK_CRASH_COUNTER"] = str(tmp_path / f"counter-{name}")
    cmd = [sys.executable, "-m", "tests.unit.keyed_compaction_child", "--table", table,
           "--checkpoint", str(tmp_path / "chk"), "--batches", str(batches)] + (["--in-place"] if in_place else [])
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=180,
                          start_new_session=True)


# Staged: ./dev full (the default run kills compaction rounds on both paths, tests/crash/matrix.py).
@pytest.mark.parametrize("in_place", [pytest.param(False, marks=pytest.mark.full), True], ids=["staged", "in-place"])
def test_a_driver_killed_while_compacting_buckets_restarts_to_every_change_once(tmp_path, in_place):
    """Kills mid-rewrite (data and changelog files half written), after-aggregate (written and
    pending, no COMPACT snapshot) and after-compact (landed, state not saved), each followed by
    a restart: the sums of an aggregation table count every micro-batch once, and no data or
    changelog file outside the snapshots stays. In place (`write.in-place=true`), the outputs
    lie at their table paths before their commit, named in intents; the ends remove them."""
    import json
    import signal
    from pathlib import Path

    from tests.unit.keyed_compaction_child import expected_hits
    table = str(tmp_path / "wh" / "db.db" / "t")
    batches = 3
    for i, point in enumerate(["mid-rewrite@1", "after-aggregate@1", "after-compact@1"]):
        batches += 3
        result = _run_keyed_child(tmp_path, table, batches, point, in_place, str(i))
        assert result.returncode == -signal.SIGKILL, f"{point} not reached: {result.stdout}{result.stderr}"
        staging = next(Path(table, "_lakesink", "staging").glob("*-compact"))
        assert not list(staging.glob("*.parquet")) if in_place else not list(staging.glob("intents"))
        if in_place and point != "after-compact@1":  # the dead compaction's outputs, at table paths
            named = [p for f in staging.glob("intents/*.json") for p in json.loads(f.read_text())["files"]]
            assert named and all(p.startswith(table + "/bucket-") for p in named), named
            assert any(os.path.exists(p) for p in named) and leftover_files(table)  # in no snapshot yet
    result = _run_keyed_child(tmp_path, table, batches + 3, None, in_place, "final")
    assert result.returncode == 0, result.stderr
    rows = read_table(table).to_pylist()
    assert len(rows) == len({r["id"] for r in rows})
    assert {r["id"]: r["hits"] for r in rows} == expected_hits(batches + 3)
    assert leftover_files(table) == set()
    kinds = [s.commit_kind for s in snapshots(table)]
    assert kinds.count("APPEND") == batches + 3 and kinds.count("COMPACT") >= 3
    assert any(s.changelog_manifest_list for s in snapshots(table) if s.commit_kind == "COMPACT")
