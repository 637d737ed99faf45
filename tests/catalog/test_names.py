"""The one rule from a name or path to a table, catalog options and bad input (no Spark)."""

from __future__ import annotations

import os
import shutil

import pytest

import lakesink
from lakesink.errors import (AmbiguousTableNameError, CatalogInconsistencyError, ConfigurationError,
                             DatabaseConnectionError, DatabaseNotFoundError, InvalidOptionError,
                             TableNotFoundError, UnknownOptionError)
from tests.catalog.conftest import commit_rows, rows_of


def test_a_string_with_a_slash_is_a_path_everything_else_a_name(options, tmp_path):
    cat = lakesink.catalog(options)
    cat.create_database("shop")
    wh = options["warehouse"]
    assert lakesink.resolve_table("shop.orders", options).path == f"{wh}/shop.db/orders"
    assert lakesink.resolve_table("paimon.shop.orders", options).path == f"{wh}/shop.db/orders"
    assert lakesink.resolve_table("`shop`.`orders`", options).path == f"{wh}/shop.db/orders"
    assert lakesink.resolve_table("orders", options).path == f"{wh}/default.db/orders"
    resolved = lakesink.resolve_table(str(tmp_path / "x.y"), options)
    assert (resolved.path, resolved.name) == (str(tmp_path / "x.y"), None)  # a path never touches the catalog
    assert lakesink.resolve_table("./shop.orders").path == os.path.abspath("shop.orders")


def test_a_name_without_a_catalog_or_of_another_catalog_is_refused(options):
    with pytest.raises(ConfigurationError, match=r"no catalog.*'\./shop\.orders'"):
        lakesink.resolve_table("shop.orders")
    with pytest.raises(ConfigurationError, match="names catalog 'prod'"):
        lakesink.resolve_table("prod.shop.orders", options)
    with pytest.raises(ConfigurationError, match="not a table name"):
        lakesink.resolve_table("a.b.c.d", options)


def test_a_name_that_is_also_a_local_table_is_ambiguous(options, tmp_path, monkeypatch):
    lakesink.catalog(options).create_database("shop")
    monkeypatch.chdir(tmp_path)
    commit_rows(str(tmp_path / "shop.orders"), [1])
    with pytest.raises(AmbiguousTableNameError, match=r"both a table name.*'\./shop\.orders'"):
        lakesink.resolve_table("shop.orders", options)
    assert lakesink.resolve_table("./shop.orders", options).path == str(tmp_path / "shop.orders")


def test_unknown_catalog_option_names_it_and_the_valid_ones():
    with pytest.raises(UnknownOptionError) as err:
        lakesink.catalog({"wearhouse": "/data/wh"})
    assert "'wearhouse'" in str(err.value) and "Did you mean 'warehouse'" in str(err.value)
    assert "metastore, warehouse, uri" in str(err.value)
    with pytest.raises(ConfigurationError, match="belong to a JDBC catalog.*'metastore': 'jdbc'"):
        lakesink.catalog({"warehouse": "/data/wh", "uri": "jdbc:sqlite:/data/wh/c.db"})
    with pytest.raises(InvalidOptionError, match="REST catalog is not supported"):
        lakesink.catalog({"metastore": "rest", "warehouse": "/data/wh"})
    with pytest.raises(ConfigurationError, match="'warehouse' is required"):
        lakesink.catalog({"metastore": "jdbc", "uri": "jdbc:sqlite:/tmp/c.db"})


@pytest.mark.parametrize("uri", ["jdbc:postgresql://127.0.0.1:1/test", "jdbc:sqlite:/etc/passwd/catalog.db"])
def test_an_unreachable_catalog_database_is_a_clear_error(uri, tmp_path):
    options = {"metastore": "jdbc", "uri": uri, "warehouse": str(tmp_path), "jdbc.password": "s3cret"}
    with pytest.raises(DatabaseConnectionError, match="Cannot reach the catalog database") as err:
        lakesink.catalog(options)
    assert uri in str(err.value) and "s3cret" not in str(err.value)
    assert os.listdir(tmp_path) == []  # nothing changed


def test_missing_tables_and_databases(options):
    cat = lakesink.catalog(options)
    with pytest.raises(DatabaseNotFoundError, match="create_database\\('shop'\\)"):
        cat.resolve("shop.orders", "write")
    cat.create_database("shop")
    assert cat.resolve("shop.orders", "write").exists is False
    with pytest.raises(TableNotFoundError, match="shop.orders does not exist"):
        cat.resolve("shop.orders", "read")
    assert not os.path.exists(cat.location("shop.orders"))


def test_list_create_and_drop(options):
    cat = lakesink.catalog(options)
    cat.create_database("shop")
    cat.create_database("shop")  # if_not_exists by default
    commit_rows(cat.location("shop.orders"), [1, 2])
    if cat.is_jdbc:
        cat.register_table("shop.orders")  # made on storage by hand: entered into the catalog
    assert cat.list_databases() == ["shop"] and cat.list_tables("shop") == ["orders"]
    assert cat.table_exists("shop.orders") and not cat.table_exists("shop.other")
    assert rows_of(cat.open("shop.orders").table_path) == [1, 2]
    assert cat.drop_table("shop.orders") is True
    assert cat.list_tables("shop") == [] and not os.path.exists(cat.location("shop.orders"))
    assert cat.drop_table("shop.orders", if_exists=True) is False
    with pytest.raises(TableNotFoundError):
        cat.drop_table("shop.orders")
    cat.drop_database("shop")
    assert cat.list_databases() == []


def test_a_jdbc_entry_without_files_is_an_error_until_dropped(jdbc_options):
    cat = lakesink.catalog(jdbc_options)
    cat.create_database("shop")
    commit_rows(cat.location("shop.orders"), [1])
    cat.register_table("shop.orders")
    shutil.rmtree(cat.location("shop.orders"))
    for purpose in ("read", "write", "create"):
        with pytest.raises(CatalogInconsistencyError, match="in the jdbc catalog .* but there is no table"):
            cat.resolve("shop.orders", purpose)
    assert cat.list_tables("shop") == ["orders"]  # nothing changed
    cat.drop_table("shop.orders")
    assert cat.list_tables("shop") == [] and cat.resolve("shop.orders", "write").exists is False


def test_a_table_on_storage_without_a_jdbc_entry_is_an_error_until_registered(jdbc_options):
    cat = lakesink.catalog(jdbc_options)
    cat.create_database("shop")
    commit_rows(cat.location("shop.orders"), [1])
    with pytest.raises(CatalogInconsistencyError, match="no entry for shop.orders.*register_table"):
        cat.resolve("shop.orders", "write")
    assert cat.list_tables("shop") == []
    cat.register_table("shop.orders")
    assert cat.resolve("shop.orders", "read").exists


def test_write_by_name_creates_and_registers_once_even_when_two_writers_race(jdbc_options):
    """Two planned writes to one new name: both create (one uses the other's table), one row."""
    import pyarrow as pa

    from lakesink.options import WriteOptions
    from lakesink.paimon.write.batch import prepare_target

    cat = lakesink.catalog(jdbc_options)
    cat.create_database("shop")
    schema = pa.schema([("id", pa.int64())])
    for _ in range(2):  # both resolved the name as new before either created it
        resolved = cat.resolve("shop.orders", "write")
        opts = WriteOptions.parse({})
        opts.catalog_entry = resolved.entry
        prepare_target(resolved.path, schema, opts, "test")
    assert cat.list_tables("shop") == ["orders"] and cat.resolve("shop.orders").exists


def test_a_dropped_catalog_connection_is_opened_again(jdbc_options):
    cat = lakesink.catalog(jdbc_options)
    cat.create_database("shop")
    conn = cat._paimon.connection.connection
    if jdbc_options["uri"].startswith("jdbc:postgresql:"):
        import psycopg

        from tests.jdbc.conftest import POSTGRES_URL
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    else:
        conn.close()
    assert cat.list_databases() == ["shop"]
