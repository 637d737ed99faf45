"""How a row-level statement commits its one snapshot, per table kind (see `spark.rowlevel`).

Primary-key tables: the change's rows, with their row kinds, written as key-value files
through the keyed write path (`commit_keyed`). Append tables: the touched files rewritten
(`commit_rewrite`), or, with deletion vectors, the changed rows marked in them
(`commit_marks`), in one snapshot (paimon.commit.rowlevel_target). A
statement whose identity landed already is a replay and commits nothing (`already_committed`).
"""

from __future__ import annotations

from ..errors import ConfigurationError, LakesinkError
from ..options import WriteOptions
from ..protocol import CommitReport
from .rowlevel_statement import FILE, KIND, PATH_NAME, POSITION, Statement, read_target
from .sqltext import ident


def identity_options(stmt: Statement) -> dict:
    out = dict(stmt.fs_options)
    if stmt.branch is not None:
        out["branch"] = stmt.branch
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
                 conjuncts: list | None = None, narrow=None, counted=None) -> CommitReport:
    """Plan the keyed write, read the target at its base snapshot (its files pruned by
    `condition` and `conjuncts`, its merge narrowed by `narrow`, as read_target), write `build_changes(target)` (table columns +
    `KIND`) as key-value files, commit one snapshot. `counted()`, called after `build_changes`:
    the change's {inserted, updated, deleted} from what the statement persisted already (else
    the change is persisted and its kinds counted)."""
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
    changes = build_changes(read_target(stmt, condition, snapshot_id=base, conjuncts=conjuncts,
                                        narrow=narrow))
    written = [f"{KIND} AS {ident(c)}" if c == kind else ident(c) for c in stmt.columns]
    changes = changes.selectExpr(*written, *([] if stored else [f"{KIND} AS {ident(kind)}"]))
    if counted is None:
        changes = changes.persist()
    files = []
    try:
        counts = count_kinds(changes, kind) if counted is None else counted()
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


# A rewrite's task holds rows of a few partitions (a touched file's, and those of the changed and
# inserted rows): written at once, not sorted by partition first (row groups: settings.row_group_mib).
_OPEN_FILES = 16


def commit_rewrite(stmt: Statement, rewritten, touched: list[str], counts: dict) -> CommitReport:
    """Append tables: write `rewritten` (the new contents of the `touched` files, and inserted rows;
    `stmt.carried` columns) and commit one snapshot removing the touched files."""
    from ..paimon.files.datafiles import StagedFile
    from ..paimon.commit.rowlevel_target import RowLevelTarget
    from .fastpath import write_staged
    from .output import check_spark_can_write, list_parquet_files

    check_spark_can_write(stmt.spark, stmt.path, PATH_NAME)
    removed = [StagedFile(*stmt.candidates[name], None) for name in touched]
    target = RowLevelTarget(stmt.path, removed, fs_options=stmt.fs_options or None, branch=stmt.branch)
    job = _statement_job(stmt, target)
    done = _without_files(job, touched, counts)
    if done is not None:
        return done

    def write(files: list) -> list:
        if stmt.tracks:
            from ..paimon.files.lineage import describe_rewritten
            from .lineage import with_runs
            write_staged(with_runs(rewritten, [FILE], list(stmt.table.partition_keys)), job, lineage=True)
            files[:] = job.describe_staged(list_parquet_files(job.staging_dir, job.target.fs_options))
            return describe_rewritten(files, job.target.file_io)
        write_staged(rewritten, job, open_files=_OPEN_FILES)
        return job.describe_staged(list_parquet_files(job.staging_dir, job.target.fs_options))

    return _write_and_commit(job, write, counts)


def _write_and_commit(job, write, counts: dict) -> CommitReport:
    """`write(files)` stages the statement's files and returns them (leaving in `files` what it
    staged before a failure, for the abort to remove); then one snapshot commits them."""
    files: list = []
    try:
        files = write(files)
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
    target = RowLevelTarget(stmt.path, fs_options=stmt.fs_options or None, base=stmt.snapshot, branch=stmt.branch,
                            marked={name: (StagedFile(*stmt.candidates[name], None), sorted(p))
                                    for name, p in positions.items()})
    job = _statement_job(stmt, target)
    done = _without_files(job, positions, counts)
    if done is not None:
        return done

    def write(files: list) -> list:
        if added is None:
            return files
        write_staged(added.select(*[ident(c) for c in stmt.columns]), job)
        return job.describe_staged(list_parquet_files(job.staging_dir, job.target.fs_options))

    return _write_and_commit(job, write, counts)


def already_committed(stmt: Statement) -> CommitReport | None:
    """A replayed statement (its identity landed): the report to return before any Spark work."""
    if stmt.commit_user is None:
        return None
    from ..paimon.commit.target import PaimonTarget
    from ..protocol import Committer
    target = PaimonTarget(stmt.path, fs_options=stmt.fs_options or None, branch=stmt.branch)
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
