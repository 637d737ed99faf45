"""Exactly-once writes and atomic CREATE TABLE AS from PySpark into PostgreSQL and SQLite.

    import lakesink
    url = "postgresql://app@127.0.0.1:5432/shop"          # or "sqlite:////data/shop.db"
    lakesink.jdbc.write(df, url, "public.orders")                             # one transaction
    lakesink.jdbc.write(df, url, "public.users", mode="upsert", key=["id"])
    lakesink.jdbc.stream(sdf, url, "public.orders", checkpoint="/chk/orders", trigger="5 seconds")
    lakesink.jdbc.create_table_as(df, url, "public.daily")
    df.write.format("lakesink-jdbc").option("url", url).option("dbtable", "public.orders").mode("append").save()

The same commit protocol as the Paimon sink (`lakesink.protocol`), with a
database table as the target: see docs/jdbc.md.
"""

from __future__ import annotations

import datetime as _dt


def write(df, url: str, table: str, mode: str = "append", **kwargs):
    from ..spark.jdbc import write as _write
    return _write(df, url, table, mode, **kwargs)


def stream(df, url: str, table: str, checkpoint: str, trigger: str | None = None, **kwargs):
    from ..spark.jdbc import stream as _stream
    return _stream(df, url, table, checkpoint, trigger, **kwargs)


def create_table_as(df, url: str, table: str, **kwargs):
    from ..spark.jdbc import create_table_as as _ctas
    return _ctas(df, url, table, **kwargs)


def replace_table_as(df, url: str, table: str, **kwargs):
    from ..spark.jdbc import replace_table_as as _rtas
    return _rtas(df, url, table, **kwargs)


def clean_staging(url: str, older_than: _dt.timedelta | float = _dt.timedelta(hours=1), dry_run: bool = False, *,
                  older_than_s: float | None = None, **kwargs) -> list[str]:
    from ..protocol.staging import staging_age
    from ..spark.jdbc import clean_staging as _clean
    return _clean(url, staging_age(older_than, older_than_s), dry_run, **kwargs)


def register(spark) -> None:
    """Register the `lakesink-jdbc` data source (lakesink.session() does it already)."""
    from ..spark.jdbc_datasource import JdbcDataSource
    spark.dataSource.register(JdbcDataSource)


write.__doc__ = "Write a DataFrame into a database table in one transaction. See jdbc.spark.write."
stream.__doc__ = "Start an exactly-once streaming query into a database table. See jdbc.spark.stream."
create_table_as.__doc__ = "Create a table from a DataFrame, all or nothing. See jdbc.spark.create_table_as."
replace_table_as.__doc__ = "Replace a table's definition and rows in one transaction. See jdbc.spark.replace_table_as."
clean_staging.__doc__ = ("Drop staging tables killed drivers left, older than `older_than` (a datetime.timedelta or "
                         "seconds; an hour by default; `older_than_s`: the former keyword, deprecated). "
                         "See spark.jdbc.clean_staging.")

__all__ = ["write", "stream", "create_table_as", "replace_table_as", "clean_staging", "register"]
