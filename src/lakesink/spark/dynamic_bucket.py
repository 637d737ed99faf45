"""Dynamic-bucket assignment in a Spark job (`lakesink.write`, shuffled stream batches).

One pass (spark.keyed, every table without changelog files):

    rows ─ hash  = Paimon's hash of the trimmed primary key (spark.bucket.with_key_hash, JVM)
         ─ shuffled to assigner abs(hash % n): task a holds assigner a's keys, and so the rows of
                   its buckets (b % n == a; bucket.task_keys)
         ─ merged per key (the fixed-bucket window, grouped by partition and key)
         ─ bucket = pypaimon's HashBucketAssigner over the planned snapshot's index, run in the
                   task on the merged rows (`with_assigned_bucket`; paimon.keyed.dynamic.Assigners)
         ─ sorted by (partition, bucket, key) and written, one file per bucket

Two passes (changelog files, which take every input row, not only the merged ones):

    rows ─ hash
         ─ keys  = every row's (partition, hash) to its assigner's task, repeats dropped there;
                   the assigned (partition, hash, bucket) persisted and counted
         ─ rows joined with their key's bucket: broadcast where the keys fit (the rows stream past
                   them), else both sides shuffled; then the fixed-bucket plan (spark.keyed)

Either way the commit writes the hash index of the buckets that got new keys
(paimon.keyed.dynamic.index_changes).
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


def assigner_owner(n: int) -> str:
    """SQL of a row's shuffle key (by its `KEY_HASH`) that puts assigner `abs(hash % n)` in task
    `abs(hash % n)` of `n` (bucket.task_keys)."""
    owners = ", ".join(str(k) for k in task_keys(n, n))
    return f"element_at(array({owners}), CAST(abs({KEY_HASH} % {n}) AS INT) + 1)"


def with_assigned_bucket(df, hidden: list[str], plan: DynamicPlan, name: str):
    """`df`, each task's rows of one assigner (shuffled by `assigner_owner`), with an int column
    `name`: each row's bucket, from its partition (`hidden`) and `KEY_HASH`, assigned in the task
    as Paimon's assigner does (the task's rows already merged: a key a row)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    def assign(batches):
        assigners = Assigners(plan)
        for batch in batches:
            # Spark's own nullability for the columns it gave, whatever the plan said
            yield pa.RecordBatch.from_arrays([*batch.columns, _buckets(assigners, batch, hidden)],
                                             schema=batch.schema.append(pa.field(name, pa.int32(), nullable=False)))

    return df.mapInArrow(assign, StructType([*df.schema.fields, StructField(name, IntegerType(), False)]))


MAX_DEFAULT_ASSIGNERS = 64


def default_assigners(spark, per_core: int = 1) -> int:
    """Assigner tasks of a write whose table leaves `dynamic-bucket.assigner-parallelism` unset:
    one per core (Paimon's Spark default), or `per_core` per core up to 64 (and never fewer
    than one per core)."""
    from .session import cores
    n = cores(spark)
    return max(n, min(n * per_core, MAX_DEFAULT_ASSIGNERS))


def with_dynamic_bucket(df, spec: KeyedSpec, fields, hidden: list[str], plan: DynamicPlan, name: str,
                        kept: list | None = None):
    """`df` (its partition values in the columns `hidden`) with an int column `name`: each row's
    bucket, assigned by `plan.assigners` Spark tasks as Paimon's assigners do. `kept`: where the
    assigned keys, persisted, are listed for the caller to unpersist after the write (None: not
    persisted, joined by a shuffle of both sides)."""
    from pyspark.sql import functions as F

    from . import broadcast
    from .checks import ERROR_PREFIX
    hashed = with_key_hash(df, list(spec.trimmed_keys), fields, KEY_HASH, not_null=True)
    n = plan.assigners
    # Every row's key goes to its assigner's task, where repeated keys are dropped: one shuffle of
    # a few bytes a row. (Spark's distinct first aggregated 10M rows of 1M keys in hash tables
    # too large for the cache, then shuffled twice: ~2x the time.)
    keys = (hashed.selectExpr(*hidden, KEY_HASH, f"{assigner_owner(n)} AS {_ASSIGNER}")
            .repartition(n, _ASSIGNER).drop(_ASSIGNER))
    key_schema = keys.schema
    distinct_columns = [*hidden, KEY_HASH]

    def assign(batches):
        table = _distinct(batches, distinct_columns)
        if table is None:
            return
        yield from table.append_column(pa.field(name, pa.int32(), nullable=False),
                                       _buckets(Assigners(plan), table, hidden)).to_batches()

    from pyspark.sql.types import IntegerType, StructField, StructType
    assigned = keys.mapInArrow(assign, StructType([*key_schema.fields, StructField(name, IntegerType(), False)]))
    if kept is not None:
        # A shuffle join moves and sorts every row once more than a fixed-bucket write; the
        # assigned keys (a few bytes each) usually fit in a broadcast instead.
        assigned = assigned.persist()
        kept.append(assigned)
        assigned.count()
        if broadcast.fits_frame(assigned):
            assigned = F.broadcast(assigned)
    on = [*hidden, KEY_HASH]
    # The input is evaluated twice (its keys, then its rows): a row whose key the assigners never
    # saw (keys computed nondeterministically) fails the write rather than vanish from it.
    joined = hashed.join(assigned, on=[hashed[c] == assigned[c] for c in on], how="left")
    bucket = F.when(assigned[name].isNull(), F.raise_error(F.lit(ERROR_PREFIX + _UNSEEN))).otherwise(assigned[name])
    return joined.select(*[hashed[c] for c in hashed.columns if c != KEY_HASH], bucket.cast("int").alias(name))


def _buckets(assigners: Assigners, rows, hidden: list[str]) -> pa.Array:
    """The bucket of each of `rows` (an Arrow batch or table with `hidden` and `KEY_HASH`)."""
    import numpy as np
    partitions = list(zip(*[rows.column(h).to_pylist() for h in hidden])) if hidden else [()] * rows.num_rows
    return pa.array(assigners.assign(partitions, rows.column(KEY_HASH).to_numpy().astype(np.int32)), pa.int32())


_COMPACT_ROWS = 8_000_000  # rows a task holds before dropping the repeated keys of what it has


def _distinct(batches, columns: list[str]):
    """The distinct (partition, hash) rows of an assigner task's batches, in first-seen order
    (None: no rows); repeats dropped as the rows arrive, so a task holds its keys, not its rows."""
    kept, held = [], 0
    for batch in batches:
        kept.append(pa.Table.from_batches([batch]))  # Spark's own nullability, whatever the plan said
        held += batch.num_rows
        if held >= _COMPACT_ROWS:
            kept = [_dropped_repeats(pa.concat_tables(kept), columns)]
            held = kept[0].num_rows
    return _dropped_repeats(pa.concat_tables(kept), columns) if kept else None


def _dropped_repeats(table, columns: list[str]):
    return table.group_by(columns, use_threads=False).aggregate([]).select(table.column_names)
