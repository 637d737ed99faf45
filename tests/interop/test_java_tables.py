"""Tables Apache Paimon's Java writer (1.0) wrote, read by lakesink row for row.

Paimon writes them (Parquet, ORC and Avro append tables, a primary-key table with
an update and a delete, one with deletion vectors, an evolved schema, a tag) and
reads them back itself; `lakesink.read` and `spark.read.format("paimon")` must
return exactly those rows. Their manifests predate `_VALUE_STATS_COLS`
(lakesink.paimon.table.compat), and ORC, Avro and deletion vectors are beyond Spark's
Parquet reader, so each read also exercises a fallback.
"""

from __future__ import annotations

import pytest

import lakesink
from lakesink.paimon.read import scan

from . import rows as R

pytestmark = [pytest.mark.interop, pytest.mark.spark]

KINDS = ["parquet", "orc", "avro", "pk", "dv", "evolved", "tagged", "layout", "nanos"]
COMPACTED = ["parquet", "nanos", "layout"]  # written twice: one copy is compacted by lakesink


@pytest.fixture(scope="module")
def java_tables(java_paimon, tmp_path_factory):
    """{kind: (path, rows Paimon reads back)}; one JVM writes all, one reads all."""
    warehouse = tmp_path_factory.mktemp("java-wh")
    paths = {kind: str(warehouse / "db.db" / kind) for kind in KINDS}
    paths.update({f"{kind}_compacted": str(warehouse / "db.db" / f"{kind}_compacted") for kind in COMPACTED})
    paths["null-structs"] = str(warehouse / "db.db" / "null_structs")
    java_paimon.write({kind: path for kind, path in paths.items() if not kind.endswith("_compacted")})
    java_paimon.write({kind: paths[f"{kind}_compacted"] for kind in COMPACTED})
    reads = java_paimon.read_many(list(paths.values()), tmp_path_factory.mktemp("java-read"))
    out = {}
    for kind, path in paths.items():
        if isinstance(reads[path], Exception):
            raise reads[path]
        out[kind] = (path, reads[path])
    return out


def _rows(df) -> list[dict]:
    return R.from_arrow(df.toArrow())


READERS = {
    "lakesink.read": lambda spark, path: lakesink.read(spark, path),
    "format(paimon)": lambda spark, path: spark.read.format("paimon").load(path),
}


def test_java_wrote_what_the_tests_expect(java_tables):
    # The comparison below is only as good as these tables: check a few facts by hand.
    assert len(java_tables["parquet"][1]) == 20
    pk = {row["id"]: row for row in java_tables["pk"][1]}
    assert 7 not in pk and len(pk) == 14 and pk[2]["s"] == 's"21é'  # id 2 updated by row 21, id 7 deleted
    dv = {row["id"]: row["v"] for row in java_tables["dv"][1]}
    assert 5 not in dv and dv[10] == "v2-10" and dv[11] == "v1-11" and len(dv) == 99
    evolved = {row["id"]: row for row in java_tables["evolved"][1]}
    assert evolved[0] == {"id": 0, "new_name": "a0", "n": 0, "extra": None}
    assert evolved[7]["n"] == 70_000_000_000


def test_java_wrote_old_manifests_and_deletion_vectors(java_tables):
    import glob
    import os

    import fastavro

    path = java_tables["dv"][0]
    manifest = sorted(glob.glob(os.path.join(path, "manifest", "manifest-[0-9a-f]*")))[0]
    with open(manifest, "rb") as stream:
        fields = fastavro.reader(stream).writer_schema["fields"]
    file_fields = [f["name"] for f in next(f for f in fields if f["name"] == "_FILE")["type"]["fields"]]
    assert "_VALUE_STATS_COLS" not in file_fields  # what compat.py is for
    assert glob.glob(os.path.join(path, "index", "index-*")), "no deletion vector file: the dv case tests nothing"


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("kind", KINDS)
def test_lakesink_reads_the_table_java_paimon_wrote(kind, reader, spark, java_tables):
    path, expected = java_tables[kind]
    R.assert_same_rows(_rows(READERS[reader](spark, path)), expected, f"{reader} reading Java's {kind} table")


def test_deleted_rows_never_show_through_lakesink(spark, java_tables):
    path, _ = java_tables["dv"]
    table = scan.open_for_read(path)
    assert table.options.deletion_vectors_enabled()
    for reader in READERS.values():
        rows = {row["id"]: row["v"] for row in _rows(reader(spark, path))}
        assert 5 not in rows and rows[0] == "v2-0" and rows[90] == "v2-90"
        assert len(rows) == 99


def test_time_travel_to_a_tag_java_paimon_created(spark, java_tables):
    path, latest = java_tables["tagged"]
    assert len(latest) == 3
    for df in (lakesink.read(spark, path, tag="first"),
               spark.read.format("paimon").option("scan.tag-name", "first").load(path),
               lakesink.read(spark, path, snapshot=1)):
        R.assert_same_rows(_rows(df), [{"id": 1, "v": "one"}, {"id": 2, "v": "two"}], "tag first")


@pytest.mark.parametrize("kind", ["parquet"])
def test_java_paimon_reads_a_java_table_after_lakesink_compacts_it(kind, spark, java_tables, java_paimon,
                                                                 tmp_path):
    path, expected = java_tables[f"{kind}_compacted"]
    report = lakesink.compact(spark, path, progress=False)
    assert report.snapshot_id is not None and report.files_removed > report.files_added
    R.assert_same_rows(java_paimon.read(path, tmp_path), expected, f"Java Paimon reading {kind} after compaction")
    R.assert_same_rows(_rows(lakesink.read(spark, path)), expected, f"lakesink reading {kind} after compaction")


def test_java_paimon_1_0_reads_a_struct_of_nulls_as_null(spark, java_tables):
    # Paimon's own writer stores the struct; its 1.0 reader returns null for it (other
    # readers do not). Why test_lakesink_tables collapses such structs for that reader only.
    path, java_rows = java_tables["null-structs"]
    assert {row["id"]: row["st"] for row in java_rows} == {1: None, 2: None}
    lakesink_rows = {row["id"]: row for row in _rows(lakesink.read(spark, path))}
    assert lakesink_rows[1]["st"] == {"x": None} and lakesink_rows[1]["arr"] == [{"x": None}, None]
    assert lakesink_rows[2]["st"] is None


@pytest.mark.parametrize("kind", ["nanos", "layout"])
def test_compaction_refuses_nanosecond_timestamps_clearly(kind, spark, java_tables, java_paimon, tmp_path):
    # Paimon stores TIMESTAMP(7-9) as INT96; pyarrow's INT96 is per file and encodes pre-1970
    # times in a way Paimon's Java reader rejects (it failed on lakesink's rewrite of "nanos"),
    # so lakesink refuses instead of writing a file another engine cannot read.
    path, expected = java_tables[f"{kind}_compacted"]
    with pytest.raises(lakesink.UnsupportedTableError, match="INT96"):
        lakesink.compact(spark, path, progress=False)
    R.assert_same_rows(java_paimon.read(path, tmp_path), expected, f"Java Paimon reading {kind} after the refusal")
