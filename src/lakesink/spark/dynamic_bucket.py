"""Dynamic-bucket assignment in a Spark job (`lakesink.write`, shuffled stream batches).

    rows ─ hash  = Paimon's hash of the trimmed primary key (spark.bucket.with_key_hash, JVM)
         ─ keys  = distinct (partition, hash)                   only the keys move to Python
                   routed to assigner abs(hash % n): one task each (bucket.task_keys)
                   assigner a: pypaimon's HashBucketAssigner over the planned snapshot's index
                   (paimon.keyed.dynamic.Assigners) -> (partition, hash, bucket)
         ─ rows joined with their key's bucket on (partition, hash)

The rest of the write is the fixed-bucket plan (spark.keyed): shuffled by (partition, bucket),
merged per key, one file per bucket; the commit writes the hash index of the buckets that got
new keys (paimon.keyed.dynamic.index_changes).
"""

from __future__ import annotations

import pyarrow as pa

from ..paimon.keyed.dynamic import Assigners, DynamicPlan
from ..paimon.keyed.layout import KeyedSpec
from .bucket import task_keys, with_key_hash

KEY_HASH = "lakesink_key_hash"
_UNSEEN = ("a row's primary key differs between two evaluations of the input (a dynamic-bucket write reads "
           "its keys, then its rows): make the key columns deterministic, or persist the input first. "
           "Nothing was written.")
_ASSIGNER = "lakesink_assigner"


def default_assigners(spark) -> int:
    try:
        return max(1, spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext in this process
        return 2


def with_dynamic_bucket(df, spec: KeyedSpec, fields, hidden: list[str], plan: DynamicPlan, name: str):
    from pyspark.sql import functions as F

    from .checks import ERROR_PREFIX
    """`df` (its partition values in the columns `hidden`) with an int column `name`: each row's
    bucket, assigned by `plan.assigners` Spark tasks as Paimon's assigners do."""
    hashed = with_key_hash(df, list(spec.trimmed_keys), fields, KEY_HASH, not_null=True)
    n = plan.assigners
    owners = ", ".join(str(k) for k in task_keys(n, n))
    keys = (hashed.selectExpr(*hidden, KEY_HASH).distinct()
            .selectExpr("*", f"element_at(array({owners}), CAST(abs({KEY_HASH} % {n}) AS INT) + 1) AS {_ASSIGNER}")
            .repartition(n, _ASSIGNER).drop(_ASSIGNER))
    key_schema = keys.schema

    def assign(batches):
        import numpy as np
        assigners = Assigners(plan)
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)  # Spark's own nullability, whatever the plan said
        partitions = list(zip(*[table.column(h).to_pylist() for h in hidden])) if hidden else [()] * table.num_rows
        hashes = table.column(KEY_HASH).to_numpy().astype(np.int32)
        buckets = assigners.assign(partitions, hashes)
        yield from table.append_column(pa.field(name, pa.int32(), nullable=False),
                                       pa.array(buckets, pa.int32())).to_batches()

    from pyspark.sql.types import IntegerType, StructField, StructType
    assigned = keys.mapInArrow(assign, StructType([*key_schema.fields, StructField(name, IntegerType(), False)]))
    on = [*hidden, KEY_HASH]
    # The input is evaluated twice (its keys, then its rows): a row whose key the assigners never
    # saw (keys computed nondeterministically) fails the write rather than vanish from it.
    joined = hashed.join(assigned, on=[hashed[c] == assigned[c] for c in on], how="left")
    bucket = F.when(assigned[name].isNull(), F.raise_error(F.lit(ERROR_PREFIX + _UNSEEN))).otherwise(assigned[name])
    return joined.select(*[hashed[c] for c in hashed.columns if c != KEY_HASH], bucket.cast("int").alias(name))
