"""The fast path for primary-key and fixed-bucket tables: Spark's JVM buckets, merges and
writes key-value Parquet files; the driver describes and commits them as one snapshot.

Plan of the Spark job (one shuffle, one sort):

    input ─ order  = monotonically_increasing_id()   (input partition, then position)
          ─ bases  = next free sequence number of each bucket of the row's partition
                     (a literal array, or a broadcast join on the partition values)
          ─ bucket = Paimon's bucket function of the bucket key (spark.bucket); base = bases[bucket]
          ─ repartition(partition columns, bucket)    one task owns each bucket
          ─ window over (partition, bucket, key) ordered by (sequence.field, order):
                keep the last row (deduplicate) or the first (first-row); partial-update and
                aggregation merge the key's versions into the last row (window aggregates)
          ─ _SEQUENCE_NUMBER = base + row index in the task; _VALUE_KIND from rowkind.field
          ─ write.partitionBy(partition copies, bucket): one file per bucket, sorted by key

"Last" means: by `sequence.field` when the table has one, then by input order,
where rows of one input partition keep their order and, for the same key in
several input partitions, the higher-numbered partition's row counts as later.
The window's partitioning is satisfied by the repartition, and the write's
required ordering by the window's sort: Spark adds no shuffle or sort of its own.
"""

from __future__ import annotations

from ..errors import ConfigurationError
from ..paimon.keyed import KEY_PREFIX, RETRACT_KINDS, ROW_KINDS, SEQUENCE, VALUE_KIND, KeyedSpec, null_key_refusal
from .bucket import with_bucket

HIDDEN_PARTITION = "lakesink_partition_{}"
BUCKET = "lakesink_bucket"
_ORDER = "lakesink_order"
_BASE = "lakesink_base"
_BASES = "lakesink_bases"  # the next free sequence number of each bucket of the row's partition
_KIND = "lakesink_kind"
_VERSIONS = "lakesink_versions"
_MERGED = "lakesink_merged_"
_FILE = "lakesink_file"  # data | changelog (changelog-producer=input); its directory marks changelog files
_ROW_INDEX_BITS = 33  # monotonically_increasing_id: partition id << 33 | row index in the partition
ERROR_PREFIX = "lakesink keyed write: "


def keyed_frame(df, spec: KeyedSpec, fields, next_sequence: dict):
    """The DataFrame Spark writes, plus the names of its partitionBy columns."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    names = [f.name for f in fields]
    out = df.select(*names)
    checked = []
    for name in names:
        column = out[name]
        if name in spec.primary_keys:
            # In the column that is written, so the optimizer cannot prune the check away.
            column = F.when(column.isNull(), F.raise_error(F.lit(
                f"{ERROR_PREFIX}{null_key_refusal(name)}"))).otherwise(column)
        checked.append(column.alias(name))
    out = out.select(*checked)
    hidden = [HIDDEN_PARTITION.format(i) for i in range(len(spec.partition_keys))]
    extra = [out[k].alias(h) for k, h in zip(spec.partition_keys, hidden)]
    extra.append(F.monotonically_increasing_id().alias(_ORDER))
    out = _with_bases(out.select("*", *extra), spec, hidden, next_sequence)
    out = with_bucket(out, list(spec.bucket_keys), fields, spec.num_buckets, BUCKET)
    base = F.element_at(F.col(_BASES), F.col(BUCKET) + 1) if next_sequence else F.lit(None)
    out = out.withColumn(_BASE, F.coalesce(base, F.lit(0)).cast("bigint"))
    if next_sequence:
        out = out.drop(_BASES)
    out = out.repartition(*hidden, BUCKET)
    if not spec.has_primary_key:
        return out.select(*names, *hidden, BUCKET), hidden + [BUCKET]

    group = [*hidden, BUCKET, *spec.trimmed_keys]
    window = Window.partitionBy(*group).orderBy(*[F.col(c).asc_nulls_first() for c in spec.sequence_fields],
                                                F.col(_ORDER))
    merging = spec.merge_engine in ("partial-update", "aggregation")
    if merging or spec.ignore_delete:
        out = out.withColumn(_KIND, _value_kind(out, spec))
    if spec.ignore_delete and spec.rowkind_field:
        # Dropped before merging, for every engine, as Paimon's writer drops them: a -D row in a
        # file would delete its key for readers that do not know the option (pypaimon).
        out = out.where(~F.col(_KIND).isin(*RETRACT_KINDS))
    if merging:
        out = _merge_versions(out, spec, names, window)
    if spec.merge_engine == "first-row":
        keep = F.lag(_ORDER).over(window).isNull()
    else:
        keep = F.lead(_ORDER).over(window).isNull()
    out = out.withColumn("lakesink_keep", keep)
    changelog = spec.changelog_producer == "input"
    if changelog:
        # One job writes both: every input row to a changelog file, the kept (merged) rows to data
        # files; sorted by file kind then key, as each file must be.
        kinds = F.when(F.col("lakesink_keep"), F.array(F.lit("data"), F.lit("changelog")))
        out = out.withColumn(_FILE, F.explode(kinds.otherwise(F.array(F.lit("changelog")))))
        out = out.sortWithinPartitions(*hidden, BUCKET, _FILE, *spec.trimmed_keys,
                                       *[F.col(c).asc_nulls_first() for c in spec.sequence_fields], _ORDER)
    else:
        out = out.where("lakesink_keep")
    row_index = F.monotonically_increasing_id().bitwiseAND((1 << _ROW_INDEX_BITS) - 1)
    columns = [out[k].alias(KEY_PREFIX + k) for k in spec.trimmed_keys]
    columns.append((out[_BASE] + row_index).alias(SEQUENCE))
    raw_kind = out[_KIND] if merging or spec.ignore_delete else _value_kind(out, spec)
    if merging:
        # Paimon's write buffer (a reducer) keeps a key's only row as it came, kind included,
        # and merges several into one +I row.
        kind = F.when(F.col(_VERSIONS) == 1, out[_KIND]).otherwise(F.lit(0)).cast("tinyint")
        values = [F.when(F.col(_VERSIONS) == 1, out[n]).otherwise(out[_MERGED + n])
                  if n not in spec.primary_keys else out[n] for n in names]
    else:
        kind, values = raw_kind, [out[n] for n in names]
    if changelog:  # changelog rows: the input row as it came
        is_data = F.col(_FILE) == F.lit("data")
        kind = F.when(is_data, kind).otherwise(raw_kind).cast("tinyint")
        values = [F.when(is_data, v).otherwise(out[n]) for v, n in zip(values, names)]
    columns.append(kind.alias(VALUE_KIND))
    columns += [v.alias(n) for v, n in zip(values, names)] + [out[h] for h in hidden] + [out[BUCKET]]
    if changelog:
        return out.select(*columns, out[_FILE]), hidden + [BUCKET, _FILE]
    return out.select(*columns), hidden + [BUCKET]


def _merge_versions(df, spec: KeyedSpec, names, window):
    """Every value column merged over the versions of its key in this write, in order, as
    Paimon's merge function for partial-update / aggregation does (`_MERGED<c>`), and the
    number of versions (`_VERSIONS`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    whole = window.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    retract = F.col(_KIND).isin(*RETRACT_KINDS) if spec.rowkind_field else F.lit(False)
    if spec.rowkind_field and not spec.retractable:
        # Paimon fails such a merge; lakesink fails the write instead, before anything is visible.
        df = df.withColumn(_KIND, F.when(retract, F.raise_error(F.lit(
            f"{ERROR_PREFIX}{spec.retraction_refusal()}"))).otherwise(F.col(_KIND)))
    merged = [F.count(F.lit(1)).over(whole).alias(_VERSIONS)]
    types = {f.name: f.dataType for f in df.schema.fields}
    for name in names:
        if name in spec.primary_keys:
            continue
        column = F.col(name)
        if spec.merge_engine == "partial-update":
            value = F.last(column, ignorenulls=True).over(whole)
        else:
            function = spec.aggregate_of(name)
            value = (_listagg(column, dict(spec.delimiters)[name], whole) if function == "listagg"
                     else _aggregate(function, column, retract, whole))
        merged.append(value.cast(types[name]).alias(_MERGED + name))
    return df.select("*", *merged)


def _aggregate(function: str, column, retract, whole):
    """Paimon's aggregate function over a key's versions (Java's FieldAggregator semantics:
    nulls are skipped except by last_value/first_value; retractions as `retract()` does)."""
    from pyspark.sql import functions as F

    if function == "sum":
        return F.sum(F.when(retract, -column).otherwise(column)).over(whole)
    if function == "min":
        return F.min(column).over(whole)
    if function == "max":
        return F.max(column).over(whole)
    if function == "last_value":       # a retraction sets it to null
        return F.last(F.when(~retract, column)).over(whole)
    if function == "last_non_null_value":  # a retraction of a non-null value sets it to null
        last = F.last(F.when(column.isNotNull(), F.struct(retract.alias("r"), column.alias("v"))),
                      ignorenulls=True).over(whole)
        return F.when(~last["r"], last["v"])
    if function == "first_value":
        return F.first(column).over(whole)
    if function == "first_non_null_value":
        return F.first(column, ignorenulls=True).over(whole)
    if function == "bool_and":
        return F.bool_and(column).over(whole)
    if function == "bool_or":
        return F.bool_or(column).over(whole)
    raise AssertionError(f"no Spark merge for aggregate function {function}")


def _listagg(column, delimiter: str, whole):
    """Values joined by the delimiter in version order; null and blank values skipped (Paimon)."""
    from pyspark.sql import functions as F

    present = F.when(column.rlike(r"\S"), column)
    return F.when(F.count(present).over(whole) > 0, F.concat_ws(delimiter, F.collect_list(present).over(whole)))


def _value_kind(df, spec: KeyedSpec):
    """The row kind code of `rowkind.field`; other values fail the job (paimon.keyed.row_kind_refusal's text)."""
    from pyspark.sql import functions as F
    if spec.rowkind_field is None:
        return F.lit(0).cast("tinyint")
    column = df[spec.rowkind_field]
    kind = F.raise_error(F.concat(
        F.lit(f"{ERROR_PREFIX}rowkind.field {spec.rowkind_field!r} holds "),
        F.coalesce(F.concat(F.lit("'"), column, F.lit("'")), F.lit("null")),
        F.lit(f"; row kinds are {', '.join(ROW_KINDS)}. Nothing was written.")))
    for text, code in reversed(list(ROW_KINDS.items())):
        kind = F.when(column == F.lit(text), F.lit(code)).otherwise(kind)
    return kind.cast("tinyint")


def _with_bases(df, spec: KeyedSpec, hidden, next_sequence: dict):
    """`df` with `_BASES`: per bucket, the first free sequence number in the row's partition.

    An array indexed by bucket, a literal for unpartitioned tables and a broadcast join on the
    partition values otherwise. The join sits below the bucket function on purpose: joined on
    the bucket column, Spark's optimiser spends ~1 s per plan on that long expression chain,
    which a stream pays every micro-batch.
    """
    from pyspark.sql import functions as F
    import pyarrow as pa

    if not next_sequence:
        return df
    by_partition: dict[tuple, list[int]] = {}
    for (partition, bucket), base in next_sequence.items():
        by_partition.setdefault(tuple(partition), [0] * spec.num_buckets)[bucket] = base
    if not hidden:
        bases = by_partition.get((), [0] * spec.num_buckets)
        return df.withColumn(_BASES, F.array(*[F.lit(b).cast("bigint") for b in bases]))
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


def translate_error(exc: BaseException) -> BaseException | None:
    """A lakesink data error raised inside the Spark job, as a ConfigurationError (or None)."""
    text = str(exc)
    if ERROR_PREFIX not in text:
        return None
    message = text[text.index(ERROR_PREFIX) + len(ERROR_PREFIX):]
    end = message.find("Nothing was written.")
    message = message[: end + len("Nothing was written.")] if end >= 0 else message.splitlines()[0]
    return ConfigurationError(message)
