"""The one filter model: column predicates from SQL text, tuples or Spark's pushed filters.

A `Filter` is `column op value`; `Not(filter)` negates one. Every source of
filters becomes a list of them (a conjunction): `parse_sql` reads the simple
conjuncts of a Spark SQL condition, `from_tuples` the Python API's
`(column, op, value)` tuples, and the Spark binding converts Spark's pushed
filters. Every consumer reads the same list: `paimon.read.scan.to_predicate` turns
them into pypaimon predicates that prune files, `mask` evaluates them on Arrow
batches with SQL's null semantics.

Ops: `= != < <= > >= in not_in is_null is_not_null` (prune and evaluate),
`eq_null_safe` (`<=>`), `starts_with ends_with contains` (evaluate only).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import ConfigurationError

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
OPS = COMPARISONS + ("in", "not_in", "is_null", "is_not_null", "eq_null_safe", "starts_with", "ends_with",
                     "contains")


@dataclass(frozen=True)
class Filter:
    """One column predicate: `column op value`."""

    column: str
    op: str
    value: object = None


@dataclass(frozen=True)
class Not:
    child: Filter | Not


Term = Filter | Not


def from_tuples(items) -> list[Filter]:
    """`(column, op, value)` tuples (or Filters) as Filters; ops checked."""
    if isinstance(items, (Filter, tuple)):
        items = [items]
    if not isinstance(items, Iterable) or isinstance(items, (str, bytes)):
        raise ConfigurationError(
            f"filter={items!r}: expected a Spark SQL condition string or a list of (column, op, value) tuples.")
    out = []
    for item in items:
        f = item if isinstance(item, Filter) else Filter(*item)
        op = _SQL_OPS.get(f.op, f.op) if isinstance(f.op, str) else f.op
        if op not in OPS:
            raise ConfigurationError(
                f"Filter op {f.op!r} is unknown; use one of = != < <= > >= in not_in is_null is_not_null.")
        out.append(Filter(f.column, op, f.value))
    return out


# ---------------------------------------------------------------- SQL text

_SQL_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_IDENT = r"(?:`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*))"
_LITERAL = r"(?:'(?:[^']|'')*'|DATE\s*'[^']*'|-?\d+(?:\.\d+)?|TRUE|FALSE)"
_COMPARE = re.compile(rf"^\s*{_IDENT}\s*(==|=|!=|<>|<=|>=|<|>)\s*({_LITERAL})\s*$", re.I)
_IN = re.compile(rf"^\s*{_IDENT}\s+(NOT\s+)?IN\s*\(\s*({_LITERAL}(?:\s*,\s*{_LITERAL})*)\s*\)\s*$", re.I)
_NULL = re.compile(rf"^\s*{_IDENT}\s+IS\s+(NOT\s+)?NULL\s*$", re.I)


def parse_sql(condition: str) -> list[Filter]:
    """The `column op literal` conjuncts of a SQL condition it recognises.

    Whatever it does not recognise is simply left out: callers apply the whole
    condition to the rows anyway, so these only prune.
    """
    out = []
    for part in _split_and(condition):
        if match := _COMPARE.match(part):
            out.append(Filter(match.group(1) or match.group(2), _SQL_OPS[match.group(3)], _literal(match.group(4))))
        elif match := _IN.match(part):
            values = [_literal(v) for v in re.findall(_LITERAL, match.group(4), re.I)]
            out.append(Filter(match.group(1) or match.group(2), "not_in" if match.group(3) else "in", values))
        elif match := _NULL.match(part):
            out.append(Filter(match.group(1) or match.group(2), "is_not_null" if match.group(3) else "is_null"))
    return out


def _split_and(condition: str) -> list[str]:
    """Top-level AND-separated parts (not inside quotes or parentheses); [] if an OR is on top."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    text = condition
    while i < len(text):
        ch = text[i]
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        elif not quoted and depth == 0 and re.match(r"\s(AND|OR)\s", text[i:i + 5], re.I):
            word = text[i + 1:i + 4].upper().strip()
            if word == "OR":
                return []
            parts.append(text[start:i])
            start = i + 4
            i += 4
            continue
        i += 1
    parts.append(text[start:])
    return parts


def _literal(text: str):
    upper = text.strip().upper()
    if upper in ("TRUE", "FALSE"):
        return upper == "TRUE"
    if upper.startswith("DATE"):
        return dt.date.fromisoformat(text.strip()[4:].strip().strip("'"))
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    return float(text) if "." in text else int(text)


# ---------------------------------------------------------------- exactness and pruning

def exact_value(value, arrow_type) -> bool:
    """True when pyarrow compares `value` with a column of `arrow_type` exactly as Spark does."""
    import pyarrow as pa

    if value is None:
        return False
    if pa.types.is_integer(arrow_type):
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        try:
            pa.scalar(value, arrow_type)
        except (pa.ArrowInvalid, OverflowError):
            return False
        return True
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return isinstance(value, str)  # both compare UTF-8 bytes (Spark's default collation)
    if pa.types.is_boolean(arrow_type):
        return isinstance(value, bool)
    if pa.types.is_date32(arrow_type):
        return isinstance(value, dt.date) and not isinstance(value, dt.datetime)
    return False  # floats (NaN ordering differs), timestamps (time zones), decimals, nested


def prunable(terms: Sequence[Term]) -> list[Filter]:
    """The terms that can prune files by partition values and min/max statistics."""
    out = []
    for term in terms:
        if isinstance(term, Filter) and term.op in COMPARISONS + ("in", "not_in", "is_null", "is_not_null"):
            out.append(term)
        elif isinstance(term, Filter) and term.op == "eq_null_safe" and term.value is not None:
            out.append(Filter(term.column, "=", term.value))
    return out  # NOT and string patterns: evaluated on rows only


# ---------------------------------------------------------------- Arrow evaluation

def mask(terms: Sequence[Term], batch):
    """Boolean mask of the conjunction of `terms` over an Arrow batch (null = not selected)."""
    import pyarrow.compute as pc

    result = None
    for term in terms:
        one = _mask(term, batch)
        result = one if result is None else pc.and_kleene(result, one)
    return result


def _mask(term: Term, batch):
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(term, Not):
        return pc.invert(_mask(term.child, batch))
    column = batch.column(batch.schema.get_field_index(term.column))
    op = term.op
    if op in COMPARISONS:
        scalar = pa.scalar(term.value, column.type)
        return {"=": pc.equal, "!=": pc.not_equal, ">": pc.greater, ">=": pc.greater_equal, "<": pc.less,
                "<=": pc.less_equal}[op](column, scalar)
    if op == "eq_null_safe":
        if term.value is None:
            return pc.is_null(column)
        return pc.fill_null(pc.equal(column, pa.scalar(term.value, column.type)), False)
    if op in ("in", "not_in"):
        found = pc.is_in(column, value_set=pa.array(list(term.value), column.type))  # null input → null
        return found if op == "in" else pc.invert(found)
    if op in ("is_null", "is_not_null"):
        return pc.is_null(column) if op == "is_null" else pc.is_valid(column)
    fn = {"starts_with": pc.starts_with, "ends_with": pc.ends_with, "contains": pc.match_substring}[op]
    return fn(column, pattern=term.value)
