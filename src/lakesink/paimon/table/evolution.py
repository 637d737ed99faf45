"""Schema evolution on write (option `write.merge-schema`): the data's schema against the table's.

Two steps, apart in time:

* `plan` (before anything is written): compare the DataFrame's Arrow schema with
  the table's latest schema. Equal: nothing to do. Otherwise either refuse
  (`SchemaMismatchError` naming every column, both types and what to do) or,
  with `write.merge-schema`, compute the table's next schema: new columns
  added as nullable columns, columns widened. pypaimon's `SchemaManager`
  computes it from `AddColumn` / `UpdateColumnType` changes (field ids, the
  `add-column-before-partition` option, its cast checks); nothing is written.
  The files of the write are described with that schema's id, and carry the
  schema itself (`StagedFile.schema`) until it is the table's.
* `ensure_schemas` (at commit, before the snapshot): make each schema the
  files carry the table's. Already there with the same columns (a replay, or a
  commit that died after writing it): nothing. Next id free: write it
  (`SchemaManager.commit`, an atomic create). Taken by another writer's
  schema: *rebase*, i.e. merge our columns into the table's latest schema
  and point the files at the result, if it holds exactly the files' columns;
  anything else is a `CommitConflictError` (nothing landed; run again).

A commit that dies after writing the schema leaves a table whose schema has
columns no snapshot holds data for: nullable, hence read as null, and the
restarted commit finds the schema in place instead of adding it again.

Widening follows Paimon's implicit casts, restricted to those that keep every
value exactly (docs/schema-evolution.md has the table).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pypaimon.schema.data_types import PyarrowFieldParser
from pypaimon.schema.schema_change import SchemaChange
from pypaimon.schema.schema_manager import SchemaManager
from pypaimon.schema.table_schema import TableSchema

from ...errors import CommitConflictError, ConfigurationError, SchemaMismatchError
from . import publish

OPTION = "write.merge-schema"

_INTEGERS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Can a table column of type `old` become `new` keeping every stored value exactly?"""
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) > _INTEGERS.index(old)
    if new == pa.float64() and old in (pa.int8(), pa.int16(), pa.int32(), pa.float32()):
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale == old.scale and new.precision > old.precision
    return False


WIDENING_TEXT = ("write.merge-schema widens tinyint → smallint → int → bigint, tinyint/smallint/int/float → "
                 "double and decimal(p, s) → decimal(p', s) with p' > p")


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Types equal for writing: field names and nullability inside nested types aside."""
    if pa.types.is_list(a) and pa.types.is_list(b):
        return same_type(a.value_type, b.value_type)
    if pa.types.is_map(a) and pa.types.is_map(b):
        return same_type(a.key_type, b.key_type) and same_type(a.item_type, b.item_type)
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return ([f.name for f in a] == [f.name for f in b]
                and all(same_type(x.type, y.type) for x, y in zip(a, b)))
    if pa.types.is_large_string(b) and pa.types.is_string(a):
        return True
    return a == b


def storable_problem(field: pa.Field) -> str | None:
    """Why a column of this Arrow type cannot become a column of a table lakesink writes, or None."""
    try:
        PyarrowFieldParser.to_paimon_type(field.type, field.nullable)
    except ValueError:
        return f"column {field.name!r} has type {field.type}, which Paimon cannot store"
    if pa.types.is_large_binary(field.type) or pa.types.is_null(field.type):
        hint = (" (an untyped null, e.g. lit(None): cast it, lit(None).cast('string'))"
                if pa.types.is_null(field.type) else "")
        return f"column {field.name!r} has type {field.type}, which lakesink cannot write{hint}"
    return None


def check_types(schema: pa.Schema) -> None:
    for field in schema:
        problem = storable_problem(field)
        if problem:
            raise ConfigurationError(problem + ".")


@dataclass(frozen=True)
class SchemaEvolution:
    """The table's next schema for one write: computed, not written yet."""

    schema: TableSchema
    added: tuple[str, ...]
    widened: tuple[tuple[str, str, str], ...]  # (column, table type, new type)

    def describe(self) -> str:
        parts = [f"add {', '.join(self.added)}"] if self.added else []
        parts += [f"widen {name} {old} → {new}" for name, old, new in self.widened]
        return "; ".join(parts)


def arrow_fields(schema: TableSchema) -> list[pa.Field]:
    return list(PyarrowFieldParser.from_paimon_schema(schema.fields))


def plan(table_schema: TableSchema, incoming: pa.Schema, merge: bool, table_path: str,
         file_io=None, nulls_checked: bool = False) -> SchemaEvolution | None:
    """None when `incoming` fits the table as it is; the evolution `merge` allows; else an error.

    Nothing is written. `file_io`: to compute the next schema with pypaimon's
    SchemaManager (needed only when something evolves). `nulls_checked`: the writer checks
    every row of the table's NOT NULL columns (`TableLayout.not_null`), so a nullable column
    may go into one, as Delta allows; otherwise that is refused here.
    """
    expected = {f.name: f for f in arrow_fields(table_schema)}
    got = {f.name: f for f in incoming}
    problems: list[str] = []
    missing = [n for n in expected if n not in got]
    extra = [n for n in got if n not in expected]
    widened: list[tuple[str, pa.DataType, pa.DataType]] = []
    if missing:
        problems.append(
            f"missing column(s) {missing}: a write never drops a column (nor renames one); add them to "
            "the DataFrame, as nulls if need be (e.g. lit(None).cast('<type>').alias('<column>'))")
    if extra and not merge:
        problems.append(f"column(s) {extra} not in the table: set {OPTION}=true (or mergeSchema=true) to add "
                        "them, or drop them from the DataFrame")
    keys = set(table_schema.partition_keys) | set(table_schema.primary_keys)
    for name in expected.keys() & got.keys():
        want, have = expected[name], got[name]
        if same_type(want.type, have.type):
            if have.nullable and not want.nullable and not nulls_checked:
                problems.append(f"column {name!r} is nullable but the table declares it NOT NULL")
            continue
        if widens(want.type, have.type):
            if name in keys:
                kind = "partition" if name in table_schema.partition_keys else "primary-key"
                problems.append(f"column {name!r} is {have.type} but the table has {want.type}: a {kind} "
                                f"column's type never changes; cast it to {want.type}")
            elif not merge:
                problems.append(f"column {name!r} is {have.type} but the table has {want.type}: cast it to "
                                f"{want.type}, or set {OPTION}=true to widen the table's column to {have.type}")
            elif have.nullable and not want.nullable and not nulls_checked:
                problems.append(f"column {name!r} is nullable but the table declares it NOT NULL")
            else:
                widened.append((name, want.type, have.type))
            continue
        if widens(have.type, want.type):
            problems.append(f"column {name!r} is {have.type} but the table has {want.type}: a table column is "
                            f"never narrowed; cast the DataFrame's column to {want.type}")
        elif merge:
            problems.append(f"column {name!r} is {have.type} but the table has {want.type}: {WIDENING_TEXT}, "
                            "nothing else (nested types do not evolve on write); cast the column to "
                            f"{want.type}, or write into a new table")
        else:
            problems.append(f"column {name!r} is {have.type} but the table has {want.type}")
    for name in extra if merge else []:
        problem = storable_problem(got[name])
        if problem:
            problems.append(problem)
    if problems:
        raise SchemaMismatchError(
            f"The data does not match table {table_path}: " + "; ".join(sorted(problems)) +
            f". Table columns: {', '.join(f'{f.name} {f.type}' for f in expected.values())}. "
            "Select/cast the DataFrame's columns to match; nothing was written.", table=table_path)
    if not extra and not widened:
        return None
    changes = [SchemaChange.update_column_type(name, PyarrowFieldParser.to_paimon_type(new, True), True)
               for name, _, new in sorted(widened)]
    changes += [SchemaChange.add_column(name, PyarrowFieldParser.to_paimon_type(got[name].type, True))
                for name in extra]  # in the DataFrame's order
    manager = SchemaManager(file_io, table_path)
    try:
        # pypaimon's own schema evolution, without writing (SchemaManager.commit_changes would).
        schema = manager._generate_table_schema(table_schema, changes)
    except Exception as exc:
        raise SchemaMismatchError(f"Table {table_path}: Paimon refuses the schema change ({exc}). "
                                  "Nothing was written.", table=table_path) from exc
    return SchemaEvolution(schema, tuple(extra),
                           tuple((n, str(old), str(new)) for n, old, new in sorted(widened)))


# ---------------------------------------------------------------- at commit

def same_columns(a: TableSchema, b: TableSchema) -> bool:
    """Same fields (ids, names, types, order): a schema written earlier by the same plan."""
    return [f.to_dict() for f in a.fields] == [f.to_dict() for f in b.fields]


def write_schema(table, manager: SchemaManager, schema: TableSchema) -> bool:
    """Create `schema-<id>` as pypaimon's `SchemaManager.commit` would (the same JSON), but with
    the table's atomic create-if-absent (`publish`): pypaimon's check-then-rename would replace
    a schema another writer created in between. False if that id exists."""
    from pypaimon.common.json_util import JSON
    path = f"{manager.schema_path.rstrip('/')}/{manager.schema_prefix}{schema.id}"
    created = publish.create_if_absent(table, path, JSON.to_json(schema, indent=2))
    manager.schema_cache.pop(schema.id, None)
    return created


def ensure_schemas(table, files: Sequence) -> bool:
    """Make every schema the files carry (`StagedFile.schema`) the table's; True if one was written.

    Files whose schema is taken by another writer's are pointed at a schema with
    exactly their columns (see the module docstring) or the commit is refused.
    """
    by_id: dict[int, list] = {}
    for f in files:
        if getattr(f, "schema", None) is not None:
            by_id.setdefault(f.meta.schema_id, []).append(f)
    if not by_id:
        return False
    written = False
    table_path = str(table.table_path)
    manager = SchemaManager(table.file_io, table_path)
    for schema_id in sorted(by_id):
        group = by_id[schema_id]
        ours = group[0].schema
        existing = manager.get_schema(schema_id)
        if existing is not None and same_columns(existing, ours):
            continue  # written before: by a commit that died after it, or the same plan elsewhere
        if existing is None:
            latest = manager.latest()
            if latest is not None and latest.id == schema_id - 1:
                if write_schema(table, manager, ours):
                    written = True
                    continue
                existing = manager.get_schema(schema_id)
                if existing is not None and same_columns(existing, ours):
                    continue
        written = _rebase(table, manager, group, ours) or written
    return written


def _rebase(table, manager: SchemaManager, files: Iterable, ours: TableSchema) -> bool:
    """Another writer's schema took our id: merge our columns into the latest schema and point
    the files there, if the result has exactly the files' columns. True if a schema was written."""
    table_path = str(table.table_path)
    latest = manager.latest()
    mine = pa.schema(arrow_fields(ours))
    try:
        evolution = plan(latest, mine, True, table_path, manager.file_io)
    except SchemaMismatchError as exc:
        raise _conflict(table_path, latest, ours, str(exc)) from None
    target = evolution.schema if evolution else latest
    if {f.name: f.type for f in arrow_fields(target)} != {f.name: f.type for f in mine}:
        raise _conflict(table_path, latest, ours, "its columns differ from this write's")
    wrote = False
    if evolution is not None:
        if not write_schema(table, manager, target):
            raise _conflict(table_path, latest, ours, "it changed again meanwhile")
        wrote = True
    names = [f.name for f in ours.fields]
    for f in files:
        # Dense statistics follow the order of the file's schema: name them, since the new
        # schema may order the same columns differently.
        stats_cols = f.meta.value_stats_cols if f.meta.value_stats_cols is not None else names
        f.meta = dataclasses.replace(f.meta, schema_id=target.id, value_stats_cols=list(stats_cols))
        f.schema = None if target is latest else target
    return wrote


def _conflict(table_path: str, latest: TableSchema, ours: TableSchema, why: str) -> CommitConflictError:
    return CommitConflictError(
        f"Table {table_path}: another writer changed the table's schema (now schema {latest.id}: "
        f"{', '.join(f.name for f in latest.fields)}) while this write evolved it to "
        f"{', '.join(f.name for f in ours.fields)}; {why}. Nothing of this write landed; run it again "
        "(it plans against the new schema).", table=table_path)


def schema_to_json(schema: TableSchema) -> str:
    from pypaimon.common.json_util import JSON
    return JSON.to_json(schema)


def schema_from_json(text: str) -> TableSchema:
    return TableSchema.from_json(text)
