"""Reading Paimon tables into Spark: the fast path (`lakesink.read`) and streams (`lakesink.read_stream`).

`read` plans on the driver with pypaimon (snapshot → manifests → data files,
pruned by partition values and min/max statistics) and, where the files are
plain Parquet holding exactly the table's rows (append tables, current schema),
hands them to `spark.read.parquet`: Spark's JVM reads the bytes, with its own
column pruning and row-group filtering. Partition columns are stored inside
Paimon's data files, so Spark's partition discovery is not used and the schema
is given explicitly. Other tables (primary-key tables merge on read, files of an
older schema, deletion vectors, ...) are read through pypaimon's reader on the
Spark-native path, so the result is always that of pypaimon's read of the same
snapshot.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from ..errors import ConfigurationError
from ..paimon import scan
from ..paimon.scan import Filter
from .session import activate

log = logging.getLogger(__name__)


def read(spark, path: str, *, snapshot: int | None = None, tag: str | None = None, timestamp=None,
         filter=None):
    """A DataFrame of the table at `path` (latest snapshot, or the given snapshot / tag / time).

    `filter` is a Spark SQL condition (`"dt = '2024-05-01' AND id > 10"`) or a list of
    `(column, op, value)` tuples (ops `= != < <= > >= in not_in is_null is_not_null`).
    Its simple conjuncts prune files; the whole condition is always applied to the rows.

    >>> df = lakesink.read(spark, "/data/wh/db.db/orders", filter="dt = '2024-05-01'")   # doctest: +SKIP
    >>> lakesink.read(spark, "/data/wh/db.db/orders", snapshot=42).count()             # doctest: +SKIP
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    from ..paimon.tables import arrow_schema

    table = scan.open_for_read(path)
    resolved = scan.resolve_snapshot(table, snapshot=snapshot, tag=tag, timestamp=timestamp)
    schema = from_arrow_schema(arrow_schema(table))
    condition, filters = _filter_parts(filter)
    planned = scan.plan_snapshot(table, resolved, scan.to_predicate(table, filters))
    blockers = scan.fast_path_blockers(table, planned)
    if blockers:
        log.info("lakesink.read(%s) reads through pypaimon: %s", path, "; ".join(blockers))
        df = _native(spark, table.table_path, resolved)
    elif not planned.splits:
        df = spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)
    else:
        df = spark.read.schema(schema).parquet(*planned.file_paths())
    return df.filter(condition) if condition is not None else df


def plan(path: str, *, snapshot: int | None = None, tag: str | None = None, timestamp=None,
         filter=None) -> scan.PlannedScan:
    """What `read` would read, without Spark: the snapshot and its pruned splits (files)."""
    table = scan.open_for_read(path)
    resolved = scan.resolve_snapshot(table, snapshot=snapshot, tag=tag, timestamp=timestamp)
    _, filters = _filter_parts(filter)
    return scan.plan_snapshot(table, resolved, scan.to_predicate(table, filters))


def _native(spark, path: str, snapshot):
    activate(spark)  # callers may be in a thread of their own
    reader = spark.read.format("paimon")
    if snapshot is not None:
        reader = reader.option("scan.snapshot-id", str(snapshot.id))
    return reader.load(path)


def read_stream(spark, path: str, *, consumer_id: str | None = None, starting="latest",
                read_overwrite: bool = False, max_rows_per_trigger: int | None = None):
    """A streaming DataFrame of the rows each new snapshot of the table adds.

    `starting`: "latest" (rows committed after the query starts; default), "earliest"
    (everything still retained), "latest-full" (the current rows, then new ones), a
    snapshot id (its rows and later ones), or a datetime / ISO string (rows of
    snapshots committed after it). A restarted query continues from its checkpoint;
    a new query with the same `consumer_id` continues where that consumer stopped.
    `max_rows_per_trigger` caps a micro-batch at whole snapshots holding up to that
    many added rows (a larger snapshot is read alone).

    >>> sdf = lakesink.read_stream(spark, "/data/wh/db.db/bronze", consumer_id="silver")   # doctest: +SKIP
    """
    activate(spark)
    reader = spark.readStream.format("paimon")
    for key, value in stream_options(starting, consumer_id, read_overwrite).items():
        reader = reader.option(key, value)
    if max_rows_per_trigger is not None:
        reader = reader.option("read.stream.maxRowsPerTrigger", str(max_rows_per_trigger))
    return reader.load(str(path))


def stream_options(starting, consumer_id: str | None = None, read_overwrite: bool = False) -> dict:
    import datetime as dt

    if isinstance(starting, bool):
        raise ConfigurationError(f"starting={starting!r}: expected 'latest', 'earliest', 'latest-full', "
                                 "a snapshot id or a timestamp.")
    if isinstance(starting, int):
        options = {"scan.mode": "from-snapshot", "scan.snapshot-id": str(starting)}
    elif isinstance(starting, dt.datetime):
        options = {"scan.mode": "from-timestamp", "scan.timestamp-millis": str(scan.to_millis(starting))}
    elif isinstance(starting, str) and starting.strip().lower() in ("latest", "earliest", "latest-full"):
        options = {"scan.mode": starting.strip().lower()}
    elif isinstance(starting, str):
        options = {"scan.mode": "from-timestamp", "scan.timestamp-millis": str(scan.to_millis(starting))}
    else:
        raise ConfigurationError(f"starting={starting!r}: expected 'latest', 'earliest', 'latest-full', "
                                 "a snapshot id or a timestamp.")
    if consumer_id is not None:
        options["consumer-id"] = consumer_id
    if read_overwrite:
        options["streaming-read-overwrite"] = "true"
    return options


# ---------------------------------------------------------------- filter → pruning terms

def _filter_parts(filter) -> tuple[object, list[Filter]]:
    """(condition to apply in Spark, simple conjuncts for pruning)."""
    if filter is None:
        return None, []
    if isinstance(filter, str):
        return filter, parse_conjuncts(filter)
    items = [Filter(*item) if not isinstance(item, Filter) else item for item in _as_list(filter)]
    return _condition(items), items


def _as_list(filter) -> list:
    if isinstance(filter, (Filter, tuple)):
        return [filter]
    if isinstance(filter, Iterable):
        return list(filter)
    raise ConfigurationError(
        f"filter={filter!r}: expected a Spark SQL condition string or a list of (column, op, value) tuples.")


_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _condition(items: list[Filter]):
    from pyspark.sql import functions as F

    condition = None
    for item in items:
        column = F.col(f"`{item.column}`")
        op = item.op.lower() if isinstance(item.op, str) else item.op
        if op in _OPS:
            term = {"=": column.__eq__, "!=": column.__ne__, "<": column.__lt__, "<=": column.__le__,
                    ">": column.__gt__, ">=": column.__ge__}[_OPS[op]](F.lit(item.value))
        elif op == "in":
            term = column.isin(list(item.value))
        elif op == "not_in":
            term = ~column.isin(list(item.value))
        elif op == "is_null":
            term = column.isNull()
        elif op == "is_not_null":
            term = column.isNotNull()
        else:
            raise ConfigurationError(
                f"Filter op {item.op!r} is unknown; use one of = != < <= > >= in not_in is_null is_not_null.")
        condition = term if condition is None else condition & term
    return condition


# A small reader of `column op literal` conjuncts. Whatever it does not
# recognise simply does not prune: Spark still applies the full condition.
_IDENT = r"(?:`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*))"
_LITERAL = r"(?:'(?:[^']|'')*'|DATE\s*'[^']*'|-?\d+(?:\.\d+)?|TRUE|FALSE)"
_COMPARE = re.compile(rf"^\s*{_IDENT}\s*(==|=|!=|<>|<=|>=|<|>)\s*({_LITERAL})\s*$", re.I)
_IN = re.compile(rf"^\s*{_IDENT}\s+(NOT\s+)?IN\s*\(\s*({_LITERAL}(?:\s*,\s*{_LITERAL})*)\s*\)\s*$", re.I)
_NULL = re.compile(rf"^\s*{_IDENT}\s+IS\s+(NOT\s+)?NULL\s*$", re.I)


def parse_conjuncts(condition: str) -> list[Filter]:
    out = []
    for part in _split_and(condition):
        if match := _COMPARE.match(part):
            out.append(Filter(match.group(1) or match.group(2), _OPS[match.group(3)], _literal(match.group(4))))
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
    import datetime as dt

    upper = text.strip().upper()
    if upper in ("TRUE", "FALSE"):
        return upper == "TRUE"
    if upper.startswith("DATE"):
        return dt.date.fromisoformat(text.strip()[4:].strip().strip("'"))
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    return float(text) if "." in text else int(text)
