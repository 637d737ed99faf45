"""Cross-partition primary-key tables in a Spark job (`lakesink.write`, shuffled stream batches):
Paimon's global key -> (partition, bucket) index, bootstrapped and applied by Spark tasks.

    index  = the planned snapshot's keys: one row per live key (primary key, partition, bucket),
             each bucket's files read and merged by a task (paimon.keyed.cross_partition.live_keys)
    keys   = the write's keys: per primary key, the partitions of its first and last row (input order)
    assign = keys and index rows routed together to assigner abs(hash(key) % n), as Paimon's
             bootstrap feeds its assigners; assigner a counts the index's keys per bucket, finds
             each written key's entry, and decides (paimon.keyed.cross_partition.decide): its home
             (partition, bucket), which of its rows stay, the -D a moved key leaves behind
    rows   ⋈ assign on the primary key: rows dropped or given the home partition, the -D rows
             added, then written as any dynamic-bucket table's rows (spark.keyed)

No dictionary of keys on the driver: it lists the snapshot's files only. The input is evaluated
twice (its keys, then its rows): a row whose key the assigners never saw fails the write.
"""

from __future__ import annotations

import json

import pyarrow as pa

from ..paimon.keyed.cross_partition import (DELETE_KIND, BucketCounts, bucket_groups, decide, existing_action,
                                            live_keys)
from ..paimon.keyed.dynamic import DynamicPlan
from ..paimon.keyed.layout import KeyedSpec
from .arrow import spark_to_arrow
from .bucket import task_keys, with_key_hash
from .session import cores
from .sqltext import ident

_FIRST, _LAST, _FROM, _TO = "lakesink_x_first", "lakesink_x_last", "lakesink_x_from", "lakesink_x_to"
_OLD_BUCKET, _ASSIGNER, _HASH = "lakesink_x_old_bucket", "lakesink_x_assigner", "lakesink_x_hash"
_HOME, _HOME_BUCKET, _KEEP = "lakesink_x_home", "lakesink_x_home_bucket", "lakesink_x_keep"
_DELETE, _DELETE_BUCKET, _MOVED = "lakesink_x_delete", "lakesink_x_delete_bucket", "lakesink_x_moved"
_BUCKET_OF_KEY = "lakesink_x_bucket"
_UNSEEN = ("a row's primary key differs between two evaluations of the input (a cross-partition write reads "
           "its keys, then its rows): make the key columns deterministic, or persist the input first. "
           "Nothing was written.")


def index_frame(spark, plan: DynamicPlan, spec: KeyedSpec, schema: pa.Schema, key_schema, hidden: list[str]):
    """The planned snapshot's keys as a DataFrame: the primary key's columns, the partition in the
    `hidden` columns, and the bucket; each bucket's files read and merged by one Spark task.
    `schema`: the table's Arrow schema; `key_schema`: the Spark fields of the output columns."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    out = StructType([*key_schema, StructField(_BUCKET_OF_KEY, IntegerType(), False)])
    table, snapshot = plan.open()
    groups = bucket_groups(table, snapshot) if table is not None else []
    if not groups:
        return spark.createDataFrame([], out)
    arrow_out = spark_to_arrow(out)
    pk, partition_keys = list(spec.primary_keys), list(spec.partition_keys)
    path, fs_options = plan.path, plan.fs_options
    files = pa.table({"group": pa.array(range(len(groups)), pa.int32()),
                      "bucket": pa.array([g.bucket for g in groups], pa.int32()),
                      "paths": pa.array([json.dumps(list(g.paths)) for g in groups]),
                      "deletions": pa.array([json.dumps(list(g.deletions)) for g in groups])})
    tasks = max(1, min(len(groups), cores(spark)))

    def read(batches):
        from lakesink import storage
        file_io = storage.file_io(path, fs_options)
        for batch in batches:
            for row in batch.to_pylist():
                keys = live_keys(file_io, json.loads(row["paths"]), spec, schema, json.loads(row["deletions"]))
                columns = [keys.column(k) for k in pk] + [keys.column(k) for k in partition_keys]
                columns.append(pa.array([row["bucket"]] * keys.num_rows, pa.int32()))
                if keys.num_rows:
                    yield pa.Table.from_arrays(columns, names=arrow_out.names).cast(arrow_out).to_batches()[0]

    return spark.createDataFrame(files).repartition(tasks, "group").mapInArrow(read, out)


def _flatten(structs) -> list:
    """The child arrays of a struct column (its partition values), in field order."""
    combined = structs.combine_chunks() if isinstance(structs, pa.ChunkedArray) else structs
    return combined.flatten()


def with_cross_partition(df, spec: KeyedSpec, fields, schema: pa.Schema, hidden: list[str], plan: DynamicPlan,
                         bucket: str, kind: str, order: str):
    """`df` (table columns, partition copies in `hidden`, the row kind in `kind`, input order in
    `order`) as a cross-partition table writes it: each row in its key's home partition and bucket
    (int column `bucket`) or dropped, and a -D row (kind 3) for each key leaving a partition."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    from .checks import ERROR_PREFIX

    spark = df.sparkSession
    pk = list(spec.primary_keys)
    part = F.struct(*[F.col(h) for h in hidden])
    part_type = StructType([df.schema[h] for h in hidden])
    key_fields = [df.schema[k] for k in pk]
    n = plan.assigners
    owners = ", ".join(str(k) for k in task_keys(n, n))

    def routed(frame):
        hashed = with_key_hash(frame, pk, fields, _HASH, not_null=True)
        return hashed.selectExpr("*", f"element_at(array({owners}), CAST(abs({_HASH} % {n}) AS INT) + 1) "
                                      f"AS {_ASSIGNER}").drop(_HASH)

    keys = (df.groupBy(*[F.col(ident(k)) for k in pk])
            .agg(F.min_by(part, F.col(order)).alias(_FIRST), F.max_by(part, F.col(order)).alias(_LAST),
                 F.min(order).alias(_FROM), F.max(order).alias(_TO))
            .withColumn(_OLD_BUCKET, F.lit(None).cast("int")))
    index = index_frame(spark, plan, spec, schema, [*key_fields, *[df.schema[h] for h in hidden]], hidden)
    index = index.select(*[F.col(ident(k)) for k in pk], part.alias(_FIRST), F.lit(None).cast(part_type).alias(_LAST),
                         F.lit(None).cast("long").alias(_FROM), F.lit(None).cast("long").alias(_TO),
                         F.col(_BUCKET_OF_KEY).alias(_OLD_BUCKET))
    together = routed(keys).unionByName(routed(index)).repartition(n, _ASSIGNER)

    decided = StructType([*key_fields, StructField(_HOME, part_type, False),
                          StructField(_HOME_BUCKET, IntegerType(), False), StructField(_KEEP, part_type, True),
                          StructField(_DELETE, part_type, True), StructField(_DELETE_BUCKET, IntegerType(), True),
                          StructField(_TO, LongType(), False)])
    arrow_decided = spark_to_arrow(decided)
    action, target = existing_action(spec), plan.target_rows
    owner_of = {owner: a for a, owner in enumerate(task_keys(n, n))}

    def assign(batches):
        import numpy as np
        import pyarrow.compute as pc
        batches = list(batches)
        if not batches:
            return
        data = pa.Table.from_batches(batches)
        in_index = pc.is_valid(data.column(_OLD_BUCKET))
        index, data = data.filter(in_index), data.filter(pc.invert(in_index))
        if data.num_rows == 0:
            return
        # The index rows stay Arrow: counted per (assigner, partition, bucket), and joined with the
        # written keys only (an assigner may hold millions of the table's keys).
        parts = [f"p{j}" for j in range(len(hidden))]
        flat = pa.table({**dict(zip(parts, _flatten(index.column(_FIRST)))),
                         "bucket": index.column(_OLD_BUCKET), "assigner": index.column(_ASSIGNER)})
        counts: dict[int, BucketCounts] = {}

        def counts_of(owner):
            a = owner_of[owner]
            if a not in counts:
                counts[a] = BucketCounts(target, n, a)
            return counts[a]

        for row in flat.group_by([*parts, "bucket", "assigner"], use_threads=False).aggregate(
                [("bucket", "count")]).to_pylist():
            counts_of(row["assigner"]).add(tuple(row[p] for p in parts), row["bucket"], row["bucket_count"])
        probe = data.select(pk).append_column("_row", pa.array(np.arange(data.num_rows, dtype=np.int64)))
        entries = pa.table({**{k: index.column(k) for k in pk}, **dict(zip(parts, _flatten(index.column(_FIRST)))),
                            "bucket": index.column(_OLD_BUCKET)})
        found = probe.join(entries, keys=pk, join_type="inner", use_threads=False)
        where = {row: (tuple(values), bucket) for row, bucket, *values in
                 zip(found.column("_row").to_pylist(), found.column("bucket").to_pylist(),
                     *[found.column(p).to_pylist() for p in parts])}
        firsts = [tuple(p.values()) for p in data.column(_FIRST).to_pylist()]
        lasts = [tuple(p.values()) for p in data.column(_LAST).to_pylist()]
        starts, ends = data.column(_FROM).to_pylist(), data.column(_TO).to_pylist()
        owners = data.column(_ASSIGNER).to_pylist()
        out = {name: [] for name in arrow_decided.names}
        for k in pk:
            out[k] = data.column(k)
        order = sorted(range(data.num_rows), key=starts.__getitem__)  # new keys take buckets in arrival order
        decisions = {}
        for i in order:
            decisions[i] = decide(action, where.get(i), firsts[i], lasts[i], counts_of(owners[i]))
        for i in range(data.num_rows):
            d = decisions[i]
            out[_HOME].append(dict(zip(hidden, d.home)))
            out[_HOME_BUCKET].append(d.bucket)
            out[_KEEP].append(dict(zip(hidden, d.keep)) if d.keep is not None else None)
            out[_DELETE].append(dict(zip(hidden, d.delete[0])) if d.delete is not None else None)
            out[_DELETE_BUCKET].append(d.delete[1] if d.delete is not None else None)
            out[_TO].append(ends[i])
        columns = {name: out[name] if name in pk else pa.array(out[name], arrow_decided.field(name).type)
                   for name in arrow_decided.names}
        yield from pa.table(columns).cast(arrow_decided).to_batches()

    assigned = together.mapInArrow(assign, decided)
    joined = df.join(assigned, on=pk, how="left")
    # A key's last row also carries the -D its key leaves in the partition it moved from.
    moved = F.explode(F.when(F.col(_DELETE_BUCKET).isNotNull() & (F.col(order) == F.col(_TO)),
                             F.array(F.lit(False), F.lit(True))).otherwise(F.array(F.lit(False))))
    joined = joined.select("*", moved.alias(_MOVED))
    same = None
    for h in hidden:
        match = F.col(h).eqNullSafe(F.col(f"{_KEEP}.{h}"))
        same = match if same is None else same & match
    joined = joined.where(F.col(_MOVED) | F.col(_KEEP).isNull() | same)
    unseen = F.raise_error(F.lit(ERROR_PREFIX + _UNSEEN))
    home_bucket = F.when(F.col(_HOME_BUCKET).isNull(), unseen).otherwise(F.col(_HOME_BUCKET))
    partition_of = {k: h for k, h in zip(spec.partition_keys, hidden)}

    def placed(h):
        return F.when(F.col(_MOVED), F.col(f"{_DELETE}.{h}")).otherwise(F.col(f"{_HOME}.{h}"))

    columns = []
    for name in df.columns:
        if name in hidden:
            columns.append(placed(name).alias(name))
        elif name in partition_of:
            columns.append(placed(partition_of[name]).alias(name))
        elif name == kind:
            columns.append(F.when(F.col(_MOVED), F.lit(DELETE_KIND).cast("tinyint")).otherwise(F.col(kind))
                           .alias(kind))
        else:
            columns.append(F.col(ident(name)))
    columns.append(F.when(F.col(_MOVED), F.col(_DELETE_BUCKET)).otherwise(home_bucket).cast("int").alias(bucket))
    return joined.select(*columns)
