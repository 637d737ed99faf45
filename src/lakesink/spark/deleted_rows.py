"""Spark's own Parquet reader over an append table's files, leaving out rows marked deleted.

An append table with `deletion-vectors.enabled` keeps rows that row-level changes deleted in
its files, marked in deletion vectors (`paimon.files.deletion_vectors`). Spark reads the
files as they are, each row with its file name and position (`_metadata.file_name`,
`_metadata.row_index`), and an anti join with the marked positions (read on the driver,
broadcast) leaves those rows out: the same rows pypaimon's reader returns.
"""

from __future__ import annotations

FILE_NAME = "lakesink_file_name"   # the data file a row comes from
POSITION = "lakesink_row_position"  # the row's position in that file


def read_files(spark, schema, planned, positions: bool = False):
    """The live rows of `planned`'s files as `schema` (plus `FILE_NAME` and `POSITION`, given
    `positions`)."""
    from pyspark.sql import functions as F

    df = spark.read.schema(schema).parquet(*planned.file_paths())
    marked = planned.deleted_positions()
    if not marked and not positions:
        return df
    df = df.select("*", F.col("_metadata.file_name").alias(FILE_NAME),
                   F.col("_metadata.row_index").alias(POSITION))
    if marked:
        gone = spark.createDataFrame(list(marked.items()), f"{FILE_NAME} string, marked array<bigint>")
        gone = gone.select(FILE_NAME, F.explode("marked").alias(POSITION))
        df = df.join(F.broadcast(gone), [FILE_NAME, POSITION], "left_anti")
    return df if positions else df.drop(FILE_NAME, POSITION)
