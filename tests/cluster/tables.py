"""Tables on the S3 server, as the tests check them: pypaimon's reads and the bucket's own listing."""

from __future__ import annotations

from tests.staged import read_back

from .scenarios import COLUMNS


def table_rows(path: str, options: dict | None = None) -> list[tuple]:
    """The table's rows as pypaimon reads them, sorted."""
    table = read_back(path, options)
    return sorted(zip(*(table.column(c).to_pylist() for c in COLUMNS)))


def bucket_and_key(path: str) -> tuple[str, str]:
    bucket, _, key = path.split("://", 1)[1].partition("/")
    return bucket, key


def listing(s3, path: str) -> list[dict]:
    """The S3 client's own listing of the table's prefix (`Key`, `Size`, ...)."""
    bucket, prefix = bucket_and_key(path)
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
    return sorted((o for page in pages for o in page.get("Contents", [])), key=lambda o: o["Key"])


def objects(s3, path: str) -> list[str]:
    """Every object under the table's prefix, as `s3://bucket/key`."""
    bucket, _ = bucket_and_key(path)
    return [f"s3://{bucket}/{o['Key']}" for o in listing(s3, path)]


def data_objects(s3, path: str) -> set[str]:
    return {o for o in objects(s3, path) if o.endswith(".parquet")}


def referenced_files(path: str, options: dict) -> set[str]:
    """`s3://` paths of the data files any retained snapshot references."""
    from pypaimon.table.file_store_table import FileStoreTable
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path

    table = FileStoreTable.from_path(path, options)
    out = set()
    for snap in table.snapshot_manager().list_snapshots():
        scan = table.copy({"scan.snapshot-id": str(snap.id)}).new_read_builder().new_scan()
        for split in scan.plan().splits():
            for f in split.files:
                found = str(canonical_data_file_path(table, tuple(split.partition.values), split.bucket,
                                                     f.file_name))
                out.add(found if "://" in found else f"s3://{found.lstrip('/')}")
    return out


def leftover_files(s3, path: str, options: dict) -> set[str]:
    """Data files in the bucket that no snapshot references (staging included): must be none."""
    return data_objects(s3, path) - referenced_files(path, options)
