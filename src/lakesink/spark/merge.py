"""`lakesink.merge`: MERGE of a source DataFrame into a table, with Delta's semantics.

Plan (one statement, one snapshot; spark.rowlevel_commit has the per-table-kind commit):

    source ─ persisted and counted first: every job below sees the same rows
    target ─ read at the statement's base snapshot, each row with its identity
             (append: file name and row index; keyed: the primary key), keyed: only
             the files in the source's range of the key columns ON equates
    join on the ON condition (inner / left / right / full, as the clauses need),
             persisted: the check, the counts and the write read it once
    action = index of the first clause whose condition holds, per joined row:
             matched rows try the when_matched clauses, target-only rows the
             when_not_matched_by_source ones, source-only rows the inserts
    check  = no target row has two joined rows with an action on a matched clause
             (Delta's error), unless the only matched clause is an unconditional delete
    keyed  → the actioned rows as +U / -D / +I rows (nothing rewritten)
    append → the files holding actioned target rows are rewritten: their rows without
             an action as they were, updated rows changed, deleted rows left out; plus
             the inserted rows; one OVERWRITE snapshot swaps the files
             (deletion vectors: actioned target rows marked deleted, updated and inserted
             rows added as new files, one OVERWRITE snapshot)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigurationError, MultipleMatchError
from ..protocol import CommitReport
from .session import cores
from .settings import uncompressed_cache
from .rowlevel_commit import already_committed, commit_keyed, commit_marks, commit_rewrite
from .rowlevel_statement import (FILE, KIND, POSITION, ROW, SOURCE_SEEN, TARGET_SEEN, analysed, cast_to,
                                 check_assignment, check_columns, open_statement, read_target, true_of)
from . import broadcast
from .lineage import COLUMNS as LINEAGE
from .sqltext import ident, string

_ACTION = "lakesink_action"
_WHAT = "lakesink.merge"


@dataclass(frozen=True)
class _Clause:
    when: str            # matched | not_matched | not_matched_by_source
    action: str          # update | delete | insert
    condition: str | None
    assignments: dict | None  # None: every column (update_all / insert_all)


class Merge:
    """A MERGE being built: add clauses, then `execute()` (see `lakesink.merge`)."""

    def __init__(self, spark, table: str, source, on: str, *, source_alias: str = "s", target_alias: str = "t",
                 commit_user: str | None = None, commit_identifier: int | None = None, branch: str | None = None):
        if not on or not str(on).strip():
            raise ConfigurationError(f"{_WHAT}: `on` is empty; give the join condition, e.g. 't.id = s.id'.")
        if source_alias == target_alias:
            raise ConfigurationError(f"{_WHAT}: source_alias and target_alias are both {source_alias!r}.")
        self._spark, self._table, self._source, self._on = spark, table, source, str(on)
        self._s, self._t = source_alias, target_alias
        self._user, self._identifier, self._branch = commit_user, commit_identifier, branch
        self._clauses: list[_Clause] = []

    # -- clauses (in order; the first whose condition holds wins) ------------
    def when_matched_update(self, set: dict, condition: str | None = None) -> Merge:
        return self._add("matched", "update", condition, _assignments(set, "set"))

    def when_matched_update_all(self, condition: str | None = None) -> Merge:
        return self._add("matched", "update", condition, None)

    def when_matched_delete(self, condition: str | None = None) -> Merge:
        return self._add("matched", "delete", condition, {})

    def when_not_matched_insert(self, values: dict, condition: str | None = None) -> Merge:
        return self._add("not_matched", "insert", condition, _assignments(values, "values"))

    def when_not_matched_insert_all(self, condition: str | None = None) -> Merge:
        return self._add("not_matched", "insert", condition, None)

    def when_not_matched_by_source_update(self, set: dict, condition: str | None = None) -> Merge:
        return self._add("not_matched_by_source", "update", condition, _assignments(set, "set"))

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> Merge:
        return self._add("not_matched_by_source", "delete", condition, {})

    def _add(self, when, action, condition, assignments) -> Merge:
        self._clauses.append(_Clause(when, action, None if condition is None else str(condition), assignments))
        return self

    # -- running it ---------------------------------------------------------
    def execute(self) -> CommitReport:
        """Commit the MERGE as one snapshot; the report counts rows inserted, updated, deleted."""
        if not self._clauses:
            raise ConfigurationError(f"{_WHAT}: no clause; add when_matched_update(...), "
                                     "when_not_matched_insert_all(), ... before execute(). Nothing was changed.")
        with uncompressed_cache(self._spark):  # the source and the joined rows are persisted
            return self._execute()

    def _execute(self) -> CommitReport:
        stmt = open_statement(self._spark, self._table, self._user, self._identifier, _WHAT, self._branch)
        clauses = [self._resolved(c, stmt) for c in self._clauses]
        replay = already_committed(stmt)
        if replay is not None:
            return replay
        # Materialised once, so that a non-deterministic source is read one time; a source the
        # caller persisted already is read from that copy.
        ours = not self._source.is_cached
        source = analysed(f"{_WHAT} source", lambda: self._source.selectExpr("*", f"true AS {SOURCE_SEEN}"))
        if ours:
            source = source.persist()
        try:
            plan = _Plan(self, stmt, clauses, source)
            if ours:
                plan.fill_source()
            try:
                if stmt.keyed:
                    return commit_keyed(stmt, plan.keyed_changes, conjuncts=plan.key_range(),
                                        narrow=plan.narrow(), counted=plan.keyed_counts)
                return plan.rewrite()
            finally:
                plan.release()
        finally:
            if ours:
                source.unpersist()

    def _resolved(self, clause: _Clause, stmt) -> _Clause:
        """Assignments of `*_all` clauses spelled out; column names checked."""
        assignments = clause.assignments
        if clause.action == "delete":
            return clause
        if assignments is None:
            columns = stmt.columns
            if clause.action == "update" and stmt.keyed:  # a key stays: it decides where the row lives
                columns = [c for c in columns if c not in stmt.key_columns]
            if stmt.keyed:  # the table's rowkind.field: the statement sets each row's kind
                columns = [c for c in columns if c != stmt.kind_column]
            assignments = {c: f"{self._s}.{ident(c)}" for c in columns}
        check_columns(stmt, assignments, keyed_refusal=clause.action == "update")
        return _Clause(clause.when, clause.action, clause.condition, assignments)


class _Plan:
    """The joined rows of one MERGE, each with the index of the clause acting on it."""

    def __init__(self, merge: Merge, stmt, clauses: list[_Clause], source):
        self.m, self.stmt, self.clauses, self.source = merge, stmt, clauses, source
        self._kept = []
        self._keyed_counts = None  # what keyed_changes writes, counted when it checked the joined rows
        self._bounds = None  # key_range's (min, max) per equated column, found as the source was persisted
        self._pairs = None  # the (target, source) columns of those bounds

    def release(self) -> None:
        for frame in self._kept:
            frame.unpersist()

    def joined(self, target):
        """The joined rows with their action, persisted: the check, the counts and the write all
        read them, so the target is read and joined once."""
        frame = self._joined(target).persist()
        self._kept.append(frame)
        return frame

    def _joined(self, target):
        s, t = self.m._s, self.m._t
        target = target.selectExpr("*", f"true AS {TARGET_SEEN}")
        inserts = any(c.when == "not_matched" for c in self.clauses)
        by_source = any(c.when == "not_matched_by_source" for c in self.clauses)
        how = {(True, True): "full_outer", (True, False): "left_outer",
               (False, True): "right_outer", (False, False): "inner"}[(inserts, by_source)]
        from pyspark.sql import functions as F
        seen_s, seen_t = f"{s}.{SOURCE_SEEN} IS NOT NULL", f"{t}.{TARGET_SEEN} IS NOT NULL"

        def cases(when):
            arms = [f"WHEN {true_of(c.condition)} THEN {i}" for i, c in enumerate(self.clauses) if c.when == when]
            return f"CASE {' '.join(arms)} END" if arms else "CAST(NULL AS INT)"

        action = (f"CASE WHEN {seen_s} AND {seen_t} THEN {cases('matched')} "
                  f"WHEN {seen_t} THEN {cases('not_matched_by_source')} "
                  f"ELSE {cases('not_matched')} END")
        if not by_source and broadcast.fits_frame(self.source):
            # Only target rows some source row matches take part: found by streaming the target
            # past the broadcast source (no shuffle or sort of the whole target), then joined.
            target = analysed(f"{_WHAT} on", lambda: target.alias(t).join(
                F.broadcast(self.source.alias(s)), F.expr(self.m._on), "left_semi"))
        return analysed(f"{_WHAT} on / conditions", lambda: self.source.alias(s).join(
            target.alias(t), F.expr(self.m._on), how).selectExpr("*", f"{action} AS {_ACTION}"))

    def narrow(self):
        """keyed_read's narrowing: the stored versions the broadcast source matches (None: every
        target row may take part, or the source is too large to broadcast)."""
        if any(c.when == "not_matched_by_source" for c in self.clauses) or not broadcast.fits_frame(self.source):
            return None
        from pyspark.sql import functions as F
        s, t = self.m._s, self.m._t
        return lambda versions: versions.alias(t).join(F.broadcast(self.source.alias(s)), F.expr(self.m._on),
                                                       "left_semi")

    def fill_source(self) -> None:
        """Persist the source's rows (one job), finding key_range's bounds in the same pass."""
        from pyspark.sql import functions as F

        self._pairs = pairs = self._ranged()
        row = self.source.agg(F.count(F.lit(1)), *[f(F.col(ident(s))) for _, s in pairs
                                                     for f in (F.min, F.max)]).first()
        self._bounds = list(row)[1:]

    def _ranged(self) -> list[tuple[str, str]]:
        """(target, source) columns key_range bounds: each key or partition column of a keyed
        table the ON condition equates with a source column of its type."""
        from .reader import spark_schema

        if not self.stmt.keyed or any(c.when == "not_matched_by_source" for c in self.clauses):
            return []
        types = {f.name: f.dataType for f in spark_schema(self.stmt.table).fields}
        source_types = {f.name: f.dataType for f in self.source.schema.fields}
        return [(t, s) for t, s in _equated(self.m._on, self.m._t, self.m._s)
                if t in self.stmt.key_columns and source_types.get(s) == types[t]]

    def key_range(self) -> list:
        """Filters keeping the target's files to the source's range of each key or partition
        column the ON condition equates with a source column of its type: a target row outside
        it matches no source row, and only a `not_matched_by_source` clause acts on those."""
        from pyspark.sql import functions as F

        from ..filters import Filter

        bounds = self._bounds
        pairs = self._pairs if bounds is not None else self._ranged()
        if not pairs:
            return []
        if bounds is None:  # a source the caller persisted: not counted here
            bounds = self.source.agg(*[f(F.col(ident(s))) for _, s in pairs for f in (F.min, F.max)]).first()
        out = []
        for i, (t, _) in enumerate(pairs):
            low, high = bounds[2 * i], bounds[2 * i + 1]
            if low is not None:
                out += [Filter(t, ">=", low), Filter(t, "<=", high)]
        return out

    def _indices(self, *kinds) -> list[int]:
        return [i for i, c in enumerate(self.clauses) if (c.when, c.action) in kinds or c.action in kinds]

    def _in(self, indices) -> str:
        return f"{_ACTION} IN ({', '.join(str(i) for i in indices) or 'NULL'})"

    def values(self, joined, action: str, otherwise) -> list[str]:
        """Each table column of a row the clauses `action` act on: CASE over those clauses."""
        types = {f.name: f.dataType for f in read_target_schema(self.stmt)}
        out = []
        for column in self.stmt.columns:
            arms = []
            for i, c in enumerate(self.clauses):
                if c.action != action or column not in c.assignments:
                    continue
                expression = c.assignments[column]
                checked = analysed(f"{_WHAT} {c.when} {c.action}", lambda e=expression: joined.selectExpr(e))
                check_assignment(column, expression, checked.schema.fields[0].dataType, types[column])
                arms.append(f"WHEN {i} THEN {cast_to('(' + expression + ')', types[column])}")
            fallback = otherwise(column, types[column])
            out.append(f"CASE {_ACTION} {' '.join(arms)} ELSE {fallback} END AS {ident(column)}" if arms
                       else f"{fallback} AS {ident(column)}")
        return out

    def tally(self, joined, by_file: bool = False) -> list:
        """The joined rows with an action, counted in one job: per action (and, `by_file`, per
        target file), the target rows it acts on (`targets`), its joined rows (`joined`) and the
        most joined rows one target row has (`most`). Then Delta's rule: a target row matched by
        several source rows that a matched clause acts on is an error, unless the only matched
        clause is an unconditional delete (`single` False: a target row may then have several
        joined rows)."""
        from pyspark.sql import functions as F
        t = self.m._t
        acted = joined.where(f"{_ACTION} IS NOT NULL")
        row, action, file = F.col(f"{t}.{ROW}"), F.col(_ACTION), F.col(f"{t}.{FILE}")
        files = [FILE] if by_file else []
        # Each target row's joined rows together: one action, unless several source rows match it.
        # The inserting rows (no target row) fall into one group per action, summed before the
        # shuffle: one chain of two small shuffles, not a union of two (AQE runs each as jobs).
        rows = (acted.groupBy(row.alias(ROW), F.when(row.isNull(), action).alias("inserting"))
                .agg(F.count(F.lit(1)).alias("n"), F.min(action).alias(_ACTION),
                     *([F.first(file).alias(FILE)] if by_file else []))
                .groupBy(_ACTION, *files)
                .agg(F.count(F.lit(1)).alias("targets"), F.sum("n").alias("joined"), F.max("n").alias("most"))
                .collect())
        most = max((r["most"] for r in rows if self.clauses[r[_ACTION]].when == "matched"), default=1)
        if self.single and most > 1:
            raise MultipleMatchError(
                f"{_WHAT}: Cannot perform Merge as multiple source rows matched and attempted to modify the "
                f"same target row in {self.stmt.path} ({most} source rows matched one target row). "
                "Deduplicate the source or refine the ON condition. Nothing was changed.", table=self.stmt.path)
        return rows

    @property
    def single(self) -> bool:
        """A target row may take one joined row with an action: false only where the one matched
        clause is an unconditional delete (several source rows may delete one target row)."""
        matched = [c for c in self.clauses if c.when == "matched"]
        return not (len(matched) == 1 and matched[0].action == "delete" and matched[0].condition is None)

    def counts(self, rows) -> dict:
        """{inserted, updated, deleted} from (action, distinct target rows, joined rows) rows: an
        insert counts its joined rows (it has no target row)."""
        counts = {"inserted": 0, "updated": 0, "deleted": 0}
        for row in rows:
            clause = self.clauses[row[_ACTION]]
            name = {"insert": "inserted", "update": "updated", "delete": "deleted"}[clause.action]
            counts[name] += row["joined"] if clause.action == "insert" else row["targets"]
        return counts

    # -- primary-key tables ---------------------------------------------------
    def keyed_changes(self, target):
        joined = self.joined(target)
        self._keyed_counts = self.counts(self.tally(joined))  # before anything is written: the check
        t = self.m._t
        targeted = self._indices("update", "delete")
        deletes = self._indices("delete")
        kind = f"CASE WHEN {self._in(deletes)} THEN '-D' ELSE '+U' END"
        changed = joined.where(self._in(targeted)).selectExpr(
            *self.values(joined, "update", lambda c, _: f"{t}.{ident(c)}"), f"{kind} AS {KIND}",
            f"{t}.{ROW} AS {ROW}")
        if not self.single:  # the delete-only case: one -D a row (else: one actioned joined row a target row)
            changed = changed.dropDuplicates([ROW])
        changed = changed.drop(ROW)
        inserted = joined.where(self._in(self._indices("insert"))).selectExpr(
            *self.values(joined, "insert", lambda c, typ: f"CAST(NULL AS {typ.simpleString()})"), f"'+I' AS {KIND}")
        return changed.unionByName(inserted)

    def keyed_counts(self) -> dict:
        """What keyed_changes writes, counted on the persisted joined rows (the change itself is
        not persisted): a +U / -D row per target row acted on, a +I row per inserting joined row."""
        return self._keyed_counts

    # -- append tables: copy-on-write -----------------------------------------
    def rewrite(self) -> CommitReport:
        from pyspark.sql import functions as F

        stmt, t = self.stmt, self.m._t
        target = read_target(stmt)
        joined = self.joined(target)
        targeted = self._indices("update", "delete")
        rows = self.tally(joined, by_file=True)
        counts = self.counts(rows)
        touched = sorted({r[FILE] for r in rows if r[_ACTION] in targeted and r[FILE] is not None})
        # Row-tracking tables: an updated row keeps its _ROW_ID and gets the statement's
        # _SEQUENCE_NUMBER (null here, the snapshot's at commit); an inserted row gets a new id.
        updated_lineage = [f"{t}.{LINEAGE[0]} AS {LINEAGE[0]}", f"CAST(NULL AS BIGINT) AS {LINEAGE[1]}",
                           f"{t}.{FILE} AS {FILE}"] if stmt.tracks else []
        new_lineage = [f"CAST(NULL AS BIGINT) AS {c}" for c in LINEAGE] + [f"CAST(NULL AS STRING) AS {FILE}"] \
            if stmt.tracks else []
        changed = joined.where(self._in(self._indices("update"))).selectExpr(
            *self.values(joined, "update", lambda c, _: f"{t}.{ident(c)}"), *updated_lineage)
        inserted = joined.where(self._in(self._indices("insert"))).selectExpr(
            *self.values(joined, "insert", lambda c, typ: f"CAST(NULL AS {typ.simpleString()})"), *new_lineage)
        added = changed.unionByName(inserted)
        if stmt.table.partition_keys and not stmt.tracks:
            # Each partition's new rows together: a file per partition, not one per partition and
            # task of the join (10M rows in 10 partitions, 1M changes: 70 files after, 20 now).
            added = added.repartition(cores(stmt.spark), *[ident(k) for k in stmt.table.partition_keys])
        if stmt.marks_rows:  # deletion vectors: acted-on target rows marked, new versions added
            marked = joined.where(self._in(targeted)).select(F.col(f"{t}.{FILE}").alias(FILE),
                                                             F.col(f"{t}.{POSITION}").alias(POSITION))
            return commit_marks(stmt, marked, added, counts)
        acted = joined.where(self._in(targeted)).select(F.col(f"{t}.{ROW}").alias(ROW)).distinct()
        if broadcast.fits_frame(acted):  # the touched files streamed past it: neither shuffled nor sorted
            acted = F.broadcast(acted)
        in_touched = target.where(f"{FILE} IN ({', '.join(string(n) for n in touched) or 'NULL'})")
        kept = in_touched.join(acted, ROW, "left_anti").select(*stmt.carried)
        return commit_rewrite(stmt, kept.unionByName(added), touched, counts)


_NAME = r"(?:`([^`]+)`|(\w+))"
_EQUALS = re.compile(rf"^\s*(\w+)\.{_NAME}\s*=\s*(\w+)\.{_NAME}\s*$")


def _equated(on: str, target_alias: str, source_alias: str) -> list[tuple[str, str]]:
    """(target column, source column) of the ON condition's top-level `t.x = s.y` conjuncts."""
    from ..filters import _split_and

    out = []
    for part in _split_and(on):
        part = part.strip()
        while part.startswith("(") and part.endswith(")"):
            part = part[1:-1].strip()
        match = _EQUALS.match(part)
        if not match:
            continue
        left, right = (match.group(1).lower(), match.group(2) or match.group(3)), \
            (match.group(4).lower(), match.group(5) or match.group(6))
        sides = dict([left, right]) if left[0] != right[0] else {}
        if target_alias.lower() in sides and source_alias.lower() in sides:
            out.append((sides[target_alias.lower()], sides[source_alias.lower()]))
    return out


def read_target_schema(stmt):
    from .reader import spark_schema
    return spark_schema(stmt.table).fields


def _assignments(mapping, name: str) -> dict:
    if not mapping:
        raise ConfigurationError(f"{_WHAT}: `{name}` is empty; give {{'column': 'SQL expression'}} or use the "
                                 "*_all clause.")
    return {str(k): str(v) for k, v in dict(mapping).items()}
