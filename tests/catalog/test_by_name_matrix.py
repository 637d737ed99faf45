"""A table by name in every catalog kind on every storage, without Spark: created and written
through lakesink's commit core as a write by name does (resolve, create + register, commit),
read back by name with pypaimon, and inspected by name with `lakesink.history` and the CLI
(the same answer as by path).

Cells: filesystem, JDBC on SQLite and JDBC on PostgreSQL catalogs, each with a local warehouse
and with a warehouse on the S3 test server. The Spark entry points' own wiring of names is in
test_spark_catalog.py (SQLite); what depends on the catalog kind and the storage is here.
"""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

import lakesink
from lakesink.cli import cli
from tests.catalog.conftest import catalog_options, forget_postgres_catalog
from tests.staged import commit, new_target, stage

pytestmark = pytest.mark.full  # every entry point by name in every catalog kind: ./dev full

BUCKET = "lakesink-by-name"
CELLS = [(kind, where) for where in ("local", "s3") for kind in ("filesystem", "sqlite", "postgres")]


@pytest.fixture(scope="module")
def s3_server():
    from tests.s3server import S3Server
    with S3Server() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(params=CELLS, ids=[f"{k}-{w}" for k, w in CELLS])
def cat(request, tmp_path):
    kind, where = request.param
    options = catalog_options(kind, tmp_path)
    if where == "s3":
        server = request.getfixturevalue("s3_server")
        options = {**options, **server.fs_options(), "warehouse": f"s3://{BUCKET}/wh-{uuid.uuid4().hex[:8]}"}
    catalog = lakesink.catalog(options)
    catalog.create_database("shop")
    yield catalog
    forget_postgres_catalog(options)


def _write_by_name(cat, name, ids, identifier):
    resolved = cat.resolve(name, "write")
    target = new_target(resolved.path, resolved.fs_options)
    if resolved.entry is not None:  # a new name: created at its location and entered into the catalog
        resolved.entry.create(target)
    commit(target, "by-name", identifier, stage(target, ids, "a", "by-name"))
    return resolved


def _cli(*args):
    result = CliRunner().invoke(cli, ["-o", "json", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_table_by_name_is_created_written_read_and_inspected_in_every_catalog_and_storage(cat):
    first = _write_by_name(cat, "shop.orders", [1, 2], 1)
    assert first.exists is False and first.path == cat.location("shop.orders")
    second = _write_by_name(cat, "shop.orders", [3], 2)
    assert second.exists is True and second.path == first.path
    assert cat.list_tables("shop") == ["orders"] and cat.table_exists("shop.orders")

    table = cat.open("shop.orders")  # by name, through the catalog's checks
    builder = table.new_read_builder()
    rows = builder.new_read().to_arrow(builder.new_scan().plan().splits())
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]
    assert lakesink.history("shop.orders", catalog=cat.config.options).num_rows == 2

    catalog = [a for k, v in cat.config.options.items() for a in ("--catalog", f"{k}={v}")]
    storage = [a for k, v in cat.config.fs_options.items() for a in ("--option", f"{k}={v}")]
    for command in ("history", "files"):
        by_name = _cli(command, "shop.orders", *catalog)
        assert by_name == _cli(command, first.path, *storage) and by_name
    assert _cli("clean-staging", *catalog)["entries"] == []  # nothing dead in the catalog


def test_create_table_as_through_a_filesystem_catalog_on_s3_is_refused_before_anything_is_written(s3_server):
    """Neither a rename nor a catalog database could publish it (docs/catalogs.md, not done yet)."""
    from lakesink.errors import ConfigurationError
    from lakesink.paimon.catalog.ctas import stage_table

    warehouse = f"s3://{BUCKET}/wh-{uuid.uuid4().hex[:8]}"
    cat = lakesink.catalog({**s3_server.fs_options(), "warehouse": warehouse})
    cat.create_database("shop")
    with pytest.raises(ConfigurationError, match="ctas.atomicity-enabled=false"):
        stage_table(cat.resolve("shop.daily", "create"), cat).begin()
    listed = s3_server.client().list_objects_v2(Bucket=BUCKET, Prefix=warehouse[len(f"s3://{BUCKET}/"):] + "/")
    assert not [o["Key"] for o in listed.get("Contents", []) if "/shop.db/daily" in o["Key"]]
    assert cat.list_tables("shop") == []
