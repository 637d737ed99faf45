"""Paimon's schema as Iceberg sees it: column types, the name mapping, the partition spec.

Iceberg field ids are Paimon's field ids, so readers resolve columns by id across renames and
added columns, as Paimon does. lakesink's Parquet files carry no field ids, so the metadata also
holds Iceberg's default name mapping (`schema.name-mapping.default`): every name a field id had in
any schema of the table."""

from __future__ import annotations

import re

from pypaimon.schema.data_types import AtomicType, DataField, RowType

from ...errors import UnsupportedTableError

# Iceberg's first partition field id (ids of partition fields live apart from column ids).
FIRST_PARTITION_FIELD_ID = 1000

_SIMPLE = {"BOOLEAN": "boolean", "TINYINT": "int", "SMALLINT": "int", "INT": "int", "INTEGER": "int",
           "BIGINT": "long", "FLOAT": "float", "DOUBLE": "double", "DATE": "date", "STRING": "string",
           "VARCHAR": "string", "CHAR": "string", "BYTES": "binary", "VARBINARY": "binary", "BINARY": "binary"}
_TIMESTAMP = re.compile(r"^TIMESTAMP(_LTZ| WITH LOCAL TIME ZONE)?(?:\((\d+)\))?")
_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)")
# Identity partition values as manifests store them (Avro), by Iceberg type: the types Paimon's
# partition values come in as plain Python values.
PARTITION_AVRO = {"boolean": "boolean", "int": "int", "long": "long", "float": "float", "double": "double",
                  "string": "string", "date": {"type": "int", "logicalType": "date"}}


def _base(type_text: str) -> str:
    return type_text.replace(" NOT NULL", "").strip().upper()


def iceberg_type(field_name: str, data_type) -> str | dict:
    """The Iceberg type of a Paimon type (`UnsupportedTableError` naming the column otherwise)."""
    if isinstance(data_type, RowType):
        return {"type": "struct", "fields": [iceberg_field(f) for f in data_type.fields]}
    if not isinstance(data_type, AtomicType):
        raise UnsupportedTableError(f"column {field_name!r} is {data_type}: lakesink writes Iceberg metadata for "
                          "scalar and ROW columns only (no ARRAY, MAP, MULTISET, VECTOR or VARIANT yet)")
    text = _base(data_type.type)
    simple = _SIMPLE.get(text.split("(")[0])
    if simple is not None:
        return simple
    decimal = _DECIMAL.match(text)
    if decimal:
        return f"decimal({decimal.group(1)}, {decimal.group(2)})"
    timestamp = _TIMESTAMP.match(text)
    if timestamp:
        precision = int(timestamp.group(2) or 6)
        if not 3 <= precision <= 6:  # Iceberg v2 timestamps are microseconds; Paimon refuses < 3 too
            raise UnsupportedTableError(f"column {field_name!r} is {text}: Iceberg v2 metadata describes timestamps "
                              "of precision 3 to 6 only")
        return "timestamptz" if timestamp.group(1) else "timestamp"
    raise UnsupportedTableError(f"column {field_name!r} is {text}, which lakesink's Iceberg metadata does not map "
                      "(TIME and other types: not yet)")


def iceberg_field(field: DataField) -> dict:
    out = {"id": field.id, "name": field.name, "required": not field.type.nullable,
           "type": iceberg_type(field.name, field.type)}
    if field.description:
        out["doc"] = field.description
    return out


def iceberg_schema(schema_id: int, fields: list[DataField]) -> dict:
    return {"type": "struct", "schema-id": schema_id, "fields": [iceberg_field(f) for f in fields]}


def highest_field_id(fields: list[DataField]) -> int:
    ids = [-1]
    for f in fields:
        ids.append(f.id)
        if isinstance(f.type, RowType):
            ids.append(highest_field_id(f.type.fields))
    return max(ids)


def partition_fields(fields: list[DataField], partition_keys: list[str]) -> list[dict]:
    """Identity transforms of the partition keys, in Paimon's order."""
    by_name = {f.name: f for f in fields}
    out = []
    for i, key in enumerate(partition_keys):
        source = by_name[key]
        kind = iceberg_type(key, source.type)
        if not isinstance(kind, str) or kind not in PARTITION_AVRO:
            raise UnsupportedTableError(f"partition column {key!r} is {source.type}: lakesink's Iceberg metadata takes "
                              f"partition columns of types {', '.join(sorted(PARTITION_AVRO))} only")
        out.append({"name": key, "transform": "identity", "source-id": source.id,
                    "field-id": FIRST_PARTITION_FIELD_ID + i, "type": kind})
    return out


def name_mapping(schemas: list[list[DataField]]) -> list[dict]:
    """Iceberg's name mapping over all of a table's schemas, newest last: each field id with every
    name it had (the newest first), so files written before a rename read by id."""
    names: dict[int, list[str]] = {}
    children: dict[int, list[list[DataField]]] = {}
    order: list[int] = []
    for fields in reversed(schemas):
        for f in fields:
            if f.id not in names:
                names[f.id], children[f.id] = [], []
                order.append(f.id)
            if f.name not in names[f.id]:
                names[f.id].append(f.name)
            if isinstance(f.type, RowType):
                children[f.id].append(f.type.fields)
    out = []
    for field_id in sorted(order):
        entry = {"field-id": field_id, "names": names[field_id]}
        if children[field_id]:
            entry["fields"] = name_mapping(list(reversed(children[field_id])))
        out.append(entry)
    return out


# Field ids Paimon gives the key-value columns of a primary-key table's data files (its
# `SpecialFields`): far above any column id, so readers project them away.
KEY_FIELD_ID_START = (2**31 - 1) // 2     # Integer.MAX_VALUE / 2; `_KEY_<k>` is this + the id of k
SEQUENCE_NUMBER_ID = 2**31 - 2            # Integer.MAX_VALUE - 1
VALUE_KIND_ID = 2**31 - 3                 # Integer.MAX_VALUE - 2


def key_value_mapping(schemas: list[list[DataField]], primary_keys: list[str]) -> list[dict]:
    """Name-mapping entries of the columns a primary-key table's data files hold besides the
    table's: `_KEY_<k>` per key column (every name it had), `_SEQUENCE_NUMBER`, `_VALUE_KIND`, under
    the ids Paimon's Java writer stores in its Parquet files. Readers such as pyiceberg map every
    column of a file without field ids and fail on one the mapping lacks; the ids are in no Iceberg
    schema, so no reader returns them."""
    if not primary_keys:
        return []
    newest = {f.name: f.id for f in schemas[-1]} if schemas else {}
    key_ids = [newest[k] for k in primary_keys if k in newest]
    names: dict[int, list[str]] = {i: [] for i in key_ids}
    for fields in reversed(schemas):
        for f in fields:
            if f.id in names and f"_KEY_{f.name}" not in names[f.id]:
                names[f.id].append(f"_KEY_{f.name}")
    out = [{"field-id": KEY_FIELD_ID_START + i, "names": names[i]} for i in sorted(key_ids)]
    return out + [{"field-id": VALUE_KIND_ID, "names": ["_VALUE_KIND"]},
                  {"field-id": SEQUENCE_NUMBER_ID, "names": ["_SEQUENCE_NUMBER"]}]


def reused_name(schemas: list[list[DataField]]) -> str | None:
    """Why the name mapping cannot describe these schemas (oldest first), or None: a name that two
    field ids had (a column dropped and another added under its name). Files written before would
    read the dropped column's values as the new column's, where Paimon reads nulls."""
    owners: dict[str, int] = {}
    nested: dict[int, list[list[DataField]]] = {}
    for fields in schemas:
        for f in fields:
            if owners.setdefault(f.name, f.id) != f.id:
                return (f"column name {f.name!r} belonged to field {owners[f.name]} and then to field {f.id} "
                        "(dropped and added again): Iceberg readers map the names of files without field ids, "
                        "so older files would show the dropped column's values")
            if isinstance(f.type, RowType):
                nested.setdefault(f.id, []).append(f.type.fields)
    for children in nested.values():
        reason = reused_name(children)
        if reason is not None:
            return reason
    return None


def problem(fields: list[DataField], partition_keys: list[str]) -> str | None:
    """Why Iceberg metadata cannot describe a table of these columns, or None."""
    try:
        for f in fields:
            iceberg_type(f.name, f.type)
        partition_fields(fields, partition_keys)
    except UnsupportedTableError as exc:
        return str(exc)
    return None
