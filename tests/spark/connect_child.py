"""Child process: write and read a Paimon table through Spark Connect (a local Connect server)."""

import os
import sys

import lakesink
from lakesink._java import ensure_java


def main(path: str) -> None:
    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    lakesink.register(spark)
    df = spark.range(10).selectExpr("id", "cast(id % 2 as string) as p")
    df.write.format("paimon").mode("append").option("partition", "p").save(path)
    df.where("id < 3").write.format("paimon").mode("append").save(path)
    lakesink.write(df, path)  # the fast path: the Connect server's JVM writes the Parquet
    print("COUNT", spark.read.format("paimon").load(path).count(), flush=True)
    print("READ", lakesink.read(spark, path).count(), lakesink.read(spark, path, filter="id > 100").count(), flush=True)
    report = lakesink.compact(spark, path, progress=False)  # rewrites in this process: no SparkContext here
    print("COMPACTED", report.commit_kind, lakesink.read(spark, path).count(), flush=True)
    every_other_entry_point(spark, path)
    spark.stop()


def every_other_entry_point(spark, path: str) -> None:
    """Each public entry point on Connect: `ENTRY <name> OK <rows>`, or `ENTRY <name> REFUSED <error>`
    for a lakesink error saying what to do; anything else is `ENTRY <name> FAILED`."""
    from lakesink.errors import LakesinkError

    work = os.path.dirname(os.path.dirname(path))
    source = os.path.join(work, "source")
    os.makedirs(source, exist_ok=True)
    spark.range(5).write.mode("overwrite").parquet(source)
    sdf = lambda: spark.readStream.schema("id long").parquet(source)  # noqa: E731

    def stream_native():
        q = (sdf().writeStream.format("paimon").option("checkpointLocation", f"{work}/chk-native")
             .trigger(availableNow=True).start(f"{work}/db.db/native_stream"))
        q.awaitTermination()
        return lakesink.read(spark, f"{work}/db.db/native_stream").count()

    def stream_fast():
        q = lakesink.stream(sdf(), f"{work}/db.db/fast_stream", checkpoint=f"{work}/chk-fast", trigger="availableNow")
        q.awaitTermination()
        return lakesink.read(spark, f"{work}/db.db/fast_stream").count()

    def read_stream():
        q = (lakesink.read_stream(spark, path).writeStream.format("paimon")
             .option("checkpointLocation", f"{work}/chk-read").trigger(availableNow=True)
             .start(f"{work}/db.db/copy"))
        q.awaitTermination()
        return lakesink.read(spark, f"{work}/db.db/copy").count()

    def ctas():
        lakesink.create_table_as(spark.range(7), f"{work}/db.db/ctas")
        return lakesink.read(spark, f"{work}/db.db/ctas").count()

    def jdbc():
        lakesink.jdbc.write(spark.range(4), f"sqlite:///{work}/shop.db", "orders")
        import sqlite3
        return sqlite3.connect(f"{work}/shop.db").execute("select count(*) from orders").fetchone()[0]

    def history():
        return lakesink.history(path).num_rows

    def keyed():  # the fast path's keyed plan (concurrent writers set on the Connect session)
        rows = spark.range(30).selectExpr("id % 10 as id", "id as v")
        lakesink.write(rows, f"{work}/db.db/keyed", primary_key=["id"], options={"bucket": "4"})
        got = lakesink.read(spark, f"{work}/db.db/keyed").orderBy("id").collect()
        assert [(r.id, r.v) for r in got] == [(i, i + 20) for i in range(10)], got
        return len(got)

    def keyed_stream():  # a micro-batch merged by one task (mapInArrow on the Connect server)
        keyed_source = os.path.join(work, "keyed_source")
        spark.range(12).selectExpr("id % 4 as id", "id as v").coalesce(1).write.mode("overwrite").parquet(keyed_source)
        q = lakesink.stream(spark.readStream.schema("id long, v long").parquet(keyed_source),
                            f"{work}/db.db/keyed_stream", checkpoint=f"{work}/chk-keyed", trigger="availableNow",
                            options={"primary-key": "id", "bucket": "2", "write.keyed-shuffle": "false"})
        q.awaitTermination()
        got = lakesink.read(spark, f"{work}/db.db/keyed_stream").orderBy("id").collect()
        assert [(r.id, r.v) for r in got] == [(i, i + 8) for i in range(4)], got
        return len(got)

    for name, run in [("writeStream.format(paimon)", stream_native), ("lakesink.stream", stream_fast),
                      ("lakesink.stream(primary-key)", keyed_stream),
                      ("lakesink.read_stream", read_stream), ("lakesink.create_table_as", ctas),
                      ("lakesink.jdbc.write", jdbc), ("lakesink.history", history),
                      ("lakesink.write(primary_key)", keyed)]:
        try:
            print("ENTRY", name, "OK", run(), flush=True)
        except LakesinkError as exc:
            print("ENTRY", name, "REFUSED", f"{type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
        except Exception as exc:  # noqa: BLE001 - the test reports it
            print("ENTRY", name, "FAILED", f"{type(exc).__name__}: {exc}".replace("\n", " ")[:500], flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
