"""`lakesink.sql`'s rewrite: which parts of a statement name catalog tables (no Spark)."""

from __future__ import annotations

import pytest

import lakesink
from lakesink.paimon.catalog.names import TableName
from lakesink.spark.sql import rewrite
from tests.catalog.conftest import catalog_options, commit_rows


@pytest.fixture()
def cat(tmp_path):
    catalog = lakesink.catalog(catalog_options("sqlite", tmp_path))
    catalog.create_database("shop")
    for name in ("shop.orders", "shop.daily"):
        commit_rows(catalog.location(name), [1])
        catalog.register_table(name)
    return catalog


def test_table_names_become_views_and_everything_else_stays(cat):
    text, tables = rewrite(
        "SELECT o.id, shop.orders.id, 'shop.orders', \"shop.daily\", shop.nope.x, upper(o.s) -- shop.daily\n"
        "FROM shop.orders o JOIN paimon.shop.daily d ON o.id = d.id /* shop.orders */ "
        "WHERE shop.fn(o.id) AND `shop`.`daily`.id > 0", cat)
    assert text == (
        "SELECT o.id, `shop.orders`.id, 'shop.orders', \"shop.daily\", shop.nope.x, upper(o.s) -- shop.daily\n"
        "FROM `shop.orders` o JOIN `shop.daily` d ON o.id = d.id /* shop.orders */ "
        "WHERE shop.fn(o.id) AND `shop.daily`.id > 0")
    assert tables == {TableName("shop", "orders"): False, TableName("shop", "daily"): False}


def test_insert_targets_are_marked_as_written(cat):
    text, tables = rewrite("INSERT INTO TABLE shop.daily SELECT * FROM shop.orders", cat)
    assert text == "INSERT INTO TABLE `shop.daily` SELECT * FROM `shop.orders`"
    assert tables == {TableName("shop", "daily"): True, TableName("shop", "orders"): False}
    _, tables = rewrite("insert overwrite shop.orders select 1", cat)
    assert tables == {TableName("shop", "orders"): True}


def test_statements_without_catalog_tables_are_left_alone(cat):
    query = "SELECT a.b FROM range(3) a WHERE other.t = 1"
    assert rewrite(query, cat) == (query, {})
