"""partial-update and aggregation tables: the same input, in the same order, written once by
lakesink and once by Apache Paimon's own Java writer (one commit per batch), must read the
same through Paimon's Java reader, and lakesink's table the same through pypaimon and
`lakesink.read`; also after lakesink's compaction has merged the versions."""

from __future__ import annotations

from decimal import Decimal

import pytest

import lakesink
from tests.helpers import read_table

from . import rows as R

pytestmark = [pytest.mark.interop, pytest.mark.spark]

COLUMNS = [("id", "BIGINT"), ("dt", "STRING"), ("n", "BIGINT"), ("amount", "DECIMAL(12,2)"), ("x", "DOUBLE"),
           ("lo", "INT"), ("hi", "INT"), ("tag", "STRING"), ("first", "STRING"), ("firstnn", "STRING"),
           ("ok", "BOOLEAN"), ("any", "BOOLEAN"), ("names", "STRING"), ("op", "STRING")]
SPARK_SCHEMA = ("id long, dt string, n long, amount decimal(12,2), x double, lo int, hi int, tag string, "
                "first string, firstnn string, ok boolean, any boolean, names string, op string")


def _row(i, dt, w, op="+I", nulls=False):
    """A version of key (i, dt) from write w; `nulls` leaves most value columns null."""
    def v(value):
        return None if nulls and (i + w) % 2 else value
    return (i, dt, v(i + w), v(Decimal(i * 3 + w) / 4), v((i + 1) * 0.5 + w), v(i - w), v(i * w),
            v(f"t{w}"), v(f"f{w}-{i}"), v(f"n{w}"), v(w % 3 != 0), v(i % 4 == w), v(f"s{w}"), op)


def _batches(cdc: bool):
    """Three writes over 24 keys in two partitions: new keys, updates (several versions of a key
    in one write, nulls) and, with `cdc`, -U/+U pairs and deletes."""
    keys = [(i, "ab"[i % 2]) for i in range(24)]
    out = [[_row(i, dt, 0) for i, dt in keys[:16]]
           + [_row(i, dt, 1, nulls=True) for i, dt in keys[:8]]]
    second = [_row(i, dt, 2, nulls=True) for i, dt in keys[4:20]]
    if cdc:
        second += [_row(i, dt, 0, "-U") for i, dt in keys[10:14]] + [_row(i, dt, 3, "+U") for i, dt in keys[10:14]]
    out.append(second)
    third = [_row(i, dt, 4) for i, dt in keys[18:24]] + [_row(i, dt, 5, nulls=True) for i, dt in keys[0:3]]
    if cdc:
        third += [_row(i, dt, 2, "-D", nulls=True) for i, dt in keys[5:7]]  # a key's only version: a -D
    out.append(third)
    return out


ENGINES = {
    "partial-update": ({"merge-engine": "partial-update"}, False),
    "partial-update-seq": ({"merge-engine": "partial-update", "sequence.field": "lo"}, False),
    "aggregation": ({"merge-engine": "aggregation", "fields.n.aggregate-function": "sum",
                     "fields.amount.aggregate-function": "sum", "fields.x.aggregate-function": "sum",
                     "fields.lo.aggregate-function": "min", "fields.hi.aggregate-function": "max",
                     "fields.tag.aggregate-function": "last_value",
                     "fields.first.aggregate-function": "first_value",
                     "fields.firstnn.aggregate-function": "first_non_null_value",
                     "fields.ok.aggregate-function": "bool_and", "fields.any.aggregate-function": "bool_or",
                     "fields.names.aggregate-function": "listagg",
                     "fields.names.list-agg-delimiter": "|"}, False),
    # Retractions: only functions that take them (sum, last_value, last_non_null_value: the default).
    "aggregation-cdc": ({"merge-engine": "aggregation", "fields.n.aggregate-function": "sum",
                         "fields.amount.aggregate-function": "sum", "fields.x.aggregate-function": "sum",
                         "fields.lo.aggregate-function": "sum", "fields.tag.aggregate-function": "last_value",
                         "fields.default-aggregate-function": "last_non_null_value"}, True),
}


def _json(value):
    return str(value) if isinstance(value, Decimal) else value


LABELS = [*ENGINES, "partial-update-compacted", "aggregation-compacted", "aggregation-cdc-compacted"]


@pytest.fixture(scope="module")
def written(spark, java_paimon, tmp_path_factory):
    """label -> (lakesink's table, Java Paimon's table), written on first use; `-compacted`:
    lakesink compacts after every write (trigger 1), so its compaction merges the versions."""
    wh = tmp_path_factory.mktemp("merge-engines") / "db.db"
    cache = {}

    def get(label):
        if label not in cache:
            name = label.removesuffix("-compacted")
            engine_options, cdc = ENGINES[name]
            batches = _batches(cdc)
            options = {"bucket": "2", "rowkind.field": "op", **engine_options,
                       "num-sorted-run.compaction-trigger": "1" if label != name else "100"}
            ours, theirs = str(wh / f"ls_{label}"), str(wh / f"java_{label}")
            for rows in batches:
                df = spark.createDataFrame(rows, SPARK_SCHEMA).coalesce(1)  # one partition: input order is row order
                lakesink.write(df, ours, primary_key=["id", "dt"], partition_by=["dt"], options=options)
            spec = {"columns": COLUMNS, "primary_key": ["id", "dt"], "partition": ["dt"],
                    "options": {**options, "num-sorted-run.compaction-trigger": "100"},
                    "batches": [[[r[-1], [_json(v) for v in r]] for r in rows] for rows in batches]}
            java_paimon.replay(spec, theirs, tmp_path_factory.mktemp("replay"))
            cache[label] = (ours, theirs)
        return cache[label]
    return get


# Default: partial updates ordered by a sequence field, and a CDC aggregation compacted by lakesink
# after every write (its writes, retractions and compaction); ./dev full adds the other engines'
# cases compacted and not; the soak also compacts partial updates.
DEFAULT_LABELS = ("partial-update-seq", "aggregation-cdc-compacted")


def _marked(label):
    if label == "partial-update-compacted":
        return pytest.param(label, marks=pytest.mark.soak)
    return label if label in DEFAULT_LABELS else pytest.param(label, marks=pytest.mark.full)


@pytest.mark.parametrize("label", [_marked(label) for label in LABELS])
def test_merge_engine_reads_as_if_paimon_had_written_it(spark, java_paimon, written, label, tmp_path):
    ours, theirs = written(label)
    reads = java_paimon.read_many([theirs, ours], tmp_path)  # one JVM for both
    paimon_wrote, by_java = reads[theirs], reads[ours]
    for got in (paimon_wrote, by_java):
        if isinstance(got, Exception):
            raise got
    assert len(paimon_wrote) == 24  # neither engine removes a key on -D
    R.assert_same_rows(by_java, paimon_wrote, f"{label}: Java Paimon reading lakesink's table vs Paimon's own")
    by_pypaimon = R.from_arrow(read_table(ours))
    R.assert_same_rows(by_pypaimon, paimon_wrote, f"{label}: pypaimon reading lakesink's table")
    by_lakesink = R.from_arrow(lakesink.read(spark, ours).toArrow())
    R.assert_same_rows(by_lakesink, paimon_wrote, f"{label}: lakesink.read")


@pytest.mark.parametrize("label", [_marked(label) for label in LABELS if label.endswith("-compacted")])
def test_compaction_really_merged_the_versions(written, label):
    from lakesink.paimon.compaction.target import live_files
    from lakesink.paimon.table.tables import open_table

    files = live_files(open_table(written(label)[0]))
    assert files and {f.meta.level for f in files} == {1}, label  # num-levels = trigger + 1
    assert not any(f.meta.delete_row_count for f in files), label
