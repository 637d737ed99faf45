"""Row-level changes: `lakesink.delete`, `lakesink.update` (and the plumbing `spark.merge` shares).

Conditions and expressions are Spark SQL text, evaluated by Spark. One statement is
one snapshot, tagged with the commit identity when one is given (a replay of an
identity that landed changes nothing). The plan depends on the table kind:

* primary-key tables with fixed buckets (merge-engine deduplicate): the change is
  rows with a row kind (`+U` updates, `+I` inserts, `-D` deletes) written through
  the keyed write path (spark.keyed): no file is rewritten. The target is read at
  the snapshot the write's sequence numbers are planned on, so a commit by another
  writer in the same buckets since then is a conflict, never a lost update; Spark
  merges its files itself where it can (spark.keyed_read: only the columns used),
  pruned by partition and key.
* unaware-bucket append tables: copy-on-write. Files are pruned by partition and
  min/max statistics, the ones holding affected rows are found by a Spark job,
  only those are rewritten, and one OVERWRITE snapshot swaps them
  (paimon.rowlevel_target), guarded by Paimon's file-deletion conflict check.
  In a row-tracking table the rewritten rows keep their `_ROW_ID` (updated rows get the
  statement's `_SEQUENCE_NUMBER`, inserted rows new ids at commit; spark.lineage).
* append tables with `deletion-vectors.enabled`: no file is rewritten. Rows already marked
  deleted are left out of the target (spark.deleted_rows); the rows a statement deletes or
  updates are marked in their files' deletion vectors, updated rows' new versions and inserted
  rows are written as new files, one OVERWRITE snapshot holds both (paimon.rowlevel_target).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import filters
from ..errors import ConfigurationError, LakesinkError, SchemaMismatchError, UnsupportedTableError
from .. import options as registry
from ..options import WriteOptions
from ..protocol import CommitReport
from .sqltext import ident, string

PATH_NAME = "lakesink row-level change"
KIND = "lakesink_rowkind"  # the row kind column of a keyed change (read as the kind, never stored)
FILE = "lakesink_file"      # append tables: the data file a target row comes from
ROW = "lakesink_row"        # a target row's identity: (file, row index) or the primary key
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


def open_statement(spark, name: str, commit_user, commit_identifier, what: str) -> Statement:
    """Resolve the table as every entry point does and check that `what` can change it."""
    from ..paimon.table import tables
    from .catalog import resolve_for

    if (commit_user is None) != (commit_identifier is None):
        raise ConfigurationError(f"{what}: commit_user and commit_identifier go together (a stable user and an "
                                 "increasing number, e.g. a stream's batch id), or neither. Nothing was changed.")
    resolved = resolve_for(spark, name, "read")
    fs_options = registry.storage_options(resolved.with_fs_options(None) or {})
    table = tables.open_table(resolved.path, fs_options or None)
    if table is None:
        raise ConfigurationError(f"{what}: no Paimon table at {resolved.path}. Nothing was changed.",
                                 table=resolved.path)
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
        from ..paimon.keyed.layout import _IGNORE_DELETE_KEYS
        if any(str(options.get(k, "")).strip().lower() == "true" for k in _IGNORE_DELETE_KEYS):
            raise UnsupportedTableError(
                f"{what}: {resolved.path} has ignore-delete=true: its deletes would be dropped. Nothing was "
                "changed.", table=resolved.path, option="ignore-delete")
    elif buckets > 0:
        raise UnsupportedTableError(
            f"{what}: {resolved.path} is a fixed-bucket append table (bucket={buckets}); lakesink's row-level "
            "changes cover primary-key tables and unaware-bucket append tables (bucket=-1). Nothing was changed.",
            table=resolved.path)
    return Statement(spark, resolved.path, fs_options, table, keyed, commit_user, commit_identifier)


# ---------------------------------------------------------------- reading the target

def read_target(stmt: Statement, condition: str | None = None, snapshot_id: int | None = None,
                conjuncts: list | None = None):
    """The target's rows at `snapshot_id` (default: latest) as a DataFrame, with `ROW` (and, for
    append tables, `FILE`); only the files `condition`'s simple conjuncts and `conjuncts` may
    match (append tables: the candidates, which `stmt.candidates` lists by file name; keyed
    tables: files are pruned by partition and key only, as pypaimon's scan does, so a newer
    version of a row is never left out). Rows outside them may remain: callers apply the
    whole condition to the rows."""
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
            df = keyed_read.read_merged(stmt.spark, table, planned, schema)
        else:
            from .read import read
            df = read(stmt.spark, stmt.path, snapshot=snapshot.id, options=stmt.fs_options or None)
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
        return df.selectExpr("*", *tracked, f"CAST(NULL AS STRING) AS {FILE}", f"CAST(NULL AS STRING) AS {ROW}",
                             *marked)
    identity = [F.col("_metadata.file_name").alias(FILE),
                F.concat_ws("#", F.col("_metadata.file_name"), F.col("_metadata.row_index").cast("string")).alias(ROW)]
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
                         F.concat_ws("#", name, position.cast("string")).alias(ROW), position.alias(POSITION))
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


# ---------------------------------------------------------------- committing

def identity_options(stmt: Statement) -> dict:
    out = dict(stmt.fs_options)
    if stmt.commit_user is not None:
        out["commit.user"] = stmt.commit_user
        out["commit.identifier"] = stmt.identifier
    return out


def report_properties(counts: dict) -> dict[str, str]:
    return {f"lakesink.rows-{k}": str(counts.get(k, 0)) for k in ("inserted", "updated", "deleted")}


def finish(report: CommitReport, counts: dict) -> CommitReport:
    report.rows_inserted = counts.get("inserted", 0)
    report.rows_updated = counts.get("updated", 0)
    report.rows_deleted = counts.get("deleted", 0)
    return report


def commit_keyed(stmt: Statement, build_changes, condition: str | None = None,
                 conjuncts: list | None = None) -> CommitReport:
    """Plan the keyed write, read the target at its base snapshot (its files pruned by
    `condition` and `conjuncts`, as read_target), write `build_changes(target)` (table columns +
    `KIND`) as key-value files, commit one snapshot."""
    from ..paimon.write.keyed_plan import prepare_keyed_target
    from ..paimon.write.batch import BatchWrite
    from .arrow import spark_to_arrow
    from .checks import translate_error
    from .keyed_write import write_keyed_files
    from .output import check_spark_can_write
    from .reader import spark_schema
    from pyspark.sql import types as T

    check_spark_can_write(stmt.spark, stmt.path, PATH_NAME)
    kind = stmt.kind_column  # a column of the table (its rowkind.field), or one carried to the kind
    stored = kind in stmt.columns
    carried = [] if stored else [T.StructField(kind, T.StringType())]
    schema = T.StructType([*spark_schema(stmt.table).fields, *carried])
    arrow_schema = spark_to_arrow(schema)
    opts = WriteOptions.parse({**identity_options(stmt), **({"rowkind.field": KIND} if kind == KIND else {})})
    target, layout, spec, next_sequence = prepare_keyed_target(stmt.path, arrow_schema, opts)
    job = BatchWrite.plan(stmt.path, arrow_schema, opts, "append", PATH_NAME, None,
                          prepare=lambda *_: (target, layout))
    if job.already_committed():
        return CommitReport(job.commit_user, job.identifier, skipped_replay=True)
    base = target.bucket_check_from or None  # the snapshot the sequence numbers continue from
    changes = build_changes(read_target(stmt, condition, snapshot_id=base, conjuncts=conjuncts))
    written = [f"{KIND} AS {ident(c)}" if c == kind else ident(c) for c in stmt.columns]
    changes = changes.selectExpr(*written, *([] if stored else [f"{KIND} AS {ident(kind)}"])).persist()
    files = []
    try:
        counts = count_kinds(changes, kind)
        if not any(counts.values()):
            job.remove_staging()
            return finish(CommitReport(job.commit_user, job.identifier), counts)
        files = write_keyed_files(changes, job.target, layout, spec, next_sequence, job.staging_dir,
                                  job.compression)
    except BaseException as exc:
        job.abort(files)
        translated = translate_error(exc)
        if translated is not None:
            raise translated from None
        raise failed_in_spark(exc) from exc
    finally:
        changes.unpersist()
    return finish(job.commit(files, report_properties(counts)), counts)


def count_kinds(changes, kind: str = KIND) -> dict:
    names = {"+I": "inserted", "+U": "updated", "-D": "deleted"}
    counts = {"inserted": 0, "updated": 0, "deleted": 0}
    for row in changes.groupBy(ident(kind)).count().collect():
        counts[names[row[0]]] += row[1]
    return counts


def commit_rewrite(stmt: Statement, rewritten, touched: list[str], counts: dict) -> CommitReport:
    """Append tables: write `rewritten` (the new contents of the `touched` files, and inserted rows;
    `stmt.carried` columns) and commit one snapshot removing the touched files."""
    from ..paimon.files.datafiles import StagedFile
    from ..paimon.commit.rowlevel_target import RowLevelTarget
    from .fastpath import write_staged
    from .output import check_spark_can_write, list_parquet_files

    check_spark_can_write(stmt.spark, stmt.path, PATH_NAME)
    removed = [StagedFile(*stmt.candidates[name], None) for name in touched]
    target = RowLevelTarget(stmt.path, removed, fs_options=stmt.fs_options or None)
    job = _statement_job(stmt, target)
    done = _without_files(job, touched, counts)
    if done is not None:
        return done
    files = []
    try:
        if stmt.tracks:
            from ..paimon.files.lineage import describe_rewritten
            from .lineage import with_runs
            write_staged(with_runs(rewritten, [FILE], list(stmt.table.partition_keys)), job, lineage=True)
            files = job.describe_staged(list_parquet_files(job.staging_dir, job.target.fs_options))
            files = describe_rewritten(files, job.target.file_io)
        else:
            write_staged(rewritten, job)
            files = job.describe_staged(list_parquet_files(job.staging_dir, job.target.fs_options))
    except BaseException as exc:
        job.abort(files)
        raise failed_in_spark(exc) from exc
    return finish(job.commit(files, report_properties(counts)), counts)


def _statement_job(stmt: Statement, target):
    """The batch job committing a statement's one snapshot through `target` (no aggregation:
    the snapshot is the statement's whole effect)."""
    from ..paimon.files.datafiles import TableLayout
    from ..paimon.write.batch import BatchWrite
    from .arrow import spark_to_arrow
    from .reader import spark_schema

    opts = WriteOptions.parse(identity_options(stmt))
    target.maintenance = opts.maintenance
    layout = TableLayout.of(stmt.table)
    job = BatchWrite.plan(stmt.path, spark_to_arrow(spark_schema(stmt.table)), opts, "append", PATH_NAME, None,
                          prepare=lambda *_: (target, layout))
    job.aggregate = False
    return job


def _without_files(job, changed, counts: dict) -> CommitReport | None:
    """The report of a statement that writes no file: a replay of a committed one, or one that
    changes nothing (`changed` empty, nothing inserted); None otherwise."""
    if job.already_committed():
        return CommitReport(job.commit_user, job.identifier, skipped_replay=True)
    if not changed and not counts.get("inserted"):
        job.remove_staging()
        return finish(CommitReport(job.commit_user, job.identifier), counts)
    return None


def commit_marks(stmt: Statement, marked, added, counts: dict) -> CommitReport:
    """Append tables with deletion vectors: mark the target rows of `marked` (`FILE`, `POSITION`)
    deleted in their files' deletion vectors, write `added` (new versions of updated rows and
    inserted rows, the table's columns; None: none) as new files, commit one snapshot."""
    from pyspark.sql import functions as F

    from ..paimon.files.datafiles import StagedFile
    from ..paimon.commit.rowlevel_target import RowLevelTarget
    from .fastpath import write_staged
    from .output import check_spark_can_write, list_parquet_files

    check_spark_can_write(stmt.spark, stmt.path, PATH_NAME)
    positions = {r[0]: r[1] for r in marked.where(f"{FILE} IS NOT NULL").groupBy(FILE)
                 .agg(F.collect_set(POSITION)).collect()}
    target = RowLevelTarget(stmt.path, fs_options=stmt.fs_options or None, base=stmt.snapshot,
                            marked={name: (StagedFile(*stmt.candidates[name], None), sorted(p))
                                    for name, p in positions.items()})
    job = _statement_job(stmt, target)
    done = _without_files(job, positions, counts)
    if done is not None:
        return done
    files = []
    try:
        if added is not None:
            write_staged(added.select(*[ident(c) for c in stmt.columns]), job)
            files = job.describe_staged(list_parquet_files(job.staging_dir, job.target.fs_options))
    except BaseException as exc:
        job.abort(files)
        raise failed_in_spark(exc) from exc
    return finish(job.commit(files, report_properties(counts)), counts)


def _lineage_of_updated(stmt: Statement, condition: str) -> list[str]:
    """A row-tracking table's rewritten rows keep their `_ROW_ID`; an updated row's
    `_SEQUENCE_NUMBER` is null, so the commit's snapshot becomes it (as Paimon's UPDATE)."""
    if not stmt.tracks:
        return []
    from .lineage import ROW_ID, SEQUENCE_NUMBER
    return [ROW_ID, f"CASE WHEN {condition} THEN CAST(NULL AS BIGINT) ELSE {SEQUENCE_NUMBER} END AS {SEQUENCE_NUMBER}",
            FILE]


def already_committed(stmt: Statement) -> CommitReport | None:
    """A replayed statement (its identity landed): the report to return before any Spark work."""
    if stmt.commit_user is None:
        return None
    from ..paimon.commit.target import PaimonTarget
    from ..protocol import Committer
    target = PaimonTarget(stmt.path, fs_options=stmt.fs_options or None)
    if Committer(target, stmt.commit_user).skips_as_replay(stmt.identifier, stmt.path):
        return CommitReport(stmt.commit_user, stmt.identifier, skipped_replay=True)
    return None


def failed_in_spark(exc: BaseException) -> BaseException:
    """A Spark job of the statement failed (a cast overflow, a bad value): a LakesinkError."""
    if isinstance(exc, LakesinkError) or not type(exc).__module__.startswith(("pyspark", "py4j")):
        return exc
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return ConfigurationError(f"{PATH_NAME} failed in Spark: {lines[0] if lines else type(exc).__name__} "
                              "Nothing was changed.")


# ---------------------------------------------------------------- delete / update

def delete(spark, name: str, where: str | None = None, *, commit_user: str | None = None,
           commit_identifier: int | None = None) -> CommitReport:
    stmt = open_statement(spark, name, commit_user, commit_identifier, "lakesink.delete")
    replay = already_committed(stmt)
    if replay is not None:
        return replay
    condition = true_of(where)
    if stmt.keyed:
        def changes(target):
            return analysed("lakesink.delete where", lambda: target.where(condition).selectExpr(
                "*", f"'-D' AS {KIND}"))
        analysed("lakesink.delete where", lambda: target_shape(stmt).where(condition).schema)
        return commit_keyed(stmt, changes, where)
    target = read_target(stmt, where)
    matched = analysed("lakesink.delete where", lambda: target.where(condition))
    if stmt.marks_rows:
        matched = matched.select(FILE, POSITION).persist()
        try:
            return commit_marks(stmt, matched, None, {"deleted": matched.count()})
        finally:
            matched.unpersist()
    per_file = {r[0]: r[1] for r in matched.groupBy(FILE).count().collect()}
    counts = {"deleted": sum(per_file.values())}
    touched = sorted(per_file)
    kept = target.where(f"{FILE} IN ({', '.join(string(t) for t in touched) or 'NULL'})").where(f"NOT {condition}")
    return commit_rewrite(stmt, kept.select(*stmt.carried), touched, counts)


def update(spark, name: str, set: dict, where: str | None = None, *, commit_user: str | None = None,
           commit_identifier: int | None = None) -> CommitReport:
    if not set:
        raise ConfigurationError("lakesink.update: `set` names no column ({'column': 'SQL expression'}). "
                                 "Nothing was changed.")
    stmt = open_statement(spark, name, commit_user, commit_identifier, "lakesink.update")
    assignments = {str(k): str(v) for k, v in set.items()}
    check_columns(stmt, assignments)
    replay = already_committed(stmt)
    if replay is not None:
        return replay
    condition = true_of(where)
    from .reader import spark_schema
    types = {f.name: f.dataType for f in spark_schema(stmt.table).fields}

    def new_row(frame):
        checked = analysed("lakesink.update set", lambda: frame.selectExpr(
            *[f"({e}) AS {ident(c)}" for c, e in assignments.items()]))
        for f in checked.schema.fields:
            check_assignment(f.name, assignments[f.name], f.dataType, types[f.name])
        return [cast_to(f"({assignments[c]})", types[c]) + f" AS {ident(c)}" if c in assignments
                else ident(c) for c in stmt.columns]

    if stmt.keyed:
        def changes(target):
            matched = analysed("lakesink.update where", lambda: target.where(condition))
            return matched.selectExpr(*new_row(matched), f"'+U' AS {KIND}")
        probe = target_shape(stmt)
        analysed("lakesink.update where", lambda: probe.where(condition).schema)
        new_row(probe)
        return commit_keyed(stmt, changes, where)
    target = read_target(stmt, where)
    matched = analysed("lakesink.update where", lambda: target.where(condition))
    new_row(target)  # checks the assignments before any job runs
    if stmt.marks_rows:  # the old versions marked deleted, the new ones added
        matched = matched.persist()
        try:
            counts = {"updated": matched.count()}
            return commit_marks(stmt, matched, matched.selectExpr(*new_row(matched)), counts)
        finally:
            matched.unpersist()
    per_file = {r[0]: r[1] for r in matched.groupBy(FILE).count().collect()}
    counts = {"updated": sum(per_file.values())}
    touched = sorted(per_file)
    in_touched = target.where(f"{FILE} IN ({', '.join(string(t) for t in touched) or 'NULL'})")
    # Every row of a touched file: the matching ones changed, the others as they were.
    rewritten = in_touched.selectExpr(*[
        f"CASE WHEN {condition} THEN {cast_to('(' + assignments[c] + ')', types[c])} ELSE {ident(c)} END "
        f"AS {ident(c)}" if c in assignments else ident(c) for c in stmt.columns], *_lineage_of_updated(stmt, condition))
    return commit_rewrite(stmt, rewritten, touched, counts)
