"""Row-level changes: `lakesink.delete`, `lakesink.update` (`spark.merge`: `lakesink.merge`).

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

A statement is planned in `spark.rowlevel_statement` and committed in `spark.rowlevel_commit`.
"""

from __future__ import annotations

from ..errors import ConfigurationError
from ..protocol import CommitReport
from .rowlevel_commit import already_committed, commit_keyed, commit_marks, commit_rewrite
from .rowlevel_statement import (FILE, KIND, POSITION, Statement, analysed, cast_to, check_assignment, check_columns,
                                 open_statement, read_target, target_shape, true_of)
from .settings import uncompressed_cache
from .sqltext import ident, string


def _persisting(statement):
    """A statement persists the rows it reads back (matched rows, the change): cached as they
    are, not compressed column by column (`settings.uncompressed_cache`)."""
    import functools

    @functools.wraps(statement)
    def run(spark, *args, **kwargs):
        with uncompressed_cache(spark):
            return statement(spark, *args, **kwargs)
    return run


def _lineage_of_updated(stmt: Statement, condition: str) -> list[str]:
    """A row-tracking table's rewritten rows keep their `_ROW_ID`; an updated row's
    `_SEQUENCE_NUMBER` is null, so the commit's snapshot becomes it (as Paimon's UPDATE)."""
    if not stmt.tracks:
        return []
    from .lineage import ROW_ID, SEQUENCE_NUMBER
    return [ROW_ID, f"CASE WHEN {condition} THEN CAST(NULL AS BIGINT) ELSE {SEQUENCE_NUMBER} END AS {SEQUENCE_NUMBER}",
            FILE]


@_persisting
def delete(spark, name: str, where: str | None = None, *, commit_user: str | None = None,
           commit_identifier: int | None = None, branch: str | None = None) -> CommitReport:
    stmt = open_statement(spark, name, commit_user, commit_identifier, "lakesink.delete", branch)
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


@_persisting
def update(spark, name: str, set: dict, where: str | None = None, *, commit_user: str | None = None,
           commit_identifier: int | None = None, branch: str | None = None) -> CommitReport:
    if not set:
        raise ConfigurationError("lakesink.update: `set` names no column ({'column': 'SQL expression'}). "
                                 "Nothing was changed.")
    stmt = open_statement(spark, name, commit_user, commit_identifier, "lakesink.update", branch)
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
