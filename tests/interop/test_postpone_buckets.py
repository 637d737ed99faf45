"""Postpone-bucket primary-key tables (bucket=-2) written by lakesink and compacted by
`lakesink.compact`, read key for key by Apache Paimon's Java reader, pypaimon and `lakesink.read`.

The Java oracle (paimon-core 1.0-SNAPSHOT of 2024-09, tests/interop/oracle.py) predates postpone
buckets (Paimon 1.1): it has no postpone writer, compaction or scan, and refuses to open a table
with bucket=-2 ("The number of buckets needs to be greater than 0"). So it cannot read or compact
lakesink's postpone files. It reads the compacted tables with `bucket` set to the partitions'
bucket count in memory (`read_with`; files and schema untouched): the fixed-bucket table the real
buckets form, which is what Paimon 1.1+ readers of a postpone table read (real buckets only, each
partition's `totalBuckets` from its entries).
"""

from __future__ import annotations

import zipfile
from collections import Counter
from pathlib import Path

import pytest

import lakesink
from lakesink.paimon.commit.live_files import live_entries
from lakesink.paimon.files.keyhash import bucket_ids
from lakesink.paimon.table.tables import open_table
from tests.helpers import read_table
from tests.interop.oracle import JavaError

pytestmark = [pytest.mark.interop, pytest.mark.spark]

SCHEMA = "id long, dt string, v string, op string"


def _rows(ids, tag, kind="+I"):
    return [(i, f"d{i % 3}", f"{tag}{i}", kind) for i in ids]


def _read_every_way(spark, java_paimon, path, tmp_path):
    """{(id, dt): v} as Java Paimon, pypaimon and lakesink.read return it; a key read twice fails."""
    java = [((r["id"], r["dt"]), r["v"]) for r in java_paimon.read_with(path, tmp_path / "java", {"bucket": "3"})]
    py = [((r["id"], r["dt"]), r["v"]) for r in read_table(path).to_pylist()]
    lake = [((r.id, r.dt), r.v) for r in lakesink.read(spark, path).collect()]
    for name, rows in (("java", java), ("pypaimon", py), ("lakesink", lake)):
        twice = [k for k, n in Counter(k for k, _ in rows).items() if n > 1]
        assert not twice, f"{name} reads keys {twice[:5]} more than once"
    assert dict(java) == dict(py) == dict(lake)
    return dict(java)


def _oracle_knows_postpone(java_paimon) -> bool:
    jar = next(Path(p) for p in java_paimon.classpath.split(":") if p.endswith("paimon-python-java-bridge.jar"))
    with zipfile.ZipFile(jar) as archive:
        return any(n.startswith("org/apache/paimon/postpone/") for n in archive.namelist())


def test_java_paimon_reads_compacted_postpone_tables_key_for_key(spark, java_paimon, tmp_path):
    # If the oracle ever learns postpone buckets, it should also read (skip) and compact
    # lakesink's postpone files here.
    assert not _oracle_knows_postpone(java_paimon), "the Java oracle knows postpone buckets: extend this test"
    path = str(tmp_path / "wh" / "db.db" / "t")
    lakesink.write(spark.createDataFrame(_rows(range(60), "a"), SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={"bucket": "-2", "rowkind.field": "op",
                                                "postpone.default-bucket-num": "3"})
    (spark.createDataFrame(_rows(range(50, 80), "b", "+U"), SCHEMA).repartition(2).write.format("paimon")
     .mode("append").save(path))
    assert read_table(path).num_rows == 0  # Paimon's readers skip the postpone bucket
    with pytest.raises(JavaError, match="number of buckets needs to be greater than 0"):
        java_paimon.read(path, tmp_path / "java-1.0")  # this Paimon predates bucket=-2
    lakesink.compact(spark, path, progress=False)
    want = {(i, f"d{i % 3}"): ("b" if i >= 50 else "a") + str(i) for i in range(80)}
    assert _read_every_way(spark, java_paimon, path, tmp_path / "one") == want

    # Updates and deletes in the postpone bucket, merged into the existing buckets by compaction.
    changes = _rows(range(70, 90), "c", "+U") + _rows(range(0, 60, 7), "x", "-D")
    lakesink.write(spark.createDataFrame(changes, SCHEMA), path)
    # Nothing of it is visible yet. (Java 1.0 would read the postpone bucket too: not asked.)
    rows = read_table(path).to_pylist()
    assert {(r["id"], r["dt"]): r["v"] for r in rows} == want and len(rows) == len(want)
    lakesink.compact(spark, path, progress=False)
    want.update({(i, f"d{i % 3}"): f"c{i}" for i in range(70, 90)})
    for i in range(0, 60, 7):
        del want[(i, f"d{i % 3}")]
    assert _read_every_way(spark, java_paimon, path, tmp_path / "three") == want

    # Every key in the bucket Paimon's bucket function gives it; entries record 3 buckets.
    import pyarrow.parquet as pq
    table = open_table(path)
    for e in live_entries(table):
        assert e.total_buckets == 3 and 0 <= e.bucket < 3
        data = pq.ParquetFile(f"{path}/dt={e.partition.values[0]}/bucket-{e.bucket}/{e.file.file_name}").read()
        assert set(bucket_ids(data, ["id"], table.table_schema.fields, 3).tolist()) == {e.bucket}


def _pypaimon_write(path, rows, stream=True):
    """One commit of pypaimon's own writer: its postpone writer (stream: Avro files in
    bucket-postpone), or its postpone fixed-bucket batch writer (straight into the partition's
    real buckets, level 0; Paimon's postpone.batch-write-fixed-bucket)."""
    import pyarrow as pa
    from pypaimon.table.file_store_table import FileStoreTable

    table = FileStoreTable.from_path(path)
    builder = table.new_stream_write_builder() if stream else table.new_postpone_fixed_bucket_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    try:
        write.write_arrow(pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "dt": [r[1] for r in rows],
                                    "v": [r[2] for r in rows], "op": [r[3] for r in rows]}))
        if stream:
            commit.commit(write.prepare_commit(1), 1)
        else:
            commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()


# ./dev full: pypaimon's postpone files (the default run has Java read lakesink's compacted tables)
@pytest.mark.full
def test_lakesink_compacts_postpone_files_pypaimon_wrote(spark, java_paimon, tmp_path):
    """pypaimon's postpone writer (Avro files, sequence numbers from 0 per writer) and lakesink's
    writes interleaved; each later commit wins, whoever wrote it. The partition's bucket count
    is the one pypaimon's batch writer gave its real buckets."""
    path = str(tmp_path / "wh" / "db.db" / "t")
    lakesink.write(spark.createDataFrame(_rows(range(30), "a"), SCHEMA), path, primary_key=["id", "dt"],
                   partition_by=["dt"], options={"bucket": "-2", "postpone.default-bucket-num": "3"})
    lakesink.compact(spark, path, progress=False)
    _pypaimon_write(path, _rows(range(25, 35), "z"), stream=False)  # level 0 in real buckets, visible
    assert {e.bucket for e in live_entries(open_table(path))} <= {0, 1, 2}
    _pypaimon_write(path, _rows(range(20, 40), "b"))
    lakesink.write(spark.createDataFrame(_rows(range(35, 45), "c"), SCHEMA), path)
    _pypaimon_write(path, _rows(range(40, 50), "d"))
    postpone = [e.file.file_name for e in live_entries(open_table(path)) if e.bucket == -2]
    assert any(n.endswith(".avro") for n in postpone) and any(n.endswith(".parquet") for n in postpone)
    seen = {(r["id"], r["dt"]): r["v"] for r in read_table(path).to_pylist()}
    assert seen == {(i, f"d{i % 3}"): ("z" if i >= 25 else "a") + str(i) for i in range(35)}
    lakesink.compact(spark, path, progress=False)
    want = {(i, f"d{i % 3}"): ("d" if i >= 40 else "c" if i >= 35 else "b" if i >= 20 else "a") + str(i)
            for i in range(50)}
    assert _read_every_way(spark, java_paimon, path, tmp_path) == want
    assert {(e.bucket, e.total_buckets, e.file.level) for e in live_entries(open_table(path))} <= {
        (b, 3, 5) for b in range(3)}
