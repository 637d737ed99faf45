"""Child driver for the Spark CTAS kill test: a session with the catalog given as JSON, then
create_table_as by name through format("paimon"). The parent sets LAKESINK_CRASH_AT to kill this
process group (driver, JVM, Python workers) at a point of the job's commit."""

import json
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("LAKESINK_MASTER", "local[2]")
    os.environ.setdefault("LAKESINK_CRASH_PGID", str(os.getpgid(0)))
    import lakesink

    spark = lakesink.session("lakesink-ctas-kill", catalog=json.loads(sys.argv[1]),
                             conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    df = spark.range(50).selectExpr("id", "cast(id % 2 as string) as dt").repartition(2)
    lakesink.create_table_as(df, sys.argv[2], partition_by=["dt"], via="native")
    print("DONE", flush=True)
    spark.stop()
