"""The changelog a compaction produces: Paimon's `lookup` and `full-compaction` producers.

Both compare, key by key, a *before* and an *after* version and write what a
downstream stream must apply to go from one to the other:

* no live before, a live after: `+I` after;
* a live before, no live after (deleted): `-D` before;
* both live: `-U` before then `+U` after (skipped when the values are equal and
  `changelog-producer.row-deduplicate` is set).

A version is live when its row kind is `+I` or `+U`. What before and after are
depends on the producer (`paimon.compaction.lsm.compact_bucket` picks them):

* `lookup` (Paimon's LookupChangelogMergeFunctionWrapper): for every key with a
  level-0 row in the compaction, before is its merged value over all levels
  above 0 (in the compaction or looked up outside it), after its merged value
  over everything. `first-row` tables emit `+I` for new keys only.
* `full-compaction` (FullChangelogMergeFunctionWrapper): in a full compaction,
  for every key with a row below the highest level, before is its row at the
  highest level (the state the last full compaction left), after its merged value.

Engine-neutral pyarrow; rows are in the key-value layout (`_KEY_*`,
`_SEQUENCE_NUMBER`, `_VALUE_KIND`, value columns), one row per key on each side.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..keyed.layout import VALUE_KIND

INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3
_SIDE = "_lakesink_side"      # 0: a before row, 1: an after row (its order inside a key)


def changes(before: pa.Table, after: pa.Table, keys: list[str], values: list[str], *,
            row_deduplicate: bool = False, inserts_only: bool = False) -> pa.Table:
    """The changelog rows from `before` to `after` (same schema), sorted by key, `-U` before `+U`.

    `after` holds every key of interest (one row each); `before` a row for the keys that had
    one. `inserts_only`: only `+I` for keys without a live before (first-row tables)."""
    if after.num_rows == 0:
        return after.slice(0, 0)
    # Join on the keys and row positions only (any value type can ride along), then take.
    left = pa.table([after.column(k) for k in keys] + [pa.array(range(after.num_rows), pa.int64())],
                    names=keys + ["_a"])
    right = pa.table([before.column(k) for k in keys] + [pa.array(range(before.num_rows), pa.int64())],
                     names=keys + ["_b"])
    joined = left.join(right, keys, join_type="left outer").sort_by("_a")
    now = after.take(joined.column("_a"))
    then = before.take(joined.column("_b"))  # null rows where a key had no before
    before_live = _live(then.column(VALUE_KIND))
    after_live = _live(now.column(VALUE_KIND))
    inserts = pc.and_(pc.invert(before_live), after_live)
    parts = [_as(now.filter(inserts), INSERT, 1)]
    if not inserts_only:
        deletes = pc.and_(before_live, pc.invert(after_live))
        updates = pc.and_(before_live, after_live)
        if row_deduplicate:
            updates = pc.and_(updates, pc.invert(_equal_values(then, now, values)))
        parts += [_as(then.filter(deletes), DELETE, 0), _as(then.filter(updates), UPDATE_BEFORE, 0),
                  _as(now.filter(updates), UPDATE_AFTER, 1)]
    out = pa.concat_tables(parts)
    out = out.take(pc.sort_indices(out, sort_keys=[(k, "ascending") for k in keys] + [(_SIDE, "ascending")]))
    return out.drop_columns([_SIDE])


def _live(kinds) -> pa.ChunkedArray:
    """+I / +U (nulls, i.e. no row, are not live)."""
    return pc.fill_null(pc.is_in(kinds, pa.array([INSERT, UPDATE_AFTER], pa.int8())), False)


def _as(rows: pa.Table, kind: int, side: int) -> pa.Table:
    """`rows` with row kind `kind`, marked with their place inside a key (before rows first)."""
    i = rows.schema.get_field_index(VALUE_KIND)
    rows = rows.set_column(i, rows.schema.field(i), pa.array([kind] * rows.num_rows, pa.int8()))
    return rows.append_column(_SIDE, pa.array([side] * rows.num_rows, pa.int8()))


def _equal_values(then: pa.Table, now: pa.Table, values: list[str]):
    """Rows whose value columns are equal on both sides (null equals null)."""
    same = pa.array([True] * now.num_rows)
    for name in values:
        a, b = then.column(name), now.column(name)
        try:
            eq = pc.equal(a, b)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):  # nested: as Python
            eq = pa.array([x == y for x, y in zip(a.to_pylist(), b.to_pylist())])
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        same = pc.and_(same, pc.or_(pc.fill_null(eq, False), both_null))
    return same
