"""Row lineage (`_ROW_ID`, `_SEQUENCE_NUMBER`) of row-tracking tables in Spark DataFrames.

Reading: Spark's Parquet reader gets the stored lineage columns (null where a file has none)
and each row's position in its file; a row's id is the stored one, else its file's
`first_row_id` + position, and its sequence number the stored one, else its file's
`max_sequence_number` (Paimon's rule, `paimon.files.lineage`).

Writing the rewritten rows of a row-level change: each output file must be one run of
consecutive ids in id order. Rows keep their ids; a run is cut wherever an id is missing
(a deleted row, a row moved to another partition), so each run's rows go into a directory
of their own, sorted by id, and Spark writes one file each. Rows without an id (inserted)
get theirs at commit.
"""

from __future__ import annotations

from ..paimon.files.lineage import COLUMNS, ROW_ID, SEQUENCE_NUMBER

RUN = "lakesink_run"  # a rewritten row's run of consecutive ids (a directory of the staged output)


def read_schema(schema):
    """`schema` (the table's Spark schema) with the stored lineage columns."""
    from pyspark.sql import types as T

    return T.StructType([*schema.fields, *[T.StructField(c, T.LongType()) for c in COLUMNS]])


def columns(files: dict) -> list:
    """The `_ROW_ID` and `_SEQUENCE_NUMBER` columns of rows read with `read_schema` from the data
    files `files` (file name -> DataFileMeta)."""
    from pyspark.sql import functions as F

    def by_file(attribute):
        pairs = [x for name, meta in files.items() for x in (F.lit(name), F.lit(getattr(meta, attribute)))]
        return F.element_at(F.create_map(*pairs), F.col("_metadata.file_name")) if pairs else F.lit(None)

    row_id = F.coalesce(F.col(ROW_ID), by_file("first_row_id").cast("long") + F.col("_metadata.row_index"))
    sequence = F.coalesce(F.col(SEQUENCE_NUMBER), by_file("max_sequence_number").cast("long"))
    return [row_id.alias(ROW_ID), sequence.alias(SEQUENCE_NUMBER)]


def with_runs(rows, group: list[str], partition_keys: list[str]):
    """`rows` (table columns, `_ROW_ID`, `_SEQUENCE_NUMBER` and the `group` columns: where a row
    comes from) with `RUN`: rows of one source and partition whose ids follow each other share
    it. Ids minus their rank among the group's ids is constant along a run; the runs of different
    sources never meet, since their files' id ranges are disjoint. Rows without an id: null."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = [F.col(c) for c in [*group, *partition_keys]]
    tracked = rows.where(F.col(ROW_ID).isNotNull())
    rank = F.row_number().over(Window.partitionBy(*keys).orderBy(F.col(ROW_ID)))
    tracked = tracked.withColumn(RUN, F.col(ROW_ID) - rank)
    new = rows.where(F.col(ROW_ID).isNull()).withColumn(RUN, F.lit(None).cast("long"))
    return tracked.unionByName(new).drop(*group)
