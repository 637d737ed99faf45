"""A deduplicate primary-key table's rows at one snapshot, merged on read by Spark itself.

pypaimon's reader (the Python data source) merges on read in Python workers and gives Spark
every column; a row-level statement reads the target that way twice over. Here Spark's own
Parquet reader reads the key-value files (`_KEY_<k>`, `_SEQUENCE_NUMBER`, `_VALUE_KIND`, the
table's columns) and a window keeps each key's last version, as Paimon's deduplicate merge
(paimon.keyed.merge_engines): the highest `_SEQUENCE_NUMBER`, equal ones by file age (higher
levels older, level 0 by sequence range); a surviving `-U` / `-D` removes the key. Spark prunes
the columns the query does not use, so a statement needing only the key reads only the key.

Used where the files are plain Parquet of the current schema and versions are ordered by
`_SEQUENCE_NUMBER` alone (no `sequence.field`); `blockers` says why not otherwise.
"""

from __future__ import annotations

from ..paimon.keyed.layout import RETRACT_KINDS, SEQUENCE, VALUE_KIND
from ..paimon.read import scan

_RANK = "lakesink_file_rank"
_FILE = "lakesink_kv_file"


def blockers(table, planned: scan.PlannedScan) -> list[str]:
    """Why Spark cannot merge these files itself (empty: it can)."""
    reasons = [r for r in scan.fast_path_blockers(table, planned) if not r.startswith("primary-key table")]
    options = dict(table.table_schema.options)
    if str(options.get("merge-engine", "deduplicate")).strip().lower() != "deduplicate":
        reasons.append("merge-engine is not deduplicate")
    if str(options.get("sequence.field") or "").strip():
        reasons.append("sequence.field orders the versions")
    if table.table_schema.cross_partition_update():
        # A key that moved has versions in two buckets, whose sequence numbers do not compare.
        reasons.append("cross-partition table (a key's versions lie in several partitions)")
    return reasons


def _age_ranks(planned: scan.PlannedScan) -> dict[str, int]:
    """File name -> age rank within its bucket (oldest lowest), as paimon.keyed.lsm_policy.age_order."""
    ranks = {}
    buckets: dict = {}
    for split in planned.splits:
        buckets.setdefault((tuple(split.partition.values), split.bucket), []).extend(split.files)
    for files in buckets.values():
        ordered = sorted(files, key=lambda f: (f.level == 0, -f.level, f.max_sequence_number,
                                               f.min_sequence_number, f.file_name))
        for i, f in enumerate(ordered):
            ranks[f.file_name] = i
    return ranks


def read_merged(spark, table, planned: scan.PlannedScan, schema, narrow=None):
    """The table's rows in `planned` (its snapshot's files) as a DataFrame of `schema` (the
    table's Spark schema), each key's last version, retractions dropped.

    `narrow(versions)`, given every stored version (the table's columns), keeps those a statement
    may act on: only the keys of the versions it keeps are merged (`_narrowed`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not planned.splits:
        return spark.createDataFrame([], schema)
    kv = T.StructType([T.StructField(SEQUENCE, T.LongType()), T.StructField(VALUE_KIND, T.ByteType()),
                       *schema.fields])
    df = spark.read.schema(kv).parquet(*planned.file_paths())
    columns = [F.col(f"`{f.name}`") for f in schema.fields]
    one_file_per_bucket = len(planned.files) == len({(tuple(s.partition.values), s.bucket) for s in planned.splits})
    if not one_file_per_bucket:
        ranks = _age_ranks(planned)
        names = list(ranks)
        rank_of = F.element_at(F.map_from_arrays(F.array(*[F.lit(n) for n in names]),
                                                 F.array(*[F.lit(ranks[n]) for n in names])),
                               F.col("_metadata.file_name"))
        df = df.select(*columns, F.col(SEQUENCE), F.col(VALUE_KIND), rank_of.alias(_RANK))
        if narrow is not None:
            df = _narrowed(df, narrow, table.primary_keys)
        latest = Window.partitionBy(*[F.col(f"`{k}`") for k in table.primary_keys]).orderBy(
            F.col(SEQUENCE).desc(), F.col(_RANK).desc())
        df = df.withColumn("lakesink_version", F.row_number().over(latest)).where("lakesink_version = 1")
    # A file holds each key once: with one file a bucket there is nothing to merge.
    return df.where(~F.col(VALUE_KIND).isin(*RETRACT_KINDS)).select(*columns)


def _narrowed(versions, narrow, keys: list[str]):
    """`versions` of only the keys some version of which `narrow` keeps. A key whose last version
    a statement acts on keeps that version, so no such key is lost; merging then needs a
    shuffle and sort of those keys' versions instead of the whole table's. The keys are
    broadcast where few enough (they are counted first); otherwise all versions stay."""
    from pyspark.sql import functions as F

    from . import broadcast

    picked = narrow(versions).select(*[F.col(f"`{k}`") for k in keys]).distinct()
    width = 16 + 8 * len(keys)  # a key's row in the broadcast relation, roughly
    if not broadcast.fits(versions.sparkSession, picked.count() * width):
        return versions
    return versions.join(F.broadcast(picked), keys, "left_semi")
