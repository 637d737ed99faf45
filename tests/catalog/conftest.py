"""Catalogs for the tests: filesystem, JDBC on SQLite (always), JDBC on PostgreSQL (when a server answers).

PostgreSQL: LAKESINK_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test). Each
test gets a `catalog-key` of its own in Paimon's catalog tables, and its rows are deleted
afterwards. Without a server the PostgreSQL cases are skipped with the reason shown (pytest -rs);
with CI=true they fail.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.jdbc.conftest import POSTGRES_URL, postgres_reason
from tests.requirements import unavailable

KINDS = ["filesystem", "sqlite", "postgres"]


def catalog_options(kind: str, tmp_path) -> dict:
    warehouse = str(tmp_path / "wh")
    os.makedirs(warehouse, exist_ok=True)
    if kind == "filesystem":
        return {"warehouse": warehouse}
    if kind == "sqlite":
        return {"metastore": "jdbc", "uri": f"jdbc:sqlite:{warehouse}/catalog.db", "warehouse": warehouse}
    reason = postgres_reason()
    if reason:
        unavailable(reason)
    url = urlparse(POSTGRES_URL)
    options = {"metastore": "jdbc", "uri": f"jdbc:postgresql://{url.hostname}:{url.port or 5432}{url.path}",
               "warehouse": warehouse, "catalog-key": f"test-{uuid.uuid4().hex[:12]}"}
    if url.username:
        options["jdbc.user"] = url.username
    if url.password:
        options["jdbc.password"] = url.password
    return options


def s3_catalog_options(kind: str, tmp_path, server, bucket: str) -> dict:
    """A JDBC catalog (`kind`) whose warehouse is a fresh prefix of `bucket` on the test S3 server."""
    return {**catalog_options(kind, tmp_path), **server.fs_options(),
            "warehouse": f"s3://{bucket}/wh-{uuid.uuid4().hex[:8]}"}


def forget_postgres_catalog(options: dict) -> None:
    """Delete a test's rows from Paimon's catalog tables in the shared PostgreSQL database."""
    if not options.get("uri", "").startswith("jdbc:postgresql:"):
        return
    import psycopg
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        for table in ("paimon_tables", "paimon_database_properties", "paimon_table_properties",
                      "lakesink_staged_tables"):
            try:
                conn.execute(f"DELETE FROM {table} WHERE catalog_key = %s", (options["catalog-key"],))
            except psycopg.errors.UndefinedTable:
                pass  # lakesink's reservations: created on first CREATE TABLE AS on an object store


@pytest.fixture(params=KINDS)
def options(request, tmp_path):
    opts = catalog_options(request.param, tmp_path)
    yield opts
    forget_postgres_catalog(opts)


@pytest.fixture(params=["sqlite", "postgres"])
def jdbc_options(request, tmp_path):
    opts = catalog_options(request.param, tmp_path)
    yield opts
    forget_postgres_catalog(opts)


@contextlib.contextmanager
def session_catalog(spark, options: dict):
    """The shared Spark session with `options` as its catalog, cleared afterwards (nothing leaks)."""
    import lakesink
    lakesink.register(spark, catalog=options)
    try:
        yield lakesink.catalog(spark)
    finally:
        lakesink.register(spark, catalog={})


def rows_of(path: str) -> list[int]:
    """The table's `id` column, read back with pypaimon directly."""
    from tests.helpers import read_table
    return sorted(read_table(path).column("id").to_pylist())


def commit_rows(path: str, ids, user: str = "test") -> None:
    """Create the table at `path` (if needed) and commit one snapshot of `ids`, without Spark."""
    from lakesink.paimon import PaimonTarget, TableLayout, TableSpec, describe_parquet
    from lakesink.protocol import Committer

    data = pa.table({"id": pa.array(ids, pa.int64())})
    target = PaimonTarget(path, create=TableSpec(data.schema, [], [], {"bucket": "-1"}))
    target.maintenance = False
    table = target.table_or_create()
    staged_dir = os.path.join(path, "_lakesink", "staging", uuid.uuid4().hex)
    os.makedirs(staged_dir)
    pq.write_table(data, os.path.join(staged_dir, "f.parquet"))
    files = [describe_parquet(os.path.join(staged_dir, "f.parquet"), TableLayout.of(table), table.file_io)]
    Committer(target, user).commit(1, files)


def write_rows(path: str, ids, fs_options: dict | None = None) -> None:
    """Create the table at `path` if needed and commit `ids` with pypaimon's own writer (any storage)."""
    from lakesink.paimon.table import tables

    data = pa.table({"id": pa.array(ids, pa.int64())})
    table = tables.open_table(path, fs_options) or tables.create_table(path, data.schema, [], [], {"bucket": "-1"},
                                                                       fs_options)
    builder = table.new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    write.write_arrow(data)
    commit.commit(write.prepare_commit())
    write.close()
    commit.close()


@pytest.fixture(params=["sqlite"])
def cat(request, spark, tmp_path):
    """The shared session with a catalog (SQLite unless parametrized) holding database `shop`."""
    options = catalog_options(request.param, tmp_path)
    with session_catalog(spark, options) as catalog:
        catalog.create_database("shop")
        yield catalog
    forget_postgres_catalog(options)
