"""`metadata.iceberg.storage=table-location`: after each commit of lakesink (write, format("paimon"),
overwrite, compaction, streams) pyiceberg, reading the table's Iceberg metadata, sees exactly the rows
lakesink reads, and the Iceberg snapshot follows the Paimon snapshot."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lakesink
from lakesink.errors import UnsupportedOptionError, UnsupportedTableError
from tests import iceberg_oracle
from tests.helpers import latest_snapshot_id, read_table, write
from tests.spark.test_bad_input import Unchanged

pytestmark = pytest.mark.spark

ICEBERG = {"metadata.iceberg.storage": "table-location"}


@pytest.fixture()
def iceberg():
    iceberg_oracle.require()
    return iceberg_oracle


def rows(spark, start: int, n: int, day: str = "2024-01-01"):
    return spark.createDataFrame([(i, f"v{i}", day, i * 0.5) for i in range(start, start + n)],
                                 "id long, name string, day string, x double")


def _sorted(table: pa.Table, columns) -> list[tuple]:
    table = table.select(columns)
    return sorted(zip(*[table.column(c).to_pylist() for c in columns]))


def same_rows(tmp_path, iceberg, path: str) -> dict:
    """pyiceberg's rows equal lakesink's; returns pyiceberg's account of the snapshot."""
    got, info = iceberg.read(tmp_path, path)
    want = read_table(path)
    columns = ["id", "name", "day", "x"]
    assert _sorted(got, columns) == _sorted(want, columns)
    assert info["snapshot_id"] == latest_snapshot_id(path)
    return info


@pytest.mark.parametrize("path_kind", ["fast", pytest.param("native", marks=pytest.mark.full)])
def test_appends_and_a_partition_overwrite_read_back_by_pyiceberg(spark, tmp_path, table_path, iceberg, path_kind):
    if path_kind == "fast":
        lakesink.write(rows(spark, 0, 5), table_path, partition_by=["day"], options=ICEBERG)
    else:
        rows(spark, 0, 5).write.format("paimon").mode("append").option("partition", "day").options(**ICEBERG).save(table_path)
    first = same_rows(tmp_path, iceberg, table_path)
    assert first["partition_spec"] == [["day", "identity", 2]]
    assert [f[1] for f in first["schema"]] == ["id", "name", "day", "x"]
    assert first["operation"] == "append" and first["summary"]["total-records"] == "5"

    write(rows(spark, 5, 3, day="2024-01-02"), table_path, path_kind)
    second = same_rows(tmp_path, iceberg, table_path)
    assert second["snapshot_id"] > first["snapshot_id"]
    assert second["summary"]["added-records"] == "3" and second["summary"]["total-records"] == "8"
    assert second["table_uuid"] == first["table_uuid"]

    # Replace one partition: the other keeps its rows in both readers.
    write(rows(spark, 100, 2, day="2024-01-01"), table_path, path_kind, mode="overwrite",
          partitionOverwriteMode="dynamic")
    third = same_rows(tmp_path, iceberg, table_path)
    assert third["snapshot_id"] > second["snapshot_id"]
    assert third["operation"] == "overwrite"
    assert sorted(read_table(table_path).column("id").to_pylist()) == [5, 6, 7, 100, 101]


def test_an_unpartitioned_table_through_compaction(spark, tmp_path, table_path, iceberg):
    for start in range(0, 12, 3):
        lakesink.write(rows(spark, start, 3), table_path, options=ICEBERG)
    before = same_rows(tmp_path, iceberg, table_path)
    assert before["partition_spec"] == []
    lakesink.compact(spark, table_path, progress=False)
    after = same_rows(tmp_path, iceberg, table_path)
    assert after["snapshot_id"] > before["snapshot_id"]
    assert after["operation"] == "replace"
    assert int(after["summary"]["total-data-files"]) < int(before["summary"]["total-data-files"])
    assert after["summary"]["total-records"] == "12"


@pytest.mark.parametrize("mode", ["fast", pytest.param("native-pipelined", marks=pytest.mark.full)])
def test_a_stream_of_micro_batches(spark, tmp_path, iceberg, mode):
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    table = str(tmp_path / "wh" / "db.db" / "s")
    source, checkpoint = tmp_path / "source", str(tmp_path / "chk")
    source.mkdir()
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.string()), ("x", pa.float64())])
    seen = []
    for batch in range(3):
        ids = list(range(batch * 4, batch * 4 + 4))
        pq.write_table(pa.table({"id": ids, "name": [f"v{i}" for i in ids], "day": [f"2024-01-0{batch + 1}"] * 4,
                                 "x": [i * 0.5 for i in ids]}, schema=schema), source / f"part-{batch}.parquet")
        df = spark.readStream.schema(from_arrow_schema(schema)).option("maxFilesPerTrigger", 1).parquet(str(source))
        if mode == "fast":
            query = lakesink.stream(df, table, checkpoint=checkpoint, trigger="availableNow", partition_by=["day"],
                                    options=ICEBERG)
        else:  # format("paimon"), committed by its committer process
            query = (df.writeStream.format("paimon").trigger(availableNow=True).option("checkpointLocation", checkpoint)
                     .option("partition", "day").option("commit.mode", "pipelined").options(**ICEBERG).start(table))
        assert query.awaitTermination(120)
        assert query.exception() is None
        if mode != "fast":
            lakesink.await_commits(checkpoint)
        seen.append(same_rows(tmp_path, iceberg, table)["snapshot_id"])
    assert seen == sorted(set(seen)) and len(seen) == 3
    assert len(read_table(table)) == 12


def test_a_lost_iceberg_version_is_rebuilt_by_the_next_commit_and_by_maintenance(spark, tmp_path, table_path,
                                                                                 iceberg):
    lakesink.write(rows(spark, 0, 3), table_path, options=ICEBERG)
    lakesink.write(rows(spark, 3, 3), table_path)
    # A crash between the Paimon snapshot and its Iceberg metadata: the newest version is missing
    # and the hint still names the one before.
    newest = latest_snapshot_id(table_path)
    os.remove(os.path.join(table_path, "metadata", f"v{newest}.metadata.json"))
    with open(os.path.join(table_path, "metadata", "version-hint.text"), "w") as hint:
        hint.write(str(newest - 1))
    stale, _ = iceberg.read(tmp_path, table_path)
    assert len(stale) == 3

    lakesink.write(rows(spark, 6, 3), table_path)
    assert same_rows(tmp_path, iceberg, table_path)["summary"]["total-records"] == "9"

    # Maintenance repairs it too, without a commit.
    newest = latest_snapshot_id(table_path)
    os.remove(os.path.join(table_path, "metadata", f"v{newest}.metadata.json"))
    from lakesink.paimon import maintenance
    assert maintenance.maintain(table_path)["iceberg_snapshot"] == newest
    assert same_rows(tmp_path, iceberg, table_path)["summary"]["total-records"] == "9"


KEYED = {"fixed": {"bucket": "2"}, "native": {"bucket": "2"}, "dynamic": {}, "postpone": {"bucket": "-2"},
         "dv": {"bucket": "2", "deletion-vectors.enabled": "true"}}
KEYED_COLUMNS = ["id", "name", "day", "op"]


def changes(spark, rows):
    return spark.createDataFrame([(i, name, f"d{i % 2}", op) for i, name, op in rows],
                                 "id long, name string, day string, op string")


@pytest.mark.parametrize("kind", ["fixed", *(pytest.param(k, marks=pytest.mark.full)
                                             for k in ("native", "dynamic", "postpone", "dv"))])
def test_a_keyed_table_shows_iceberg_readers_its_highest_level_until_compacted(spark, tmp_path, table_path,
                                                                               iceberg, kind):
    """Paimon's rule: Iceberg readers read only a primary-key table's files at the highest LSM
    level, the rows of its last full compaction, never a key twice; after a full compaction the
    same rows as Paimon's readers, key for key."""
    path_kind = "native" if kind == "native" else "fast"

    def step(df, **options) -> pa.Table:
        write(df, table_path, path_kind, **options)
        return check()

    def check() -> pa.Table:
        got, info = iceberg.read(tmp_path, table_path)
        assert info["snapshot_id"] == latest_snapshot_id(table_path)
        assert [f[1] for f in info["schema"]] == KEYED_COLUMNS  # no key-value column of the files
        assert _sorted(got, KEYED_COLUMNS) == iceberg.highest_level_rows(table_path, KEYED_COLUMNS)
        assert len(set(zip(got.column("id").to_pylist(), got.column("day").to_pylist()))) == got.num_rows
        return got

    first = step(changes(spark, [(i, f"a{i}", "+I") for i in range(8)]), **{
        "primary-key": "id,day", "partition": "day", "rowkind.field": "op", **KEYED[kind], **ICEBERG})
    # One update and delete later: still only what a merge reaching the highest level wrote.
    second = step(changes(spark, [(2, "b2", "+U"), (3, "b3", "+U"), (6, "a6", "-D")]))
    if kind == "dv":
        # Merged on write: the first write went to the highest level as it was (an empty bucket);
        # the update stays below it, so Iceberg readers see the rows as first written.
        assert _sorted(second, KEYED_COLUMNS) == _sorted(first, KEYED_COLUMNS) != []
        # lakesink.compact applies the deletion vectors: the same rows as Paimon's readers.
        lakesink.compact(spark, table_path, progress=False)
        assert _sorted(check(), KEYED_COLUMNS) == _sorted(read_table(table_path), KEYED_COLUMNS) != []
        # A merge that takes every run of each bucket (Paimon's size ratio: a run larger than the rest).
        step(changes(spark, [(i, f"c{i}", "+U") for i in range(1, 60)]))
    else:
        assert second.num_rows == first.num_rows == 0  # nothing compacted yet: level 0 only
        lakesink.compact(spark, table_path, progress=False)
    compacted = check()
    assert _sorted(compacted, KEYED_COLUMNS) == _sorted(read_table(table_path), KEYED_COLUMNS) != []

    # A change after the full compaction: Paimon reads it at once, Iceberg readers after the next one.
    third = step(changes(spark, [(0, "d0", "+U"), (1, "x", "-D")]))
    if kind != "postpone":
        assert _sorted(read_table(table_path), KEYED_COLUMNS) != _sorted(compacted, KEYED_COLUMNS)
    if kind != "dv":
        assert _sorted(third, KEYED_COLUMNS) == _sorted(compacted, KEYED_COLUMNS)


def test_keyed_tables_iceberg_metadata_cannot_follow_are_refused_by_name(spark, table_path):
    # Cross-partition: a key moving between partitions would be in both partitions' highest levels.
    with pytest.raises(UnsupportedTableError, match="cross-partition"):
        lakesink.write(changes(spark, [(1, "a", "+I")]), table_path, primary_key=["id"], partition_by=["day"],
                       options=ICEBERG)
    # Iceberg format version 3 (row lineage; Paimon's deletion vectors as Iceberg's): not written.
    with pytest.raises(UnsupportedOptionError, match="metadata.iceberg.format-version=3"):
        lakesink.write(changes(spark, [(1, "a", "+I")]), table_path, primary_key=["id"],
                       options={"bucket": "2", "metadata.iceberg.format-version": "3", **ICEBERG})
    # Full compactions by time: lakesink never compacts by time, so Iceberg readers would wait for one.
    with pytest.raises(UnsupportedOptionError, match="compaction.optimization-interval=1h.*full-compaction"):
        lakesink.write(changes(spark, [(1, "a", "+I")]), table_path, primary_key=["id"],
                       options={"bucket": "2", "compaction.optimization-interval": "1h", **ICEBERG})
    assert not os.path.exists(os.path.join(table_path, "schema"))


@pytest.mark.parametrize("kind", ["hive-catalog", "rest-catalog"])
def test_catalog_storage_of_iceberg_metadata_is_refused(spark, table_path, kind):
    with pytest.raises(UnsupportedOptionError, match=f"metadata.iceberg.storage={kind}"):
        lakesink.write(rows(spark, 0, 3), table_path, options={"metadata.iceberg.storage": kind})
    assert not os.path.exists(os.path.join(table_path, "schema"))


HADOOP = {"metadata.iceberg.storage": "hadoop-catalog"}


def same_rows_in_catalog(tmp_path, iceberg, path: str, columns=("id", "name", "day", "x")) -> dict:
    """pyiceberg's rows, read as a Hadoop catalog's table from `<warehouse>/iceberg/<db>/<table>` (its
    `metadata/version-hint.text` names the version), equal pypaimon's; returns pyiceberg's account."""
    warehouse, database, name = path.rsplit("/", 2)
    iceberg_table = f"{warehouse}/iceberg/{database[:-len('.db')]}/{name}"
    got, info = iceberg.read(tmp_path, path, metadata=iceberg_table)
    assert _sorted(got, list(columns)) == _sorted(read_table(path), list(columns))
    assert info["snapshot_id"] == latest_snapshot_id(path)
    assert not os.path.exists(os.path.join(path, "metadata"))  # nothing in the table's own directory
    return info


def test_hadoop_catalog_metadata_lives_in_the_warehouse_through_append_overwrite_and_compaction(
        spark, tmp_path, table_path, iceberg):
    lakesink.write(rows(spark, 0, 5), table_path, partition_by=["day"], options=HADOOP)
    first = same_rows_in_catalog(tmp_path, iceberg, table_path)
    assert first["partition_spec"] == [["day", "identity", 2]]
    lakesink.write(rows(spark, 5, 3, day="2024-01-02"), table_path)
    assert same_rows_in_catalog(tmp_path, iceberg, table_path)["summary"]["total-records"] == "8"
    lakesink.write(rows(spark, 100, 2), table_path, mode="overwrite", options={"partitionOverwriteMode": "dynamic"})
    assert same_rows_in_catalog(tmp_path, iceberg, table_path)["operation"] == "overwrite"
    lakesink.write(rows(spark, 200, 2, day="2024-01-02"), table_path)
    lakesink.compact(spark, table_path, progress=False)
    compacted = same_rows_in_catalog(tmp_path, iceberg, table_path)
    assert compacted["operation"] == "replace" and compacted["table_uuid"] == first["table_uuid"]
    assert sorted(read_table(table_path).column("id").to_pylist()) == [5, 6, 7, 100, 101, 200, 201]


def test_hadoop_catalog_metadata_of_a_table_outside_a_warehouse_is_refused(spark, tmp_path):
    path = str(tmp_path / "loose" / "t")  # no <db>.db parent: no warehouse to put it in
    with pytest.raises(UnsupportedTableError, match=r"<warehouse>/<db>\.db/<table>"):
        lakesink.write(rows(spark, 0, 3), path, options=HADOOP)
    assert not os.path.exists(os.path.join(path, "schema"))
    # Metadata in the table's own directory instead: Paimon's storage-location says so.
    lakesink.write(rows(spark, 0, 3), path,
                   options={**HADOOP, "metadata.iceberg.storage-location": "table-location"})
    assert os.path.exists(os.path.join(path, "metadata", "version-hint.text"))
    assert not os.path.exists(str(tmp_path / "iceberg"))


@pytest.mark.full
def test_hadoop_catalog_metadata_of_a_keyed_table_on_the_native_path(spark, tmp_path, warehouse, iceberg):
    path = str(warehouse / "shop.db" / "users")
    df = rows(spark, 0, 6)
    df.write.format("paimon").mode("append").option("primary-key", "id").option("bucket", "2") \
        .options(**HADOOP).save(path)
    rows(spark, 3, 6).write.format("paimon").mode("append").save(path)
    lakesink.compact(spark, path, progress=False)  # the highest level: every key once, as Paimon reads
    same_rows_in_catalog(tmp_path, iceberg, path)
    assert os.path.exists(str(warehouse / "iceberg" / "shop" / "users" / "metadata" / "version-hint.text"))


@pytest.mark.full
def test_a_table_created_again_starts_its_catalog_metadata_afresh(spark, tmp_path, table_path, iceberg):
    import shutil

    for start in (0, 3, 6):
        lakesink.write(rows(spark, start, 3), table_path, options=HADOOP)
    old = same_rows_in_catalog(tmp_path, iceberg, table_path)
    shutil.rmtree(table_path)  # dropped: its catalog metadata stays behind, as with Paimon
    lakesink.write(rows(spark, 50, 2), table_path, options=HADOOP)
    new = same_rows_in_catalog(tmp_path, iceberg, table_path)
    assert new["snapshot_id"] == 1 and new["table_uuid"] != old["table_uuid"]
    directory = os.path.join(os.path.dirname(os.path.dirname(table_path)), "iceberg", "db", "t", "metadata")
    assert sorted(n for n in os.listdir(directory) if n.endswith(".metadata.json")) == ["v1.metadata.json"]


def test_columns_iceberg_metadata_cannot_describe_are_refused_before_anything_is_written(spark, table_path):
    df = spark.createDataFrame([(1, [1, 2])], "id long, tags array<int>")
    with pytest.raises(UnsupportedTableError, match="'tags'"):
        lakesink.write(df, table_path, options=ICEBERG)
    assert not os.path.exists(os.path.join(table_path, "snapshot"))


def test_column_types_and_a_struct_read_back_by_pyiceberg(spark, tmp_path, table_path, iceberg):
    df = spark.sql("""
        SELECT CAST(id AS TINYINT) AS b, CAST(id AS SMALLINT) AS s, CAST(id AS INT) AS i, id AS l,
               CAST(id AS FLOAT) / 4 AS f, CAST(id AS DOUBLE) / 8 AS d, id % 2 = 0 AS flag,
               CAST(id AS DECIMAL(10, 2)) / 3 AS dec, CAST(id * 1000000000000 AS DECIMAL(28, 3)) AS big,
               DATE_ADD(DATE'2024-02-28', CAST(id AS INT)) AS day,
               TIMESTAMP'2024-01-01 10:00:00.123456' + MAKE_INTERVAL(0, 0, 0, 0, 0, 0, id) AS ts,
               TIMESTAMP_NTZ'2024-01-01 10:00:00.5' + MAKE_INTERVAL(0, 0, 0, 0, 0, 0, id) AS ntz,
               CAST(CONCAT('bin', id) AS BINARY) AS raw, CONCAT('s', id) AS str,
               NAMED_STRUCT('x', id, 'y', CONCAT('y', id)) AS nested,
               IF(id = 2, NULL, id) AS maybe
        FROM range(5)""")
    lakesink.write(df, table_path, partition_by=["day"], options=ICEBERG)
    got, info = iceberg.read(tmp_path, table_path)
    want = read_table(table_path)
    assert info["snapshot_id"] == latest_snapshot_id(table_path)
    types = {name: kind for _, name, kind in info["schema"]}
    assert types["b"] == "int" and types["l"] == "long" and types["dec"].startswith("decimal(")
    assert types["ts"] == "timestamptz" and types["ntz"] == "timestamp" and types["day"] == "date"
    assert types["nested"].startswith("struct<")
    for name in want.column_names:
        mine = [row for _, row in sorted(zip(want.column("l").to_pylist(), want.column(name).to_pylist()))]
        theirs = [row for _, row in sorted(zip(got.column("l").to_pylist(), got.column(name).to_pylist()))]
        if name == "ts":  # pyiceberg reads timestamptz as UTC-aware; lakesink as the instant, naive or aware
            mine = [v.replace(tzinfo=None) if v.tzinfo is None else v.astimezone().replace(tzinfo=None) for v in mine]
            theirs = [v.astimezone().replace(tzinfo=None) for v in theirs]
        assert mine == theirs, (name, mine, theirs)


def test_a_failed_refresh_never_fails_the_commit_and_the_next_one_repairs_it(spark, tmp_path, table_path, iceberg,
                                                                            monkeypatch):
    import lakesink.paimon.iceberg as iceberg_metadata

    lakesink.write(rows(spark, 0, 3), table_path, options=ICEBERG)

    def broken(table):
        raise OSError("the metadata store is away")

    monkeypatch.setattr(iceberg_metadata, "refresh", broken)
    report = lakesink.write(rows(spark, 3, 3), table_path)
    assert report.snapshot_id == latest_snapshot_id(table_path)
    stale, info = iceberg.read(tmp_path, table_path)
    assert len(stale) == 3 and info["snapshot_id"] == report.snapshot_id - 1
    monkeypatch.undo()
    lakesink.write(rows(spark, 6, 3), table_path)
    assert same_rows(tmp_path, iceberg, table_path)["summary"]["total-records"] == "9"


def test_a_row_level_delete_and_an_added_column(spark, tmp_path, table_path, iceberg):
    lakesink.write(rows(spark, 0, 4), table_path, partition_by=["day"], options=ICEBERG)
    lakesink.write(rows(spark, 4, 4, day="2024-01-02"), table_path)
    lakesink.delete(spark, table_path, where="id = 5")
    assert same_rows(tmp_path, iceberg, table_path)["operation"] == "overwrite"

    wider = rows(spark, 8, 2)
    lakesink.write(wider.withColumn("extra", wider.id * 10), table_path, options={"write.merge-schema": "true"})
    got, info = iceberg.read(tmp_path, table_path)
    assert [f[1] for f in info["schema"]] == ["id", "name", "day", "x", "extra"]
    assert _sorted(got, ["id", "name", "extra"]) == _sorted(read_table(table_path), ["id", "name", "extra"])
    assert info["summary"]["total-records"] == "9" and info["snapshot_id"] == latest_snapshot_id(table_path)


def test_a_rollback_and_expired_snapshots(spark, tmp_path, table_path, iceberg):
    from lakesink.paimon import maintenance

    # Expiry only when maintenance runs below (the commits start none), then down to 2 snapshots.
    quiet = {"maintenance.enabled": "false"}
    lakesink.write(rows(spark, 0, 2), table_path,
                   options={**ICEBERG, **quiet, "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "2"})
    for start in (2, 4):
        lakesink.write(rows(spark, start, 2), table_path, options=quiet)
    maintenance.rollback(table_path, 2)
    assert same_rows(tmp_path, iceberg, table_path)["snapshot_id"] == 2
    metadata_dir = os.path.join(table_path, "metadata")
    assert not os.path.exists(os.path.join(metadata_dir, "v3.metadata.json"))

    # Expired snapshots take their Iceberg versions (and manifests) with them.
    lakesink.write(rows(spark, 10, 2), table_path, options=quiet)
    assert sorted(n for n in os.listdir(metadata_dir) if n.endswith(".json")) == \
        ["v1.metadata.json", "v2.metadata.json", "v3.metadata.json"]
    out = maintenance.maintain(table_path, limit=None)
    assert out["snapshots_expired"] == 1 and out["iceberg_snapshot"] == latest_snapshot_id(table_path) == 3
    assert sorted(n for n in os.listdir(metadata_dir) if n.endswith(".json")) == \
        ["v2.metadata.json", "v3.metadata.json"]
    assert len([n for n in os.listdir(metadata_dir) if n.endswith(".avro")]) == 4  # a manifest and a list each
    assert same_rows(tmp_path, iceberg, table_path)["summary"]["total-records"] == "6"


def test_a_fixed_bucket_append_table(spark, tmp_path, table_path, iceberg):
    lakesink.write(rows(spark, 0, 6), table_path, options={"bucket": "2", "bucket-key": "id", **ICEBERG})
    lakesink.write(rows(spark, 6, 6), table_path)
    info = same_rows(tmp_path, iceberg, table_path)
    assert info["summary"]["total-records"] == "12" and int(info["summary"]["total-data-files"]) >= 2


_FILTERS = [
    ("dec > '0.500000'", lambda r: r["dec"] > 0.5), ("big >= 2000000000000", lambda r: r["big"] >= 2_000_000_000_000),
    ("b = 3", lambda r: r["b"] == 3), ("str = 's2'", lambda r: r["str"] == "s2"),
    ("flag = true", lambda r: r["flag"]), ("maybe IS NULL", lambda r: r["maybe"] is None),
    ("day >= '2024-03-01'", lambda r: r["day"].isoformat() >= "2024-03-01")]


# A decimal bound and a null count by default; the other column kinds' bounds in ./dev full.
@pytest.mark.parametrize("row_filter, keep", [
    pytest.param(f, k, id=f, marks=() if f in ("dec > '0.500000'", "maybe IS NULL") else pytest.mark.full)
    for f, k in _FILTERS])
def test_filtered_scans_lose_no_row(spark, tmp_path, table_path, iceberg, row_filter, keep):
    """pyiceberg skips files by the metrics lakesink writes; each file here holds one row."""
    df = spark.sql("""
        SELECT CAST(id AS TINYINT) AS b, CAST(id AS DECIMAL(10, 2)) / 3 AS dec,
               CAST(id * 1000000000000 AS DECIMAL(28, 3)) AS big, id % 2 = 0 AS flag, CONCAT('s', id) AS str,
               IF(id = 2, NULL, id) AS maybe, DATE_ADD(DATE'2024-02-28', CAST(id AS INT)) AS day
        FROM range(5)""").repartition(5)
    lakesink.write(df, table_path, options=ICEBERG)
    got, info = iceberg.read(tmp_path, table_path, row_filter=row_filter)
    want = [r for r in read_table(table_path).to_pylist() if keep(r)]
    assert sorted(got.column("b").to_pylist()) == sorted(r["b"] for r in want)
    assert info["files"] <= 5


@pytest.mark.parametrize("via", ["fast", "native"])
def test_a_table_created_as_select_in_staging_names_its_final_paths(spark, tmp_path, table_path, iceberg, via):
    """CREATE TABLE AS writes the table beside its place and renames it in: its Iceberg metadata is
    rebuilt there, so no path names the staging directory."""
    lakesink.create_table_as(rows(spark, 0, 4), table_path, partition_by=["day"], options=ICEBERG, via=via)
    info = same_rows(tmp_path, iceberg, table_path)
    assert info["summary"]["total-records"] == "4"
    metadata_dir = os.path.join(table_path, "metadata")
    for name in os.listdir(metadata_dir):
        assert b"lakesink-staging" not in open(os.path.join(metadata_dir, name), "rb").read(), name
    if via == "fast":  # REPLACE TABLE AS swaps the whole directory in: the new table's metadata only
        lakesink.replace_table_as(rows(spark, 50, 2), table_path, options=ICEBERG)
        info = same_rows(tmp_path, iceberg, table_path)
        assert info["summary"]["total-records"] == "2" and info["partition_spec"] == []
        for name in os.listdir(metadata_dir):
            assert b"lakesink-staging" not in open(os.path.join(metadata_dir, name), "rb").read(), name


def test_a_write_cannot_switch_iceberg_metadata_on_or_off(spark, table_path):
    from lakesink.errors import ConfigurationError

    lakesink.write(rows(spark, 0, 2), table_path)
    before = Unchanged(table_path)
    with pytest.raises(ConfigurationError, match="metadata.iceberg.storage='table-location' contradicts"):
        lakesink.write(rows(spark, 2, 2), table_path, options=ICEBERG)
    before.check()
    assert not os.path.exists(os.path.join(table_path, "metadata"))


@pytest.mark.full
def test_a_table_created_as_select_gets_its_catalog_metadata_once_in_place(spark, tmp_path, table_path, iceberg):
    lakesink.create_table_as(rows(spark, 0, 4), table_path, partition_by=["day"], options=HADOOP)
    assert same_rows_in_catalog(tmp_path, iceberg, table_path)["summary"]["total-records"] == "4"
    lakesink.replace_table_as(rows(spark, 50, 2), table_path, options=HADOOP)
    info = same_rows_in_catalog(tmp_path, iceberg, table_path)
    assert info["summary"]["total-records"] == "2" and info["partition_spec"] == []
    catalog = os.path.join(os.path.dirname(os.path.dirname(table_path)), "iceberg", "db")
    assert os.listdir(catalog) == ["t"]  # no directory named after a staging table
    for name in os.listdir(os.path.join(catalog, "t", "metadata")):
        assert b"lakesink-staging" not in open(os.path.join(catalog, "t", "metadata", name), "rb").read(), name
