"""Child driver for CTAS kill tests: a CREATE TABLE AS whose tasks are slow.

Prints READY once the staged table exists, then runs until killed.
"""

import os
import sys
import time

import lakesink
from lakesink.paimon.catalog import staged_table as staged


def main(path: str) -> None:
    spark = lakesink.session("ctas-child")
    spark.sparkContext.setLogLevel("ERROR")
    from pyspark.sql.functions import udf

    @udf("long")
    def slow(x):
        time.sleep(0.5)
        return x

    original_begin = staged.PaimonStagedTable.begin

    def begin(self):
        original_begin(self)
        print("READY", self.staging_path, flush=True)

    staged.PaimonStagedTable.begin = begin
    df = spark.range(0, 400, 1, 2).select(slow("id").alias("id"))
    try:
        lakesink.create_table_as(df, path)
    except BaseException as exc:  # SIGTERM: the staged table was aborted; leave at once
        print("ABORTED", type(exc).__name__, flush=True)
        os._exit(3)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
    os._exit(0)
