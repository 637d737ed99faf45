"""The fast path for primary-key and fixed-bucket tables: Spark's JVM buckets, merges and
writes key-value Parquet files; the driver describes and commits them as one snapshot.

Plan of the Spark job (one shuffle, one sort):

    input ─ order  = monotonically_increasing_id()   (input partition, then position)
          ─ bases  = next free sequence number of each bucket of the row's partition
                     (a broadcast join on the partition values; unpartitioned: a literal
                     array, looked up after the shuffle)
          ─ bucket = Paimon's bucket function of the bucket key (spark.bucket); base = bases[bucket]
          ─ repartition(partition columns, bucket)    one task owns each bucket; unpartitioned:
            repartition(tasks, owner), owner a key whose Spark hash puts bucket b in task
            b % tasks (tasks = min(buckets, 4 × cores); dynamic buckets: min(assigners, cores)):
            even, and never coalesced into one task
          ─ window over (partition, bucket, key) ordered by (sequence.field, order);
            unpartitioned tables: over (key, bucket), files written concurrently per task:
                keep the last row (deduplicate) or the first (first-row); partial-update and
                aggregation merge the key's versions into the last row (window aggregates)
          ─ _SEQUENCE_NUMBER = base + row index in the task; _VALUE_KIND from rowkind.field
          ─ write.partitionBy(partition copies, bucket): one file per bucket, sorted by key

Dynamic buckets (no changelog files): shuffled by the key hash's assigner instead of the
bucket, merged per key, then each row's bucket assigned in its task (spark.dynamic_bucket)
and the merged rows sorted by (partition, bucket, key) before the write.

"Last" means: by `sequence.field` when the table has one, then by input order,
where rows of one input partition keep their order and, for the same key in
several input partitions, the higher-numbered partition's row counts as later.
The window's partitioning is satisfied by the repartition, and the write's
required ordering by the window's sort (or, unpartitioned, there is none: each
task keeps one file per bucket open): Spark adds no shuffle or sort of its own.
"""

from __future__ import annotations

from ..paimon.keyed.layout import KEY_PREFIX, RETRACT_KINDS, ROW_KINDS, SEQUENCE, VALUE_KIND, KeyedSpec
from . import sqltext
from .checks import ERROR_PREFIX, not_null
from .bucket import task_keys, with_bucket, with_key_hash
from .sqltext import ident, string

HIDDEN_PARTITION = "lakesink_partition_{}"
BUCKET = "lakesink_bucket"
_ORDER = "lakesink_order"
_BASE = "lakesink_base"
_OWNER = "lakesink_owner"  # unpartitioned tables: what the shuffle hashes (one task per bucket)
_BASES = "lakesink_bases"  # the next free sequence number of each bucket of the row's partition
_KIND = "lakesink_kind"
_VERSIONS = "lakesink_versions"
_MERGED = "lakesink_merged_"
_KEEP = "lakesink_keep"
_RETRACT = "(" + ", ".join(str(k) for k in RETRACT_KINDS) + ")"
_FILE = "lakesink_file"  # data | changelog (changelog-producer=input); its directory marks changelog files
_ROW_INDEX_BITS = 33  # monotonically_increasing_id: partition id << 33 | row index in the partition
MAX_OPEN_FILES = 64  # buckets one task may write at once, each file open (larger tables: sorted by bucket)


def keyed_frame(df, spec: KeyedSpec, fields, next_sequence: dict, dynamic=None, kept: list | None = None):
    """The DataFrame Spark writes, the names of its partitionBy columns, and how many files a
    task keeps open at once (`concurrent_writers`: 0 when rows come sorted by those columns).
    `kept`: frames persisted for the write, which the caller unpersists after it.

    Expressions are SQL text (spark.sqltext): one call into the JVM per projection, not per
    function; a stream builds this plan every micro-batch."""
    from pyspark.sql import functions as F

    names = [f.name for f in fields]
    keyed = spec.has_primary_key
    hidden = [HIDDEN_PARTITION.format(i) for i in range(len(spec.partition_keys))]
    first = []
    nullable = {f.name for f in df.schema.fields if f.nullable}
    required = {f.name for f in fields if not getattr(f.type, "nullable", True)}
    for name in names:
        column = ident(name)
        if name in spec.primary_keys or (name in required and name in nullable):
            # Every input row (retractions too), in the column that is written, so the optimizer
            # cannot prune the check away.
            column = not_null(name, name in spec.primary_keys)
        first.append(f"{column} AS {ident(name)}")
    # rowkind.field naming a column the table does not have: carried to the kind, never written.
    kind_only = [spec.rowkind_field] if spec.rowkind_field and spec.rowkind_field not in names else []
    first += [ident(c) for c in kind_only]
    first += [f"{ident(k)} AS {h}" for k, h in zip(spec.partition_keys, hidden)]
    first.append(f"monotonically_increasing_id() AS {_ORDER}")
    cross = spec.cross_partition
    if cross:  # the row kind before routing: a key that moves leaves a -D row (kind 3) behind
        first.append(f"{_value_kind(spec)} AS {_KIND}")
    bases = keyed and bool(next_sequence)
    out = df.selectExpr(*first)
    if cross:  # a key's home partition and bucket from the table's keys (spark.cross_partition)
        from .cross_partition import with_cross_partition
        from ..paimon.files.datafiles import TableLayout
        arrow = TableLayout(tuple(fields), tuple(spec.partition_keys), 0).arrow_schema()
        out = with_cross_partition(out, spec, fields, arrow, hidden, dynamic, BUCKET, _KIND, _ORDER)
    if bases and hidden:  # (cross-partition: after routing, which may change a row's partition)
        out = _with_bases(out, spec, hidden, next_sequence)
    changelog = spec.changelog_producer == "input"
    # Dynamic buckets without changelog files: a row's key hash sends it to its assigner's task,
    # which merges each key's versions and then gives the survivors their buckets (one pass over
    # the input; spark.dynamic_bucket.with_assigned_bucket).
    in_task = dynamic is not None and spec.dynamic is not None and not cross and not changelog
    if in_task:
        from .dynamic_bucket import KEY_HASH, assigner_owner
        out = with_key_hash(out, list(spec.trimmed_keys), fields, KEY_HASH, not_null=True)
    elif spec.dynamic is not None and not cross:  # bucket=-1: assigned by Spark tasks through the hash index
        from .dynamic_bucket import with_dynamic_bucket
        out = with_dynamic_bucket(out, spec, fields, hidden, dynamic, BUCKET, kept)
    elif not cross:  # Primary-key tables: bucket keys are key columns, and a null key fails the write.
        out = with_bucket(out, list(spec.bucket_keys), fields, spec.num_buckets, BUCKET, not_null=keyed)
    carried = [*sqltext.columns(names), *sqltext.columns(kind_only), *hidden, KEY_HASH if in_task else BUCKET,
               *([_KIND] if cross else []), *([_BASES] if in_task and bases and hidden else [])]
    if in_task:  # assigner a's keys (and so its buckets, b % n == a) in task a
        tasks = dynamic.assigners
        owner = [f"{assigner_owner(tasks)} AS {_OWNER}"]
        distribute = lambda frame: frame.repartition(tasks, _OWNER)  # noqa: E731
    elif hidden:  # by (partition, bucket): as many pairs as the data has
        owner, distribute = [], (lambda frame: frame.repartition(*hidden, BUCKET))
    elif spec.dynamic is not None:
        # Few buckets (each holds up to target-row-num keys): bucket b to task b % tasks, the
        # buckets of assigner a (b % assigners == a) together. Hashing the bucket ids instead can
        # send buckets 0 and 1 of a small table to one task, which then writes every row.
        tasks = _write_tasks(df.sparkSession, dynamic.assigners if dynamic is not None else MAX_OPEN_FILES)
        keys_sql = ", ".join(str(k) for k in task_keys(tasks, tasks))
        owner = [f"element_at(array({keys_sql}), pmod({BUCKET}, {tasks}) + 1) AS {_OWNER}"]
        distribute = lambda frame: frame.repartition(tasks, _OWNER)  # noqa: E731
    else:  # buckets spread evenly over the write's tasks, each in one (bucket.task_keys)
        # Up to 4 tasks per core: each task sorts all versions of its buckets' keys, and one task
        # per core sorting a large write spills (10M rows into 8 buckets on 2 cores: 2 tasks
        # spilled 0.9 GB and took 1.3x as long as 8).
        tasks = _write_tasks(df.sparkSession, spec.num_buckets, per_core=4)
        keys_sql = ", ".join(str(k) for k in task_keys(spec.num_buckets, tasks))
        owner = [f"element_at(array({keys_sql}), {BUCKET} + 1) AS {_OWNER}"]
        distribute = lambda frame: frame.repartition(tasks, _OWNER)  # noqa: E731
    if not keyed:
        return distribute(out.selectExpr(*carried, *owner)).drop(_OWNER), hidden + [BUCKET], 0
    if in_task:  # the bases once the buckets are known
        out = distribute(out.selectExpr(*carried, _ORDER, *owner))
    elif bases and not hidden:  # a literal, looked up after the shuffle: nothing more to move
        out = distribute(out.selectExpr(*carried, _ORDER, *owner))
        bases_of_table = _bases_by_partition(spec, next_sequence).get((), [0] * max(spec.num_buckets, 1))
        literal = f"array({', '.join(f'CAST({b} AS BIGINT)' for b in bases_of_table)})"
        # The shuffle's own owner column (not computed again): the window below then needs no second shuffle.
        out = out.selectExpr(*carried, _ORDER, *([_OWNER] if owner else []),
                             f"CAST(coalesce(try_element_at({literal}, {BUCKET} + 1), 0) AS BIGINT) AS {_BASE}")
    else:
        # try_: a dynamic-bucket write may open buckets past the planned array (they start at 0).
        base = f"coalesce(try_element_at({_BASES}, {BUCKET} + 1), 0)" if bases else "0"
        out = distribute(out.selectExpr(*carried, _ORDER, *owner, f"CAST({base} AS BIGINT) AS {_BASE}"))

    # Unpartitioned tables: each task's rows sorted by key first, one open file per bucket
    # (Spark's concurrent writers) instead of sorted by bucket first. Spark's sort compares an
    # 8-byte prefix of the first column: with the bucket there, nearly every comparison is a tie
    # (~10% of a large upsert). A task then holds at most `bucket` distinct values, so Spark's
    # writer never falls back to sorting (which would not keep the key order).
    writers = (spec.num_buckets if not hidden and not changelog and 0 < spec.num_buckets <= MAX_OPEN_FILES
               else 0)
    keys = sqltext.columns(spec.trimmed_keys)
    # The window's groups name the shuffle's columns, so the shuffle satisfies it (no second one).
    group = [*hidden, BUCKET, *([] if hidden or not owner else [_OWNER]), *keys]
    if writers:
        group = [*keys, BUCKET, _OWNER]
    if in_task:  # the key first: the sort's 8-byte prefix then tells rows apart (the owner is one a task)
        group = [*keys, *hidden, _OWNER]
    order = [f"{ident(c)} ASC NULLS FIRST" for c in spec.sequence_fields] + [_ORDER]
    window = f"(PARTITION BY {', '.join(group)} ORDER BY {', '.join(order)})"
    merging = spec.merge_engine in ("partial-update", "aggregation")
    if (merging or spec.ignore_delete) and not cross:
        out = out.selectExpr("*", f"{_value_kind(spec)} AS {_KIND}")
    if spec.ignore_delete and spec.rowkind_field:
        # Dropped before merging, for every engine, as Paimon's writer drops them: a -D row in a
        # file would delete its key for readers that do not know the option (pypaimon).
        out = out.where(f"{_KIND} NOT IN {_RETRACT}")
    if merging:
        out = _merge_versions(out, spec, names, window)
    neighbour = "lag" if spec.merge_engine == "first-row" else "lead"
    out = out.selectExpr("*", f"{neighbour}({_ORDER}) OVER {window} IS NULL AS {_KEEP}")
    if changelog:
        # One job writes both: every input row to a changelog file, the kept (merged) rows to data
        # files; sorted by file kind then key, as each file must be.
        out = out.selectExpr("*", f"explode(CASE WHEN {_KEEP} THEN array('data', 'changelog') "
                                  f"ELSE array('changelog') END) AS {_FILE}")
        out = out.sortWithinPartitions(*hidden, BUCKET, _FILE, *spec.trimmed_keys,
                                       *[F.col(c).asc_nulls_first() for c in spec.sequence_fields], _ORDER)
    else:
        out = out.where(_KEEP)
    if in_task:
        from .dynamic_bucket import with_assigned_bucket
        out = with_assigned_bucket(out, hidden, dynamic, BUCKET)
        if bases and hidden:
            base = f"coalesce(try_element_at({_BASES}, {BUCKET} + 1), 0)"
        elif bases:
            literal = ", ".join(f"CAST({b} AS BIGINT)" for b in _bases_by_partition(spec, next_sequence).get((), [0]))
            base = f"coalesce(try_element_at(array({literal}), {BUCKET} + 1), 0)"
        else:
            base = "0"
        # Each file sorted by key: the merged rows sorted again, by partition, bucket and key.
        out = out.selectExpr("*", f"CAST({base} AS BIGINT) AS {_BASE}").sortWithinPartitions(
            *hidden, BUCKET, *spec.trimmed_keys)
    row_index = f"(monotonically_increasing_id() & {(1 << _ROW_INDEX_BITS) - 1})"
    columns = [f"{ident(k)} AS {ident(KEY_PREFIX + k)}" for k in spec.trimmed_keys]
    columns.append(f"{_BASE} + {row_index} AS {SEQUENCE}")
    raw_kind = _KIND if merging or spec.ignore_delete or cross else _value_kind(spec)
    if merging:
        # Paimon's write buffer (a reducer) keeps a key's only row as it came, kind included,
        # and merges several into one +I row.
        kind = f"CASE WHEN {_VERSIONS} = 1 THEN {_KIND} ELSE 0 END"
        values = [ident(n) if n in spec.primary_keys
                  else f"CASE WHEN {_VERSIONS} = 1 THEN {ident(n)} ELSE {ident(_MERGED + n)} END" for n in names]
    else:
        kind, values = raw_kind, [ident(n) for n in names]
    if changelog:  # changelog rows: the input row as it came
        kind = f"CASE WHEN {_FILE} = 'data' THEN {kind} ELSE {raw_kind} END"
        values = [f"CASE WHEN {_FILE} = 'data' THEN {v} ELSE {ident(n)} END" for v, n in zip(values, names)]
    columns.append(f"CAST({kind} AS TINYINT) AS {VALUE_KIND}")
    columns += [f"{v} AS {ident(n)}" for v, n in zip(values, names)] + hidden + [BUCKET]
    if changelog:
        return out.selectExpr(*columns, _FILE), hidden + [BUCKET, _FILE], 0
    return out.selectExpr(*columns), hidden + [BUCKET], writers


def _write_tasks(spark, num_buckets: int, per_core: int = 1) -> int:
    """Tasks writing an unpartitioned table: one per bucket, at most `per_core` per core of the cluster."""
    from .session import cores
    return max(1, min(num_buckets, cores(spark, default=num_buckets) * per_core))


def _merge_versions(df, spec: KeyedSpec, names, window: str):
    """Every value column merged over the versions of its key in this write, in order, as
    Paimon's merge function for partial-update / aggregation does (`_MERGED<c>`), and the
    number of versions (`_VERSIONS`)."""
    from pyspark.sql import functions as F

    whole = window[:-1] + " ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"
    retract = f"({_KIND} IN {_RETRACT})" if spec.rowkind_field else "false"
    if spec.rowkind_field and not spec.retractable:
        # Paimon fails such a merge; lakesink fails the write instead, before anything is visible.
        df = df.withColumn(_KIND, F.expr(
            f"CASE WHEN {retract} THEN raise_error({string(ERROR_PREFIX + spec.retraction_refusal())}) "
            f"ELSE {_KIND} END"))
    merged = [f"count(1) OVER {whole} AS {_VERSIONS}"]
    types = {f.name: f.dataType for f in df.schema.fields}
    for name in names:
        if name in spec.primary_keys:
            continue
        column = ident(name)
        if spec.merge_engine == "partial-update":
            value = f"last({column}, true) OVER {whole}"
        else:
            function = spec.aggregate_of(name)
            value = (_listagg(column, dict(spec.delimiters)[name], whole) if function == "listagg"
                     else _aggregate(function, column, retract, whole))
        merged.append(f"CAST({value} AS {types[name].simpleString()}) AS {ident(_MERGED + name)}")
    return df.selectExpr("*", *merged)


def _aggregate(function: str, column: str, retract: str, whole: str) -> str:
    """Paimon's aggregate function over a key's versions (Java's FieldAggregator semantics:
    nulls are skipped except by last_value/first_value; retractions as `retract()` does)."""
    if function == "sum":
        return f"sum(CASE WHEN {retract} THEN -{column} ELSE {column} END) OVER {whole}"
    if function in ("min", "max", "bool_and", "bool_or"):
        return f"{function}({column}) OVER {whole}"
    if function == "last_value":       # a retraction sets it to null
        return f"last(CASE WHEN NOT {retract} THEN {column} END) OVER {whole}"
    if function == "last_non_null_value":  # a retraction of a non-null value sets it to null
        last = (f"(last(CASE WHEN {column} IS NOT NULL THEN named_struct('r', {retract}, 'v', {column}) END, "
                f"true) OVER {whole})")
        return f"CASE WHEN NOT {last}.r THEN {last}.v END"
    if function == "first_value":
        return f"first({column}) OVER {whole}"
    if function == "first_non_null_value":
        return f"first({column}, true) OVER {whole}"
    raise AssertionError(f"no Spark merge for aggregate function {function}")


def _listagg(column: str, delimiter: str, whole: str) -> str:
    """Values joined by the delimiter in version order; null and blank values skipped (Paimon)."""
    present = f"CASE WHEN {column} RLIKE {string(chr(92) + 'S')} THEN {column} END"
    return (f"CASE WHEN count({present}) OVER {whole} > 0 "
            f"THEN concat_ws({string(delimiter)}, collect_list({present}) OVER {whole}) END")


def _value_kind(spec: KeyedSpec) -> str:
    """The row kind code of `rowkind.field`; other values fail the job (paimon.keyed.layout.row_kind_refusal's text)."""
    if spec.rowkind_field is None:
        return "CAST(0 AS TINYINT)"
    column = ident(spec.rowkind_field)
    head = f"{ERROR_PREFIX}rowkind.field {spec.rowkind_field!r} holds "
    tail = f"; row kinds are {', '.join(ROW_KINDS)}. Nothing was written."
    quote = string("'")
    error = (f"raise_error(concat({string(head)}, coalesce(concat({quote}, {column}, {quote}), 'null'), "
             f"{string(tail)}))")
    cases = " ".join(f"WHEN {column} = {string(text)} THEN {code}" for text, code in ROW_KINDS.items())
    return f"CAST(CASE {cases} ELSE {error} END AS TINYINT)"


def _bases_by_partition(spec: KeyedSpec, next_sequence: dict) -> dict[tuple, list[int]]:
    """Per partition, the first free sequence number of each bucket (0 where none)."""
    by_partition: dict[tuple, list[int]] = {}
    for (partition, bucket), base in next_sequence.items():
        bases = by_partition.setdefault(tuple(partition), [0] * max(spec.num_buckets, 0))
        if bucket >= len(bases):  # dynamic buckets: as many as the partition has
            bases.extend([0] * (bucket + 1 - len(bases)))
        bases[bucket] = base
    return by_partition


def _with_bases(df, spec: KeyedSpec, hidden, next_sequence: dict):
    """`df` with `_BASES` of a partitioned table: per bucket, the first free sequence number in
    the row's partition (an array indexed by bucket), by a broadcast join on the partition values
    (unpartitioned tables: a literal, in keyed_frame). The join sits below the bucket function on
    purpose: joined on the bucket column, Spark's optimiser spends ~1 s per plan on that long
    expression chain, which a stream pays every micro-batch.
    """
    from pyspark.sql import functions as F
    import pyarrow as pa

    by_partition = _bases_by_partition(spec, next_sequence)
    from .arrow import spark_to_arrow
    from pyspark.sql.types import StructType

    types = spark_to_arrow(StructType([df.schema[h] for h in hidden]))
    columns = {f"{h}_b": pa.array([p[i] for p in by_partition], types.field(h).type) for i, h in enumerate(hidden)}
    columns[_BASES] = pa.array(list(by_partition.values()), pa.list_(pa.int64()))
    # From Arrow, a local relation: no Python worker runs to build it.
    bases = df.sparkSession.createDataFrame(pa.table(columns))
    condition = None
    for h in hidden:
        match = df[h].eqNullSafe(bases[f"{h}_b"])
        condition = match if condition is None else condition & match
    joined = df.join(F.broadcast(bases), condition, "left")
    return joined.select(*[df[c] for c in df.columns], bases[_BASES])


