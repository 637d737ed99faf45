"""The statements `lakesink.sql` runs itself on the session catalog's tables.

Spark can read and append to a catalog table through a temporary view (`sql.rewrite`), but
it runs DDL, row-level changes and partition overwrites against its own catalog, where a
Python data source's table is not: `DROP TABLE shop.t` would drop only the view. These
statements are parsed (sqlglot, Spark dialect) and run here:

| statement | runs as |
|---|---|
| `CREATE TABLE name (columns) [PARTITIONED BY (...)] [TBLPROPERTIES (...)]` | a table created with the checks of `lakesink.write` |
| `CREATE TABLE name ... AS SELECT ...` | `lakesink.create_table_as` (atomic) |
| `DROP TABLE [IF EXISTS] name` | `Catalog.drop_table` |
| `ALTER TABLE name ADD COLUMN(S) (...)` | a new schema with nullable columns |
| `SHOW DATABASES`, `SHOW TABLES [IN db]` | the catalog's lists |
| `INSERT OVERWRITE [TABLE] name [PARTITION (...)] SELECT ...` | `lakesink.write(mode="overwrite")` |
| `MERGE INTO`, `UPDATE`, `DELETE FROM` | `lakesink.merge`, `update`, `delete` (a target `` `t$branch_b` ``: on branch `b`) |

Any other statement that names a catalog table and is not a query or an `INSERT INTO` is
refused (`UnsupportedStatementError`), never handed to Spark to do something else.
"""

from __future__ import annotations

from ..errors import ConfigurationError, UnsupportedStatementError
from ..paimon.catalog.catalog import Catalog
from ..paimon.catalog.names import TableName, branch_of

_TABLE_COMMANDS = ("ALTER", "TRUNCATE", "ANALYZE", "REFRESH", "MSCK", "COMMENT", "CACHE", "UNCACHE", "REPAIR")


def parse(query: str):
    """The statement's syntax tree, or None where sqlglot cannot parse it (Spark then decides)."""
    import sqlglot
    from sqlglot.errors import ParseError

    import logging
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # SHOW ... parses as a command, with a warning
    try:
        statements = [s for s in sqlglot.parse(query, read="spark") if s is not None]
    except ParseError:
        return None
    if len(statements) != 1:
        return None
    return statements[0]


def catalog_name(table, catalog: Catalog) -> TableName | None:
    """A sqlglot table reference as a name in `catalog` (None: one part, or another catalog)."""
    if not table.args.get("db"):
        return None
    if table.catalog and table.catalog != catalog.name:
        return None
    return TableName(table.db, table.name)


def sql(spark, query: str, catalog: Catalog | None, **kwargs):
    """`lakesink.sql`: a statement of the table above runs here; any other goes to Spark through
    the catalog tables' views (`sql.sql`)."""
    from .sql import sql as through_views

    if catalog is not None:
        result = run(spark, query, catalog, parameters=bool(kwargs))
        if result is not None:
            return result
    return through_views(spark, query, catalog, **kwargs)


def run(spark, query: str, catalog: Catalog, parameters: bool = False):
    """Run `query` if it is one of this module's statements: its result DataFrame; None to let
    Spark run it through the views of `sql.rewrite`. `parameters`: the caller passed `args`
    (which only Spark's queries take)."""
    from sqlglot import exp

    tree = parse(query)
    if tree is None:
        return None
    if parameters and isinstance(tree, (exp.Drop, exp.Create, exp.Alter, exp.Merge, exp.Update, exp.Delete)):
        raise ConfigurationError("lakesink.sql takes parameters (args=...) for queries and INSERT INTO only; "
                                 "write the values into the statement. Nothing was changed.")
    if isinstance(tree, exp.Command):
        return _command(spark, tree, query, catalog)
    if isinstance(tree, exp.Drop):
        return _drop(spark, tree, catalog)
    if isinstance(tree, exp.Create):
        return _create(spark, tree, catalog)
    if isinstance(tree, exp.Alter):
        return _alter(spark, tree, query, catalog)
    if isinstance(tree, exp.Insert) and tree.args.get("overwrite"):
        return _insert_overwrite(spark, tree, catalog)
    if isinstance(tree, (exp.Merge, exp.Update, exp.Delete)):
        name = catalog_name(tree.this, catalog) if isinstance(tree.this, exp.Table) else None
        if name is None:
            return None  # one of Spark's tables
        from .sql_changes import run_change
        main, branch = _branch_of(tree.this, name)
        return run_change(spark, tree, _quoted(main), name.table, lambda s, text: sql(s, text, catalog),
                          branch=branch)
    if isinstance(tree, exp.TruncateTable):
        for table in tree.expressions:
            name = catalog_name(table, catalog)
            if name is not None:
                raise UnsupportedStatementError(
                    "TRUNCATE TABLE", str(name), "use lakesink.sql(spark, \"DELETE FROM <table>\") or "
                    "lakesink.write(<empty DataFrame>, <table>, mode=\"overwrite\").")
    return None


def done(spark):
    """What Spark returns for a statement without rows."""
    from pyspark.sql.types import StructType
    return spark.createDataFrame([], StructType([]))


def _target(tree, catalog: Catalog) -> TableName | None:
    from sqlglot import exp

    table = tree.this
    if isinstance(table, exp.Schema):
        table = table.this
    return catalog_name(table, catalog) if isinstance(table, exp.Table) else None


def _whole(name: TableName | None, statement: str) -> TableName | None:
    """`name`, which a DDL statement or an overwrite changes as a whole table: a branch
    (`t$branch_b`) or a system table (`t$snapshots`) is refused, never taken for `t`."""
    if name is not None and "$" in name.table:
        base, branch = branch_of(name, statement)
        raise UnsupportedStatementError(
            statement, str(name), f"run it on {base} itself. A branch takes INSERT INTO, MERGE, UPDATE and DELETE "
            f"here, lakesink.write(df, table, mode=..., options={{'branch': '{branch}'}}), and lakesink.branch.")
    return name


def _drop(spark, tree, catalog: Catalog):
    if str(tree.args.get("kind", "")).upper() != "TABLE":
        return None
    names = [_whole(catalog_name(t, catalog), "DROP TABLE") for t in tree.args.get("tables") or [tree.this]]
    if not any(names):
        return None
    if not all(names):
        raise UnsupportedStatementError("DROP TABLE", ", ".join(str(n) for n in names if n),
                                        "drop the catalog's tables and Spark's in separate statements.")
    if tree.args.get("purge") or tree.args.get("cascade"):
        raise UnsupportedStatementError("DROP TABLE ... PURGE/CASCADE", str(names[0]),
                                        "DROP TABLE always deletes the table's files; leave the clause out.")
    for name in names:
        catalog.drop_table(_quoted(name), if_exists=bool(tree.args.get("exists")))
    return done(spark)


def _create(spark, tree, catalog: Catalog):
    from sqlglot import exp

    if str(tree.args.get("kind", "")).upper() != "TABLE":
        return None
    name = _whole(_target(tree, catalog), "CREATE TABLE")
    if name is None:
        return None
    if tree.args.get("replace"):
        raise UnsupportedStatementError("CREATE OR REPLACE TABLE", str(name),
                                        "use lakesink.replace_table_as(df, table) (atomic).")
    options, partition_by = {}, []
    for prop in (tree.args.get("properties").expressions if tree.args.get("properties") else []):
        if isinstance(prop, exp.Property) and not isinstance(prop, exp.PartitionedByProperty):
            if type(prop) is not exp.Property:
                if isinstance(prop, exp.FileFormatProperty) and prop.name.lower() in ("paimon", "lakesink-paimon"):
                    continue
                if isinstance(prop, exp.SchemaCommentProperty):
                    options["comment"] = prop.args["this"].name
                    continue
                raise UnsupportedStatementError(f"CREATE TABLE ... {prop.sql('spark')}", str(name),
                                                "give Paimon's table options in TBLPROPERTIES (docs/options.md).")
            options[prop.name] = prop.args["value"].name
        elif isinstance(prop, exp.PartitionedByProperty):
            partition_by = [c.name for c in prop.this.expressions]
    primary_key = [c.strip() for c in options.pop("primary-key", "").split(",") if c.strip()]
    options.pop("comment", None)  # Paimon keeps a table comment in its schema; pypaimon writes none
    if "partition" in options:
        partition_by = partition_by or [c.strip() for c in options.pop("partition").split(",") if c.strip()]
    exists = bool(tree.args.get("exists"))
    from .ctas import create_table_as
    from .fastpath import write

    if tree.expression is not None:  # CREATE TABLE ... AS SELECT
        df = sql(spark, tree.expression.sql("spark"), catalog)
        if primary_key:
            options["primary-key"] = ",".join(primary_key)
        create_table_as(df, _quoted(name), partition_by=partition_by or None, options=options,
                        if_not_exists=exists)
        return done(spark)
    if not isinstance(tree.this, exp.Schema) or not tree.this.expressions:
        raise UnsupportedStatementError("CREATE TABLE without columns", str(name),
                                        "name the columns, or CREATE TABLE ... AS SELECT.")
    columns = []
    for column in tree.this.expressions:
        constraints = column.args.get("constraints") or []
        not_null = any(isinstance(c.args.get("kind"), exp.NotNullColumnConstraint) for c in constraints)
        if not_null and column.name not in primary_key:
            raise ConfigurationError(
                f"CREATE TABLE {name}: NOT NULL on {column.name!r}, which is not a primary-key column. lakesink "
                "creates value columns nullable (as Spark's file tables) and primary-key columns NOT NULL; "
                "leave NOT NULL out. Nothing was created.", table=str(name))
        columns.append(f"`{column.name}` {column.args['kind'].sql('spark')}")
    if catalog.table_exists(_quoted(name)):
        if exists:
            return done(spark)
        from ..errors import TableAlreadyExistsError
        raise TableAlreadyExistsError(f"Table {name} already exists in the {catalog.config.describe()}.",
                                      table=str(name))
    empty = spark.createDataFrame([], ", ".join(columns))
    write(empty, _quoted(name), partition_by=partition_by or None, primary_key=primary_key or None,
          options=options)
    return done(spark)


def _alter(spark, tree, query: str, catalog: Catalog):
    from sqlglot import exp

    name = _whole(_target(tree, catalog), "ALTER TABLE")
    if name is None:
        return None
    actions = tree.args.get("actions") or []
    added = []
    for action in actions:
        defs = action.expressions if isinstance(action, exp.Schema) else [action]
        if not all(isinstance(d, exp.ColumnDef) for d in defs):
            added = None
            break
        added.extend(defs)
    if not added:
        raise UnsupportedStatementError(query.strip().split("\n")[0][:80], str(name),
                                        "lakesink.sql alters tables with ADD COLUMN(S); for other changes use "
                                        "the write option write.merge-schema or pypaimon's catalog.alter_table.")
    _add_columns(spark, catalog, name, [(d.name, d.args["kind"].sql("spark")) for d in added])
    return done(spark)


def _add_columns(spark, catalog: Catalog, name: TableName, columns: list[tuple[str, str]]) -> None:
    import pyarrow as pa
    from pypaimon.schema.data_types import PyarrowFieldParser
    from pypaimon.schema.schema_change import SchemaChange

    from .arrow import spark_to_arrow

    table = catalog.open(_quoted(name))
    have = {f.name for f in table.table_schema.fields}
    clash = [c for c, _ in columns if c in have]
    if clash:
        raise ConfigurationError(f"ALTER TABLE {name} ADD COLUMNS: {clash} already exist. Nothing was changed.",
                                 table=str(name))
    arrow = spark_to_arrow(spark.createDataFrame([], ", ".join(f"`{c}` {t}" for c, t in columns)).schema)
    # Paimon adds columns nullable: the rows already written hold none of their values.
    fields = PyarrowFieldParser.to_paimon_schema(pa.schema([f.with_nullable(True) for f in arrow]))
    catalog.alter_table(_quoted(name), [SchemaChange.add_column(f.name, f.type) for f in fields])


def _command(spark, tree, query: str, catalog: Catalog):
    words = query.strip().rstrip(";").split()
    head = [w.upper() for w in words]
    if head[:1] == ["SHOW"] and len(head) >= 2:
        if head[1] in ("DATABASES", "NAMESPACES", "SCHEMAS") and len(head) == 2:
            return spark.createDataFrame([(d,) for d in catalog.list_databases()], "namespace string")
        if head[1] == "TABLES" and (len(head) == 2 or (len(head) == 4 and head[2] in ("IN", "FROM"))):
            databases = [words[3].strip("`")] if len(head) == 4 else catalog.list_databases()
            rows = [(db, t, False) for db in databases for t in catalog.list_tables(db)]
            return spark.createDataFrame(rows, "namespace string, tableName string, isTemporary boolean")
    if head and head[0] in _TABLE_COMMANDS:
        from .sql import rewrite
        _, tables = rewrite(query, catalog)
        if tables:
            raise UnsupportedStatementError(" ".join(words[:3]), str(next(iter(tables))),
                                            "see docs/catalogs.md for the statements lakesink.sql runs.")
    return None


def _insert_overwrite(spark, tree, catalog: Catalog):
    from sqlglot import exp

    table = tree.this
    if isinstance(table, exp.Schema):
        raise UnsupportedStatementError("INSERT OVERWRITE with a column list", str(table.this),
                                        "select the columns in the table's order instead.")
    name = _whole(catalog_name(table, catalog), "INSERT OVERWRITE")
    if name is None:
        return None
    from .fastpath import write

    df = sql(spark, tree.expression.sql("spark"), catalog)
    partition = table.args.get("partition")
    resolved = catalog.resolve(_quoted(name), "write")
    static: dict[str, object] = {}
    if partition is not None:
        for item in partition.expressions:
            if isinstance(item, exp.EQ):
                static[item.this.name] = item.expression.to_py()
            else:
                static.setdefault(item.name, None)  # a dynamic partition column
    paimon_table = catalog.open(_quoted(name))
    keys = list(paimon_table.partition_keys)
    unknown = [k for k in static if k not in keys]
    if unknown:
        raise ConfigurationError(f"INSERT OVERWRITE {name} PARTITION: {unknown} are not partition columns of "
                                 f"the table ({keys}). Nothing was written.", table=str(name))
    fixed = {k: v for k, v in static.items() if v is not None}
    columns = [f.name for f in paimon_table.table_schema.fields if f.name not in fixed]
    if len(df.columns) != len(columns):
        raise ConfigurationError(f"INSERT OVERWRITE {name}: the query gives {len(df.columns)} columns, the "
                                 f"table takes {len(columns)} here ({columns}). Nothing was written.",
                                 table=str(name))
    from pyspark.sql import functions as F

    from .reader import spark_schema
    # As Spark's INSERT: columns by position, cast to the table's types (store assignment).
    types = {f.name: f.dataType for f in spark_schema(paimon_table)}
    df = df.toDF(*columns)
    for key, value in fixed.items():
        df = df.withColumn(key, F.lit(value))
    df = df.select(*[F.col(f"`{f.name}`").cast(types[f.name]).alias(f.name) for f in paimon_table.table_schema.fields])
    if fixed and len(fixed) == len(keys):
        write(df, resolved.path, "overwrite", options=resolved.fs_options or None,
                   overwrite_partition=fixed)
    elif fixed:
        raise UnsupportedStatementError(
            "INSERT OVERWRITE with some partition columns static and others dynamic", str(name),
            "give every partition column a value, or none (the session's partitionOverwriteMode decides).")
    else:
        mode = spark.conf.get("spark.sql.sources.partitionOverwriteMode", "static")
        write(df, _quoted(name), mode="overwrite", options={"partitionOverwriteMode": mode.lower()})
    return done(spark)


def _branch_of(table, name: TableName) -> tuple[TableName, str | None]:
    """(the table, the branch or None) a statement changes: Paimon names branch `b` of table `t`
    `` `t$branch_b` ``. Unquoted, `t$branch_b` parses as table `t` with a parameter for its alias:
    taken the same way, never as main. Another `$` suffix (a system table) cannot be changed."""
    from sqlglot import exp

    alias = table.args.get("alias")
    if alias is not None and isinstance(alias.this, exp.Parameter):
        name = TableName(name.database, f"{name.table}${alias.this.name}")
        table.set("alias", None)
    return branch_of(name, "a row-level change")


def _quoted(name: TableName) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in (name.database, name.table))
