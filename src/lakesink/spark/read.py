"""Reading Paimon tables into Spark: the fast path (`lakesink.read`) and streams (`lakesink.read_stream`).

`read` plans on the driver with pypaimon (snapshot → manifests → data files,
pruned by partition values and min/max statistics) and, where the files are
plain Parquet holding exactly the table's rows (append tables, current schema),
hands them to `spark.read.parquet`: Spark's JVM reads the bytes, with its own
column pruning and row-group filtering. Partition columns are stored inside
Paimon's data files, so Spark's partition discovery is not used and the schema
is given explicitly; rows an append table's deletion vectors mark are left out
(`spark.deleted_rows`). Other tables (primary-key tables merge on read, files of an
older schema, ...) are read through pypaimon's reader on the
Spark-native path, so the result is always that of pypaimon's read of the same
snapshot.
"""

from __future__ import annotations

import logging

from .. import filters
from .. import options as registry
from ..errors import ConfigurationError
from ..paimon.read import scan
from ..filters import Filter
from ..paimon.files.lineage import COLUMNS as LINEAGE
from .catalog import resolve_for
from .session import FORMAT, activate

log = logging.getLogger(__name__)


def read(spark, path: str, *, snapshot: int | None = None, tag: str | None = None, timestamp=None,
         filter=None, options: dict | None = None, branch: str | None = None, columns=None):
    """A DataFrame of the table at `path` (latest snapshot, or the given snapshot / tag / time).

    `columns`: only these, in this order; a row-tracking table also has `_ROW_ID` and
    `_SEQUENCE_NUMBER` (`filter` may use them too).

    `filter` is a Spark SQL condition (`"dt = '2024-05-01' AND id > 10"`) or a list of
    `(column, op, value)` tuples (ops `= != < <= > >= in not_in is_null is_not_null`).
    Its simple conjuncts prune files; the whole condition is always applied to the rows.
    `options`: storage options and read options (docs/options.md), Delta's names too:
    `{"versionAsOf": 3}`, `{"timestampAsOf": "2024-05-01T00:00:00+00:00"}`.

    >>> df = lakesink.read(spark, "/data/wh/db.db/orders", filter="dt = '2024-05-01'")   # doctest: +SKIP
    >>> lakesink.read(spark, "/data/wh/db.db/orders", snapshot=42).count()             # doctest: +SKIP
    """
    from .reader import spark_schema

    snapshot, tag, timestamp = _time_travel(options, snapshot, tag, timestamp)
    path, branch = _branch(path, options, branch, "lakesink.read")
    resolved = resolve_for(spark, path)  # a path, or a name through the session's catalog
    path = resolved.path
    fs_options = registry.storage_options(resolved.with_fs_options(options))
    table = scan.open_for_read(path, fs_options or None, branch)
    resolved = scan.resolve_snapshot(table, snapshot=snapshot, tag=tag, timestamp=timestamp)
    schema = spark_schema(table)
    condition, conjuncts = _filter_parts(filter)
    system = _system_columns(table, columns, conjuncts, path)
    conjuncts = [c for c in conjuncts if c.column not in LINEAGE]  # stats are the table columns'
    planned = scan.plan_snapshot(table, resolved, scan.to_predicate(table, conjuncts))
    blockers = scan.fast_path_blockers(table, planned)
    if blockers:
        log.info("lakesink.read(%s) reads through pypaimon: %s", path, "; ".join(blockers))
        df = _native(spark, table.table_path, resolved, {**fs_options, **system}, pushdown=bool(conjuncts),
                     branch=branch)
    elif not planned.splits:
        if system:
            from .reader import with_system_columns
            from ..paimon.table.tables import arrow_schema
            schema = spark_schema(table, with_system_columns(table, arrow_schema(table)))
        df = spark.createDataFrame([], schema)  # (no sparkContext: works on Spark Connect too)
    elif system:
        from . import lineage
        files = {f.file_name: f for split in planned.splits for f in split.files}
        df = spark.read.schema(lineage.read_schema(schema)).parquet(*planned.file_paths())
        df = df.select(*[df[f"`{f.name}`"] for f in schema.fields], *lineage.columns(files))
    else:  # (rows an append table's deletion vectors mark are left out)
        from .deleted_rows import read_files
        df = read_files(spark, schema, planned)
    df = df.filter(condition) if condition is not None else df
    return df.select(*[f"`{c}`" for c in columns]) if columns is not None else df


def _system_columns(table, columns, conjuncts, path: str) -> dict:
    """The read option that adds the row-tracking columns when `columns` or the filter name them
    (empty: not needed); unknown columns are an error naming the table's."""
    if columns is None:
        wanted = set()
    else:
        if isinstance(columns, str) or not columns:
            raise ConfigurationError(f"lakesink.read({path}): columns={columns!r}: give a list of column names.")
        names = [f.name for f in table.fields]
        unknown = [c for c in columns if c not in names and c not in LINEAGE]
        if unknown:
            raise ConfigurationError(f"lakesink.read({path}): column(s) {unknown} are not in the table (columns: "
                                     f"{names}; row-tracking tables also have {list(LINEAGE)}). Nothing was read.",
                                     table=path)
        wanted = set(columns) & set(LINEAGE)
    wanted |= {c.column for c in conjuncts if c.column in LINEAGE}
    if not wanted:
        return {}
    from .reader import with_system_columns
    with_system_columns(table, [])  # only row-tracking tables have them: a clear error otherwise
    return {"read.system-columns": "true"}


def plan(path: str, *, snapshot: int | None = None, tag: str | None = None, timestamp=None,
         filter=None, options: dict | None = None) -> scan.PlannedScan:
    """What `read` would read, without Spark: the snapshot and its pruned splits (files)."""
    snapshot, tag, timestamp = _time_travel(options, snapshot, tag, timestamp)
    table = scan.open_for_read(path, registry.storage_options(options or {}) or None)
    resolved = scan.resolve_snapshot(table, snapshot=snapshot, tag=tag, timestamp=timestamp)
    _, conjuncts = _filter_parts(filter)
    return scan.plan_snapshot(table, resolved, scan.to_predicate(table, conjuncts))


def _branch(path: str, options: dict | None, branch: str | None, what: str) -> tuple[str, str | None]:
    """(the table, the branch to read: None for main) of the argument, the option `branch` (not
    both) or a name's `$branch_<b>` suffix, as Paimon's SQL names a branch."""
    from ..paimon.catalog.names import with_branch
    from ..paimon.table.branches import is_main

    given = registry.parse({k: v for k, v in (options or {}).items() if str(k).lower() == "branch"},
                           ("read",)).get("branch")
    if given is not None and branch is not None:
        raise ConfigurationError("branch= and option branch both given: give one.", option="branch")
    path, branch = with_branch(path, branch if branch is not None else given, what)
    return path, None if is_main(branch) else branch


def _time_travel(options: dict | None, snapshot, tag, timestamp):
    """Snapshot, tag and time from the arguments and the read options (`scan.snapshot-id` /
    `versionAsOf`, `scan.tag-name`, `scan.timestamp-millis` / `timestampAsOf`); storage options
    pass, anything else is an error naming it. Giving one both ways is an error too."""
    opts = registry.parse(options or {}, ("read",))
    given = {"snapshot": ("scan.snapshot-id", snapshot), "tag": ("scan.tag-name", tag),
             "timestamp": ("scan.timestamp-millis", timestamp)}
    out = {}
    for argument, (key, value) in given.items():
        if key in opts and value is not None:
            raise ConfigurationError(f"{argument}= and option {key} (or its alias) both given: give one.")
        out[argument] = value if value is not None else opts.get(key)
    return out["snapshot"], out["tag"], out["timestamp"]


_PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def _native(spark, path: str, snapshot, fs_options: dict, pushdown: bool = False, branch: str | None = None):
    activate(spark)  # callers may be in a thread of their own
    reader = spark.read.format(FORMAT).options(**fs_options)
    if branch is not None:
        reader = reader.option("branch", branch)
    if pushdown:
        # The reader prunes files only by the filters Spark pushes into it (on object stores and
        # for keyed tables the only pruning there is), and Spark pushes none without this conf.
        # Set once and left set, as the timestamp type: concurrent reads share the session conf.
        if spark.conf.get(_PUSHDOWN, "false") != "true":
            spark.conf.set(_PUSHDOWN, "true")
        reader = reader.option("filter-pushdown", "true")
    if snapshot is not None:
        reader = reader.option("scan.snapshot-id", str(snapshot.id))
    return reader.load(path)


def read_stream(spark, path: str, *, consumer_id: str | None = None, starting="latest-full",
                read_overwrite: bool = False, max_rows_per_trigger: int | None = None,
                options: dict | None = None, changelog: bool | None = None, branch: str | None = None):
    """A streaming DataFrame of the rows each new snapshot of the table (of `branch`, given one) adds.

    A primary-key table streams its changelog: a first column `rowkind` (+I, -U, +U, -D) then
    the table's columns (`changelog=True` asks the same of an append table: every row +I).

    `starting`: "latest-full" (the current rows, then new ones; default, as Paimon and
    Delta start), "latest" (only rows committed after the query starts), "earliest"
    (everything still retained), a
    snapshot id (its rows and later ones), or a datetime / ISO string (rows of
    snapshots committed after it). A restarted query continues from its checkpoint;
    a new query with the same `consumer_id` continues where that consumer stopped.
    `max_rows_per_trigger` caps a micro-batch at whole snapshots holding up to that
    many added rows (a larger snapshot is read alone).

    `branch` (or the option `branch`): follow that branch's snapshots instead of main's
    (docs/branches.md); its consumers are the branch's own.

    >>> sdf = lakesink.read_stream(spark, "/data/wh/db.db/bronze", consumer_id="silver")   # doctest: +SKIP
    """
    path, branch = _branch(path, options, branch, "lakesink.read_stream")
    options = {k: v for k, v in (options or {}).items() if str(k).lower() != "branch"}
    resolved = resolve_for(spark, path)  # checked now, not when the query plans its first batch
    path = resolved.path
    options = resolved.with_fs_options(options)
    _check_stream_types(spark, path, options, branch)  # (a missing branch fails here, before the query)
    activate(spark)
    reader = spark.readStream.format(FORMAT)
    for key, value in stream_options(starting, consumer_id, read_overwrite).items():
        reader = reader.option(key, value)
    if max_rows_per_trigger is not None:
        reader = reader.option("read.stream.maxRowsPerTrigger", str(max_rows_per_trigger))
    if branch is not None:
        reader = reader.option("branch", branch)
    if changelog is None:
        from ..paimon.table.tables import open_table
        table = open_table(path, registry.storage_options(options or {}) or None, branch)
        changelog = table is not None and table.is_primary_key_table
    if changelog:
        reader = reader.option("read.readChangeLog", "true")
    for key, value in (options or {}).items():
        reader = reader.option(key, str(value))
    return reader.load(str(path))


def _check_stream_types(spark, path: str, options: dict | None, branch: str | None = None) -> None:
    """Spark's streaming engine refuses TIME columns unless spark.sql.timeType.enabled is on
    (batch reads take them either way): say so before the query starts, naming the columns."""
    from ..errors import UnsupportedTypeError

    table = scan.open_for_read(path, registry.storage_options(options or {}) or None, branch)
    timed = [f"{f.name} ({t})" for f in table.fields
             if (t := str(getattr(f.type, "type", f.type))).upper().startswith("TIME")
             and not t.upper().startswith("TIMESTAMP")]
    if timed and str(spark.conf.get("spark.sql.timeType.enabled", "false")).lower() != "true":
        raise UnsupportedTypeError(
            f"Table {path}: column(s) {', '.join(timed)} are Paimon TIME columns, which Spark streams only "
            "with spark.sql.timeType.enabled=true; set it on the session (spark.conf.set(...)) or select "
            "other columns with a batch read. Nothing was read.", table=path)


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


# ---------------------------------------------------------------- filters

def _filter_parts(filter) -> tuple[object, list[Filter]]:
    """(condition to apply in Spark, simple conjuncts for pruning)."""
    if filter is None:
        return None, []
    if isinstance(filter, str):
        return filter, filters.parse_sql(filter)
    items = filters.from_tuples(filter)
    return _condition(items), items


def _condition(items: list[Filter]):
    """The conjunction of `items` as a Spark Column."""
    from pyspark.sql import functions as F

    condition = None
    for item in items:
        column = F.col(f"`{item.column}`")
        op = item.op
        if op in filters.COMPARISONS:
            term = {"=": column.__eq__, "!=": column.__ne__, "<": column.__lt__, "<=": column.__le__,
                    ">": column.__gt__, ">=": column.__ge__}[op](F.lit(item.value))
        elif op == "in":
            term = column.isin(list(item.value))
        elif op == "not_in":
            term = ~column.isin(list(item.value))
        elif op == "is_null":
            term = column.isNull()
        elif op == "is_not_null":
            term = column.isNotNull()
        elif op == "eq_null_safe":
            term = column.eqNullSafe(F.lit(item.value))
        else:
            term = {"starts_with": column.startswith, "ends_with": column.endswith,
                    "contains": column.contains}[op](item.value)
        condition = term if condition is None else condition & term
    return condition
