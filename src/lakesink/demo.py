"""The main job: a real pipeline on a local Spark session and a local warehouse.

    ./dev demo [--warehouse DIR]

Tables are named through a Paimon JDBC catalog in SQLite (`<warehouse>/catalog.db`).

1. batch: writes the `shop.orders` table with the fast path (Spark writes the Parquet),
   appends more with `df.write.format("paimon")`, overwrites one partition;
2. streaming: a file stream into `shop.orders_fast` / `shop.orders_native`, exactly once, via both paths;
3. shows the snapshots and history, reads back with pypaimon and `lakesink.read`
   (partition pruning, time travel), an atomic CREATE TABLE AS and SQL by name.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from rich.console import Console
from rich.table import Table

import lakesink


def _read(path: str):
    from pypaimon.table.file_store_table import FileStoreTable
    table = FileStoreTable.from_path(path)
    builder = table.new_read_builder()
    return table, builder.new_read().to_arrow(builder.new_scan().plan().splits())


def _show_snapshots(console: Console, path: str) -> None:
    table, data = _read(path)
    view = Table(title=f"{os.path.basename(path)}: {data.num_rows} rows")
    for col in ("snapshot", "kind", "commit user", "identifier", "rows added"):
        view.add_column(col)
    for s in table.snapshot_manager().list_snapshots():
        added = (s.properties or {}).get("lakesink.rows-added", "")
        ident = "batch" if s.commit_identifier == 0x7FFFFFFFFFFFFFFF else str(s.commit_identifier)
        view.add_row(str(s.id), s.commit_kind, s.commit_user[:40], ident, added)
    console.print(view)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", default="demo-warehouse")
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args(argv)
    console = Console()
    wh = os.path.abspath(args.warehouse)
    shutil.rmtree(wh, ignore_errors=True)
    os.makedirs(wh)
    orders = "shop.orders"

    console.rule("lakesink demo: a local Spark session, a Paimon JDBC catalog in SQLite")
    spark = lakesink.session("lakesink-demo", catalog={"metastore": "jdbc", "uri": f"jdbc:sqlite:{wh}/catalog.db",
                                                       "warehouse": wh})
    spark.sparkContext.setLogLevel("ERROR")
    catalog = lakesink.catalog(spark)
    catalog.create_database("shop")
    df = spark.range(args.rows).selectExpr(
        "id as order_id", "cast(id % 1000 as int) as customer", "cast(id % 97 as decimal(10,2)) as amount",
        "date_add(date'2026-11-01', cast(id % 5 as int)) as dt")

    console.rule("batch: fast path (Spark writes Parquet, lakesink commits)")
    report = lakesink.write(df, orders, partition_by=["dt"], options={"target-file-size": "64mb"})
    console.print(f"snapshot {report.snapshot_id}: {report.rows_added} rows in {report.files_added} files, "
                  f"commit {report.duration_ms:.0f} ms")

    console.rule("batch: idempotent re-run with a commit identity")
    more = df.selectExpr("order_id + 1000000000 as order_id", "customer", "amount", "dt")
    for attempt in (1, 2):
        r = lakesink.write(more, orders, commit_user="nightly-load", commit_identifier=20261121)
        console.print(f"run {attempt}: " + ("skipped, already committed" if r.skipped_replay
                                            else f"committed snapshot {r.snapshot_id}"))

    console.rule("batch: Spark-native path, dynamic partition overwrite")
    (df.where("dt = date'2026-11-01'").limit(10).write.format("paimon").mode("overwrite")
       .option("partitionOverwriteMode", "dynamic").save(orders))
    _show_snapshots(console, catalog.location(orders))

    console.rule("streaming: a file stream, exactly once, both paths")
    src = tempfile.mkdtemp(prefix="lakesink-demo-src-")
    for i in range(4):
        df.where(f"order_id % 4 = {i}").limit(5000).write.parquet(f"{src}/part-{i}")
    stream_df = (spark.readStream.schema(df.schema).option("maxFilesPerTrigger", 1)
                 .parquet(f"{src}/*"))
    q = lakesink.stream(stream_df, "shop.orders_fast", checkpoint=f"{wh}/_chk/fast",
                        trigger="availableNow", commit_mode="pipelined")
    q.awaitTermination()
    q.lakesink_sink.pipeline.close()
    q = (stream_df.writeStream.format("paimon").option("checkpointLocation", f"{wh}/_chk/native")
         .trigger(availableNow=True).start("shop.orders_native"))
    q.awaitTermination()
    for name in ("shop.orders_fast", "shop.orders_native"):
        _show_snapshots(console, catalog.location(name))
    shutil.rmtree(src, ignore_errors=True)

    console.rule("read back")
    _, data = _read(catalog.location(orders))
    console.print(f"[bold]pypaimon:[/bold] {data.num_rows} rows in {catalog.location(orders)}")
    one_day = lakesink.read(spark, orders, filter="dt = date'2026-11-02'")
    console.print(f"[bold]lakesink.read[/bold] (pruned to one partition): {one_day.count()} rows; "
                  f"time travel to snapshot 1: {lakesink.read(spark, orders, snapshot=1).count()} rows")
    history = lakesink.history(orders, catalog=catalog.config.options).select(
        ["snapshot_id", "commit_kind", "rows_added", "commit_duration_ms"])
    console.print("[bold]lakesink.history[/bold]:", history.to_pylist())

    console.rule("by name: atomic CREATE TABLE AS, SQL over the catalog")
    lakesink.create_table_as(lakesink.read(spark, orders).groupBy("dt").count(), "shop.daily")
    console.print(f"catalog {catalog.name!r} ({catalog.metastore}): tables {catalog.list_tables('shop')}")
    top = lakesink.sql(spark, "SELECT d.dt, d.count, sum(o.amount) AS amount FROM shop.daily d "
                              "JOIN shop.orders o ON o.dt = d.dt GROUP BY d.dt, d.count ORDER BY d.dt")
    console.print([tuple(r) for r in top.collect()])
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
