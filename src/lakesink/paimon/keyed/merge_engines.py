"""How the versions of one key merge: Paimon's merge engines, on Arrow tables.

Merge order, as Paimon's readers merge: by key, then `sequence.field` (nulls
first), then `_SEQUENCE_NUMBER`; equal versions by file age (higher levels are
older than lower ones, level-0 files by sequence range). `deduplicate` keeps
the last version, `first-row` the first; `partial-update` and `aggregation` merge
the versions of a key with several into one +I row (`merge_field`), a key's only
version stays as it is (Paimon's reducer); a surviving `-U`/`-D` removes the key;
with `ignore-delete` retractions are ignored before merging. Used by compaction
(`paimon.compaction.lsm`) and by writers merging their buffer into a sorted run (`merge_run`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ...errors import UnsupportedTableError
from .layout import KEY_PREFIX, RETRACT_KINDS, SEQUENCE, VALUE_KIND, KeyedSpec
from .lsm_policy import LsmOptions

FILE_RANK = "_lakesink_file_rank"  # the column holding each row's file age (oldest lowest)


def merge(data: pa.Table, spec: KeyedSpec, lsm: LsmOptions, drop_deletes: bool = True,
          key_determined: tuple[str, ...] = ()) -> pa.Table:
    """The surviving version of every key, sorted by key; retractions dropped with `drop_deletes`
    (output at the bucket's highest non-empty level), else kept to cancel older versions below.

    `data` holds the rows of all files of one bucket with a `_lakesink_file_rank` column (file
    age, oldest lowest); the result has the columns of `data` but that one. `key_determined`:
    further columns that are the same in every version of a key (a writer's bucket column), kept
    from the version that survives, never merged as values.
    """
    retract = pc.is_in(data.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))
    if lsm.ignore_delete:
        data = data.filter(pc.invert(retract))
    elif lsm.merge_engine == "first-row" and pc.any(retract).as_py():
        raise UnsupportedTableError(
            "a first-row table holds retractions (-U/-D), which merge-engine=first-row cannot merge; "
            "set ignore-delete=true on the table to ignore them, as Paimon asks.")
    keys = [KEY_PREFIX + k for k in spec.trimmed_keys]
    order = ([(k, "ascending") for k in keys] + [(c, "ascending") for c in spec.sequence_fields]
             + [(SEQUENCE, "ascending"), (FILE_RANK, "ascending")])
    data = data.take(pc.sort_indices(data, sort_keys=order, null_placement="at_start"))
    n = data.num_rows
    if n > 1:
        same = None  # same[i]: row i has the key of row i + 1
        for k in keys:
            column = data.column(k)
            eq = pc.equal(column.slice(0, n - 1), column.slice(1))
            same = eq if same is None else pc.and_(same, eq)
        differs = pc.invert(same)
        if lsm.merge_engine == "first-row":   # the first version of each key
            keep = pa.concat_arrays([pa.array([True])] + differs.chunks)
        elif lsm.merge_engine in ("partial-update", "aggregation"):
            data = _merge_versions(data, spec, differs, [*keys, *key_determined])
            keep = None
        else:                                   # deduplicate: the last
            keep = pa.concat_arrays(differs.chunks + [pa.array([True])])
        if keep is not None:
            data = data.filter(keep)
    if drop_deletes:
        data = data.filter(pc.invert(pc.is_in(data.column(VALUE_KIND), pa.array(RETRACT_KINDS, pa.int8()))))
    return data.drop_columns([FILE_RANK])


def _merge_versions(data: pa.Table, spec: KeyedSpec, differs: pa.ChunkedArray, keys: list) -> pa.Table:
    """partial-update / aggregation: a key's only version kept as it is (Paimon's reducer), the
    versions of a key with several merged into one +I row (the last version's key and sequence
    number), in order; `data` is sorted by key and version. Sorted by key on return."""
    last = pa.concat_arrays(differs.chunks + [pa.array([True])])
    first = pa.concat_arrays([pa.array([True])] + differs.chunks)
    single = pc.and_(first, last)
    if pc.all(single).as_py():
        return data
    singles = data.filter(single)
    several = data.filter(pc.invert(single))
    ends = pc.indices_nonzero(pc.filter(last, pc.invert(single))).to_pylist()
    values = [c for c in several.column_names
              if c not in keys and c not in (SEQUENCE, VALUE_KIND, FILE_RANK) and c not in spec.primary_keys]
    kinds = several.column(VALUE_KIND).to_pylist()
    columns = {c: several.column(c).to_pylist() for c in values}
    merged = {c: [] for c in values}
    start = 0
    for end in ends:
        retracts = [kinds[i] in RETRACT_KINDS for i in range(start, end + 1)]
        for c in values:
            merged[c].append(merge_field(spec, c, columns[c][start:end + 1], retracts))
        start = end + 1
    picked = several.take(pa.array(ends, pa.int64()))
    for c in values:
        picked = picked.set_column(picked.schema.get_field_index(c), picked.schema.field(c),
                                   pa.array(merged[c], picked.schema.field(c).type))
    picked = picked.set_column(picked.schema.get_field_index(VALUE_KIND), picked.schema.field(VALUE_KIND),
                               pa.array([0] * picked.num_rows, pa.int8()))
    out = pa.concat_tables([singles, picked])
    return out.take(pc.sort_indices(out, sort_keys=[(k, "ascending") for k in keys]))


def merge_run(rows: pa.Table, spec: KeyedSpec, lsm: LsmOptions, drop_deletes: bool = False,
              key_determined: tuple[str, ...] = ()) -> pa.Table:
    """`merge` of the rows of one sorted run in the making (a writer's buffer): one file rank."""
    return merge(rows.append_column(FILE_RANK, pa.repeat(pa.scalar(0, pa.int32()), rows.num_rows)), spec, lsm,
                 drop_deletes, key_determined)


def merge_field(spec: KeyedSpec, column: str, versions: list, retracts: list):
    """One value column over a key's versions, oldest first: Paimon's partial-update (last non-null)
    or the column's aggregate function (Java's FieldAggregator agg/retract)."""
    if spec.merge_engine == "partial-update":
        if any(retracts):
            raise UnsupportedTableError(
                "a partial-update table holds a retraction (-U/-D) of a key with several versions; "
                "merge-engine=partial-update cannot merge it (Paimon refuses it too).")
        out = None
        for v in versions:
            if v is not None:
                out = v
        return out
    function = spec.aggregate_of(column)
    delimiter = dict(spec.delimiters).get(column, ",")
    acc, started = None, False
    for v, retract in zip(versions, retracts):
        if retract:
            if function == "sum":
                acc = acc if v is None else (-v if acc is None else acc - v)
            elif function == "last_value":
                acc = None
            elif function == "last_non_null_value":
                acc = acc if v is None else None
            else:
                raise UnsupportedTableError(
                    f"the aggregate function {function} of column {column} cannot retract a -U/-D row "
                    "(as in Paimon); set ignore-delete=true on the table to drop retractions.")
            continue
        if function == "sum":
            acc = v if acc is None else (acc if v is None else acc + v)
        elif function == "min":
            acc = v if acc is None else (acc if v is None else min(acc, v))
        elif function == "max":
            acc = v if acc is None else (acc if v is None else max(acc, v))
        elif function == "last_value":
            acc = v
        elif function == "last_non_null_value":
            acc = acc if v is None else v
        elif function == "first_value":
            acc, started = (v, True) if not started else (acc, True)
        elif function == "first_non_null_value":
            acc = v if acc is None else acc
        elif function == "bool_and":
            acc = v if acc is None else (acc if v is None else (acc and v))
        elif function == "bool_or":
            acc = v if acc is None else (acc if v is None else (acc or v))
        elif function == "listagg":  # null and blank values skipped, as Paimon
            if v is not None and v.strip():
                acc = v if acc is None else acc + delimiter + v
        else:
            raise UnsupportedTableError(f"lakesink does not merge the aggregate function {function}.")
    return acc
