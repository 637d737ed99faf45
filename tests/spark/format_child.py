"""Child process: a session where a JVM data source already owns the name `paimon`.

Stands in for Apache Paimon's Spark connector on `spark.jars`: lakesink must
leave `paimon` to it and still work under `lakesink-paimon` and its own API.
"""

import os
import sys

import lakesink


def main(jar: str, path: str) -> None:
    spark = lakesink.session("lakesink-format-name", conf={"spark.jars": jar, "spark.ui.enabled": "false"})
    print("OWNS_PAIMON", lakesink.register(spark), flush=True)
    df = spark.range(10).selectExpr("id", "cast(id % 2 as string) as p")
    df.write.format("lakesink-paimon").mode("append").option("partition", "p").save(path)
    lakesink.write(df.where("id < 3"), path)
    print("COUNT", spark.read.format("lakesink-paimon").load(path).count(), lakesink.read(spark, path).count(),
          flush=True)
    try:
        spark.range(1).write.format("paimon").save(path + "-other")
        print("PAIMON_REACHED", "lakesink", flush=True)
    except Exception as exc:  # noqa: BLE001 - the stand-in cannot write: that is the point
        print("PAIMON_REACHED", "other", type(exc).__name__, flush=True)
    spark.stop()


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main(sys.argv[1], sys.argv[2])
