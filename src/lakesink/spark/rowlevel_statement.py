"""A row-level statement (`lakesink.delete`, `update`, `merge`) before it commits: the table it
changes, the target rows it reads, and the checks of its SQL text.

`open_statement` resolves the table and refuses the kinds row-level changes do not cover;
`read_target` reads the target's rows with each row's identity (`ROW`; in append tables the
file it comes from, `FILE`), pruned by the statement's condition. Conditions and expressions
are Spark SQL text, checked by Spark's analysis before any job runs (`analysed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import filters
from ..errors import ConfigurationError, LakesinkError, SchemaMismatchError, UnsupportedTableError
from .. import options as registry
from .sqltext import ident

PATH_NAME = "lakesink row-level change"
KIND = "lakesink_rowkind"  # the row kind column of a keyed change (read as the kind, never stored)
FILE = "lakesink_file"      # append tables: the data file a target row comes from
ROW = "lakesink_row"        # a target row's identity: struct(file, row index) or struct(primary key)
_FILE_ROW = "STRUCT<file: STRING, row: BIGINT>"
POSITION = "lakesink_position"  # append tables with deletion vectors: a target row's index in its file
TARGET_SEEN = "lakesink_in_target"
SOURCE_SEEN = "lakesink_in_source"


@dataclass
class Statement:
    """One row-level statement against one table: where it is, what kind, its identity."""

    spark: object
    path: str
    fs_options: dict
    table: object
    keyed: bool
    commit_user: str | None
    identifier: int | None
    snapshot: object = None  # the snapshot the statement reads (set when planned)
    branch: str | None = None  # a Paimon branch (None: main): its snapshots are read and committed to
    candidates: dict = field(default_factory=dict)  # append tables: file name -> (partition, bucket, meta)

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.table.table_schema.fields]

    @property
    def tracks(self) -> bool:
        """`row-tracking.enabled` (append tables only: Paimon refuses it with a primary key)."""
        from ..paimon.files.lineage import tracks_rows
        return not self.keyed and tracks_rows(self.table.table_schema.options)

    @property
    def marks_rows(self) -> bool:
        """An append table with `deletion-vectors.enabled`: changed rows are marked, not rewritten."""
        return not self.keyed and bool(self.table.options.deletion_vectors_enabled())

    @property
    def carried(self) -> list[str]:
        """What a rewritten row of an append table carries: the table's columns, and in a
        row-tracking table its lineage and the file it comes from (its runs of ids)."""
        from .lineage import COLUMNS
        return [ident(c) for c in self.columns] + ([*COLUMNS, FILE] if self.tracks else [])

    @property
    def kind_column(self) -> str:
        """The column a keyed change carries each row's kind in: the table's `rowkind.field`, so a
        column the table stores holds the changes' kinds as it holds those of the table's other rows
        (for readers that do not know the option), else `KIND` (read as the kind, never stored)."""
        return str(self.table.table_schema.options.get("rowkind.field") or KIND) if self.keyed else KIND

    @property
    def key_columns(self) -> set[str]:
        """Columns an update must not change: primary key and partition columns."""
        return set(self.table.primary_keys or ()) | set(self.table.partition_keys or ())


def open_statement(spark, name: str, commit_user, commit_identifier, what: str,
                   branch: str | None = None) -> Statement:
    """Resolve the table as every entry point does and check that `what` can change it. On a
    branch (`branch`, or a name `<table>$branch_<name>` as Paimon's SQL names one): the branch's
    schema and snapshots."""
    from ..paimon.catalog.names import with_branch
    from ..paimon.table import branches, tables
    from .catalog import resolve_for

    if (commit_user is None) != (commit_identifier is None):
        raise ConfigurationError(f"{what}: commit_user and commit_identifier go together (a stable user and an "
                                 "increasing number, e.g. a stream's batch id), or neither. Nothing was changed.")
    name, branch = with_branch(name, branch, what)
    branch = None if branches.is_main(branch) else branch
    resolved = resolve_for(spark, name, "read")
    fs_options = registry.storage_options(resolved.with_fs_options(None) or {})
    table = tables.open_table(resolved.path, fs_options or None)
    if table is None:
        raise ConfigurationError(f"{what}: no Paimon table at {resolved.path}. Nothing was changed.",
                                 table=resolved.path)
    if branch is not None:
        branches.check_writable(resolved.path, table, branch)
        table = branches.open_branch(table, branch)
    keyed = bool(table.primary_keys)
    buckets = int(table.total_buckets or -1)
    options = dict(table.table_schema.options)
    if keyed:
        if buckets < 1 and buckets != -1:  # -1: dynamic buckets, assigned through the hash index
            raise UnsupportedTableError(
                f"{what}: {resolved.path} is a primary-key table with bucket={buckets} (postpone buckets): "
                "its latest rows may still wait unbucketed for compaction, where lakesink's row-level changes "
                "cannot find them; row-level changes need a fixed or dynamic bucket count. Write the changes "
                "as rows with rowkind.field (-D deletes a key) instead. Nothing was changed.",
                table=resolved.path, option="bucket")
        engine = str(options.get("merge-engine", "deduplicate")).strip().lower()
        if engine != "deduplicate":
            raise UnsupportedTableError(
                f"{what}: {resolved.path} has merge-engine={engine}; row-level changes of primary-key tables "
                "need merge-engine=deduplicate (an update or delete must replace the key's row, which other "
                "engines merge instead). Nothing was changed.", table=resolved.path, option="merge-engine")
        from ..paimon.keyed.rules import _IGNORE_DELETE_KEYS
        if any(str(options.get(k, "")).strip().lower() == "true" for k in _IGNORE_DELETE_KEYS):
            raise UnsupportedTableError(
                f"{what}: {resolved.path} has ignore-delete=true: its deletes would be dropped. Nothing was "
                "changed.", table=resolved.path, option="ignore-delete")
    elif buckets > 0:
        raise UnsupportedTableError(
            f"{what}: {resolved.path} is a fixed-bucket append table (bucket={buckets}); lakesink's row-level "
            "changes cover primary-key tables and unaware-bucket append tables (bucket=-1). Nothing was changed.",
            table=resolved.path)
    return Statement(spark, resolved.path, fs_options, table, keyed, commit_user, commit_identifier, branch=branch)


# ---------------------------------------------------------------- reading the target

def read_target(stmt: Statement, condition: str | None = None, snapshot_id: int | None = None,
                conjuncts: list | None = None, narrow=None):
    """The target's rows at `snapshot_id` (default: latest) as a DataFrame, with `ROW` (and, for
    append tables, `FILE`); only the files `condition`'s simple conjuncts and `conjuncts` may
    match (append tables: the candidates, which `stmt.candidates` lists by file name; keyed
    tables: files are pruned by partition and key only, as pypaimon's scan does, so a newer
    version of a row is never left out). Rows outside them may remain: callers apply the
    whole condition to the rows. Keyed tables: `narrow` as in keyed_read.read_merged (by
    default, the versions `condition` holds for)."""
    from pyspark.sql import functions as F

    from ..paimon.read import scan
    from .reader import spark_schema

    table = stmt.table
    manager = table.snapshot_manager()
    snapshot = manager.get_snapshot_by_id(snapshot_id) if snapshot_id else manager.get_latest_snapshot()
    stmt.snapshot = snapshot
    schema = spark_schema(table)
    conjuncts = [*(filters.parse_sql(condition) if condition else []), *(conjuncts or [])]
    if stmt.keyed:  # Spark resolves names case-insensitively; pruning takes exact names only
        conjuncts = [c for c in conjuncts if c.column in stmt.columns]
    elif stmt.tracks:  # _ROW_ID, _SEQUENCE_NUMBER: no statistics to prune by
        from .lineage import COLUMNS
        conjuncts = [c for c in conjuncts if c.column not in COLUMNS]
    planned = scan.plan_snapshot(table, snapshot, scan.to_predicate(table, conjuncts))
    if stmt.keyed:
        from . import keyed_read
        if snapshot is None:
            df = stmt.spark.createDataFrame([], schema)
        elif not keyed_read.blockers(table, planned):
            # Spark merges the key-value files itself and reads only the columns the plan uses.
            if narrow is None and condition:
                narrow = lambda versions: versions.where(condition)  # noqa: E731
            df = keyed_read.read_merged(stmt.spark, table, planned, schema, narrow=narrow)
        else:
            from .read import read
            df = read(stmt.spark, stmt.path, snapshot=snapshot.id, options=stmt.fs_options or None,
                      branch=stmt.branch)
        keys = [ident(k) for k in table.primary_keys]
        return df.selectExpr("*", f"struct({', '.join(keys)}) AS {ROW}")
    blockers = scan.fast_path_blockers(table, planned)
    if blockers:
        raise UnsupportedTableError(
            f"{PATH_NAME}: the files of {stmt.path} cannot be rewritten by Spark's Parquet reader and writer "
            f"({'; '.join(blockers)}). Nothing was changed.", table=stmt.path)
    stmt.candidates = {}
    for split in planned.splits:
        for f in split.files:
            stmt.candidates[f.file_name] = (tuple(split.partition.values), split.bucket, f)
    if not stmt.candidates:
        df = stmt.spark.createDataFrame([], schema)
        from .lineage import COLUMNS
        tracked = [f"CAST(NULL AS BIGINT) AS {c}" for c in COLUMNS] if stmt.tracks else []
        marked = [f"CAST(NULL AS BIGINT) AS {POSITION}"] if stmt.marks_rows else []
        return df.selectExpr("*", *tracked, f"CAST(NULL AS STRING) AS {FILE}", f"CAST(NULL AS {_FILE_ROW}) AS {ROW}",
                             *marked)
    identity = [F.col("_metadata.file_name").alias(FILE),
                F.struct(F.col("_metadata.file_name").alias("file"), F.col("_metadata.row_index").alias("row")).alias(ROW)]
    if stmt.tracks:
        from . import lineage
        df = stmt.spark.read.schema(lineage.read_schema(schema)).parquet(*planned.file_paths())
        files = {name: meta for name, (_, _, meta) in stmt.candidates.items()}
        return df.select(*[F.col(ident(c)) for c in stmt.columns], *lineage.columns(files), *identity)
    if stmt.marks_rows:  # rows marked deleted already are not the table's
        from . import deleted_rows
        df = deleted_rows.read_files(stmt.spark, schema, planned, positions=True)
        name, position = F.col(deleted_rows.FILE_NAME), F.col(deleted_rows.POSITION)
        return df.select(*[F.col(ident(c)) for c in stmt.columns], name.alias(FILE),
                         F.struct(name.alias("file"), position.cast("bigint").alias("row")).alias(ROW),
                         position.alias(POSITION))
    df = stmt.spark.read.schema(schema).parquet(*planned.file_paths())
    return df.select("*", *identity)


def target_shape(stmt: Statement):
    """A keyed target's columns (and `ROW`) without its rows: what the SQL text is checked against
    before the write is planned and the target read."""
    from .reader import spark_schema

    keys = [ident(k) for k in stmt.table.primary_keys]
    return stmt.spark.createDataFrame([], spark_schema(stmt.table)).selectExpr(
        "*", f"struct({', '.join(keys)}) AS {ROW}")


# ---------------------------------------------------------------- checking SQL text

def analysed(what: str, build):
    """`build()` (which plans a DataFrame from the user's SQL text), its Spark analysis errors
    as a ConfigurationError naming them (nothing is written before every text is checked)."""
    try:
        return build()
    except LakesinkError:
        raise
    except Exception as exc:  # noqa: BLE001 - AnalysisException, ParseException (pyspark.errors)
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigurationError(f"{what}: {first} Nothing was changed.") from None
        raise


def check_assignment(column: str, expression: str, source_type, target_type) -> None:
    """Refuse an assignment whose value cannot be stored in the column (Spark's ANSI store
    assignment: numbers into numbers, dates into timestamps, equal types otherwise)."""
    from pyspark.sql import types as T

    if source_type == target_type or isinstance(source_type, T.NullType):
        return
    numeric = (T.NumericType,)
    if isinstance(source_type, numeric) and isinstance(target_type, numeric):
        return
    times = (T.DateType, T.TimestampType, T.TimestampNTZType)
    if isinstance(source_type, times) and isinstance(target_type, times):
        return
    if isinstance(source_type, T.StringType) and isinstance(target_type, T.StringType):
        return
    raise SchemaMismatchError(
        f"{PATH_NAME}: {expression!r} is {source_type.simpleString()}, which column {column!r} "
        f"({target_type.simpleString()}) cannot hold. Cast it in the expression. Nothing was changed.")


def check_columns(stmt: Statement, assignments: dict, keyed_refusal: bool = True) -> None:
    """Assigned columns exist; a keyed table's key and partition columns are not updated (an
    append table's rows are rewritten whole: a new partition value moves the row)."""
    unknown = [c for c in assignments if c not in stmt.columns]
    if unknown:
        raise ConfigurationError(f"{PATH_NAME}: column(s) {unknown} are not in {stmt.path} (columns: "
                                 f"{stmt.columns}). Nothing was changed.", table=stmt.path)
    if stmt.keyed and stmt.kind_column in assignments:
        raise ConfigurationError(
            f"{PATH_NAME}: cannot set column {stmt.kind_column!r} of {stmt.path}: it is the table's rowkind.field, "
            "which a row-level change sets itself (+U for updated rows, -D for deleted ones, +I for inserted "
            "ones). Leave it out of the assignments. Nothing was changed.", table=stmt.path)
    if keyed_refusal:
        fixed = sorted(set(assignments) & stmt.key_columns)
        if fixed and stmt.keyed:
            raise ConfigurationError(
                f"{PATH_NAME}: cannot update primary-key or partition column(s) {fixed} of {stmt.path}: a "
                "row's key decides where it lives. Delete the row and insert the new one. Nothing was changed.",
                table=stmt.path)


def cast_to(expression: str, spark_type) -> str:
    return f"CAST({expression} AS {spark_type.simpleString()})"


def true_of(condition: str | None) -> str:
    """A condition as SQL that is true, never null (null counts as not matching, as in SQL)."""
    return "true" if condition is None else f"coalesce(({condition}), false)"
