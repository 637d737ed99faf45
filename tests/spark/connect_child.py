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
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
