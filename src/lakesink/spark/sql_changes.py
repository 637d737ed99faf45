"""`MERGE INTO`, `UPDATE` and `DELETE FROM` in `lakesink.sql`: the statement's parts, as Spark
SQL text, handed to `lakesink.merge`, `update` and `delete` (one snapshot per statement).

The result is one row of counts, named as Delta's SQL names them: `num_affected_rows`, and for
MERGE also `num_updated_rows`, `num_deleted_rows`, `num_inserted_rows`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import UnsupportedStatementError


def run_change(spark, tree, target: str, table_name: str, query: Callable, branch: str | None = None):
    """Run the MERGE / UPDATE / DELETE `tree` on the catalog table `target` (quoted; its own name
    `table_name`), on `branch` if given; `query(spark, text)` runs a query naming catalog tables
    (the MERGE's source)."""
    from sqlglot import exp

    alias = tree.this.alias or None
    if isinstance(tree, exp.Merge):
        report = _merge(spark, tree, target, alias or table_name, query, branch)
    else:
        from .rowlevel import delete, update

        where = tree.args.get("where")
        where_text = _text(where.this, alias) if where is not None else None
        if isinstance(tree, exp.Delete):
            report = delete(spark, target, where=where_text, branch=branch)
        else:
            report = update(spark, target, set=_assignments(tree.expressions, alias), where=where_text,
                            branch=branch)
    return _counts(spark, report, merge=isinstance(tree, exp.Merge))


def _merge(spark, tree, target: str, target_alias: str, query: Callable, branch: str | None = None):
    from sqlglot import exp

    from .merge import Merge

    using = tree.args["using"]
    source_alias = using.alias or (using.name if isinstance(using, exp.Table) else None)
    if isinstance(using, exp.Subquery):
        source = query(spark, using.this.sql("spark"))
    else:
        plain = using.copy()
        plain.set("alias", None)
        source = query(spark, f"SELECT * FROM {plain.sql('spark')}")
    builder = Merge(spark, target, source, on=tree.args["on"].sql("spark"), source_alias=source_alias or "s",
                    target_alias=target_alias, branch=branch)
    for when in tree.args["whens"].expressions:
        condition = when.args.get("condition")
        condition = condition.sql("spark") if condition is not None else None
        then = when.args["then"]
        if when.args.get("matched"):
            if isinstance(then, exp.Update):
                if isinstance(then.expressions[0], exp.Star):
                    builder = builder.when_matched_update_all(condition=condition)
                else:
                    builder = builder.when_matched_update(set=_assignments(then.expressions, target_alias, False),
                                                          condition=condition)
            else:
                builder = builder.when_matched_delete(condition=condition)
        elif when.args.get("source"):
            if isinstance(then, exp.Update):
                builder = builder.when_not_matched_by_source_update(
                    set=_assignments(then.expressions, target_alias, False), condition=condition)
            else:
                builder = builder.when_not_matched_by_source_delete(condition=condition)
        elif isinstance(then.this, exp.Star):
            builder = builder.when_not_matched_insert_all(condition=condition)
        else:
            columns = [c.name for c in then.this.expressions]
            values = [v.sql("spark") for v in then.expression.expressions]
            if len(columns) != len(values):
                raise UnsupportedStatementError("MERGE ... INSERT", target, f"the clause names {len(columns)} "
                                                f"columns and {len(values)} values; give one value per column.")
            builder = builder.when_not_matched_insert(values=dict(zip(columns, values)), condition=condition)
    return builder.execute()


def _assignments(expressions, alias: str | None, unqualify_values: bool = True) -> dict[str, str]:
    """`SET a = x, t.b = y` → {"a": "x", "b": "y"} (target columns named without their alias)."""
    return {eq.this.name: (_text(eq.expression, alias) if unqualify_values else eq.expression.sql("spark"))
            for eq in expressions}


def _text(expression, alias: str | None) -> str:
    """Spark SQL text of an expression over the target alone: its alias dropped from columns."""
    from sqlglot import exp

    if alias is None:
        return expression.sql("spark")
    return expression.transform(
        lambda node: exp.column(node.name, quoted=node.this.args.get("quoted"))
        if isinstance(node, exp.Column) and node.table == alias else node).sql("spark")


def _counts(spark, report, merge: bool):
    def count(field: str) -> int:
        value = getattr(report, field, None)
        if value is None:
            value = (getattr(report, "extra", None) or {}).get(field, 0)
        return int(value or 0)

    updated, deleted, inserted = count("rows_updated"), count("rows_deleted"), count("rows_inserted")
    if merge:
        return spark.createDataFrame(
            [(updated + deleted + inserted, updated, deleted, inserted)],
            "num_affected_rows long, num_updated_rows long, num_deleted_rows long, num_inserted_rows long")
    return spark.createDataFrame([(updated + deleted + inserted,)], "num_affected_rows long")
