"""Iceberg metadata of a table on an S3-compatible store (moto's server): written after each commit,
read back by pyiceberg from the store, expired versions removed there too."""

from __future__ import annotations

import pytest

from lakesink.paimon import maintenance
from tests import iceberg_oracle
from tests.s3server import ACCESS_KEY, REGION, SECRET_KEY, s3_bucket
from tests.staged import commit, new_target, read_back, stage

BUCKET = "lakesink-iceberg"
ICEBERG = {"metadata.iceberg.storage": "table-location"}


@pytest.fixture(scope="module")
def s3():
    with s3_bucket(BUCKET) as server:
        yield server


def test_iceberg_metadata_on_s3_reads_back_with_pyiceberg(s3, request, tmp_path):
    iceberg_oracle.require()
    path, options = f"s3://{BUCKET}/{request.node.name}/db.db/t", s3.fs_options()
    target = new_target(path, options)
    target.create.options.update({**ICEBERG, "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1"})
    commit(target, "w", 1, stage(target, [0, 1], "a", "w"))
    commit(target, "w", 2, stage(target, [2], "b", "w"))
    commit(target, "w", 3, stage(target, [3, 4], "a", "w"))
    prefix = f"{request.node.name}/db.db/t/metadata/"

    def names():
        listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
        return sorted(o["Key"][len(prefix):] for o in listed)

    assert [n for n in names() if n.endswith(".json")] == [f"v{i}.metadata.json" for i in (1, 2, 3)]
    hint = s3.client().get_object(Bucket=BUCKET, Key=prefix + "version-hint.text")["Body"].read()
    assert hint == b"3"
    properties = {"s3.endpoint": s3.endpoint, "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
                  "s3.region": REGION}
    rows, info = iceberg_oracle.read(tmp_path, path, metadata=f"{path}/metadata/v3.metadata.json",
                                     properties=properties)
    assert sorted(rows.column("id").to_pylist()) == sorted(read_back(path, options).column("id").to_pylist())
    assert info["snapshot_id"] == 3

    out = maintenance.maintain(path, limit=None, fs_options=options)
    assert out["iceberg_snapshot"] == 3
    assert [n for n in names() if n.endswith(".json")] == ["v3.metadata.json"]
    assert len([n for n in names() if n.endswith(".avro")]) == 2


def test_hadoop_catalog_metadata_on_s3_lives_in_the_warehouse_and_reads_back_with_pyiceberg(s3, request, tmp_path):
    iceberg_oracle.require()
    warehouse, options = f"s3://{BUCKET}/{request.node.name}", s3.fs_options()
    path = f"{warehouse}/db.db/t"
    target = new_target(path, options)
    target.create.options.update({"metadata.iceberg.storage": "hadoop-catalog"})
    commit(target, "w", 1, stage(target, [0, 1], "a", "w"))
    commit(target, "w", 2, stage(target, [2, 3], "b", "w"))
    catalog_dir = f"{request.node.name}/iceberg/db/t/metadata/"
    hint = s3.client().get_object(Bucket=BUCKET, Key=catalog_dir + "version-hint.text")["Body"].read()
    assert hint == b"2"
    in_table = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=f"{request.node.name}/db.db/t/metadata/")
    assert in_table.get("KeyCount", 0) == 0  # nothing in the table's own directory
    properties = {"s3.endpoint": s3.endpoint, "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
                  "s3.region": REGION}
    rows, info = iceberg_oracle.read(tmp_path, path, metadata=f"{warehouse}/iceberg/db/t", properties=properties)
    assert sorted(rows.column("id").to_pylist()) == sorted(read_back(path, options).column("id").to_pylist()) \
        == [0, 1, 2, 3]
    assert info["snapshot_id"] == 2
