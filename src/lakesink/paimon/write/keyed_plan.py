"""Planning a keyed write: open or plan the table, check the data fits, read sequence numbers.

The counterpart of `batch.prepare_target` for primary-key and fixed-bucket
tables. Writes nothing; every refusal happens here, before Spark starts.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from ... import storage
from ...errors import ConfigurationError, UnsupportedTableError
from ...options import WriteOptions
from .. import iceberg
from ..files.datafiles import TableLayout
from ..keyed.layout import KeyedSpec, is_keyed_table, sequences_and_buckets
from ..keyed.rules import check_aggregate_types, check_keyed_table
from ..table.publish import publication_kind
from .batch import NOT_OPENED, check_options_match, check_types, open_for_write, plan_layout
from ..commit.target import PaimonTarget, TableSpec

log = logging.getLogger(__name__)


def wants_keyed(path: str, options: WriteOptions, table=NOT_OPENED) -> bool:
    """Does this write go to (or create) a primary-key or fixed-bucket table? `table`: as the
    job opened it (`batch.open_for_write`; on a branch, the branch's schema decides)."""
    keyed_options = options.primary_keys or str(options.table_options.get("bucket", "-1")).strip() != "-1"
    if table is NOT_OPENED:
        table = open_for_write(path, options) if options.branch or not keyed_options else None
    return bool(keyed_options) or (table is not None and is_keyed_table(table))


def prepare_keyed_target(path: str, schema: pa.Schema, options: WriteOptions, plan_sequences: bool = True,
                         table=NOT_OPENED):
    """(target, layout, spec, next sequence numbers by (partition, bucket)) for one keyed write
    (streams plan sequence numbers per micro-batch: `plan_sequences=False` gives {}). `table`: as
    the job opened it (`batch.open_for_write`); the target holds it for the commit."""
    fs_options = options.fs_options or None
    # On a branch: its schema, its snapshots (sequence numbers, the conflict check, compaction).
    if table is NOT_OPENED:
        table = open_for_write(path, options)
    publication_kind(storage.normalize(path),
                     {**(table.table_schema.options if table else {}), **options.fs_options})
    if table is not None:
        if not is_keyed_table(table):
            raise ConfigurationError(
                f"{table.table_path} is an append table without primary key or fixed buckets (bucket=-1); "
                f"a write cannot add primary-key {options.primary_keys or ''} or "
                f"bucket={options.table_options.get('bucket', '-1')} to it."
            )
        check_keyed_table(table, options.primary_keys)
        if not options.branch:  # Iceberg metadata follows main only
            iceberg.check(table)  # Iceberg metadata follows keyed tables too (their highest level)
        check_options_match(table, options)
        spec = KeyedSpec.of_table(table)
        rowkind = options.table_options.get("rowkind.field")
        columns = [f.name for f in table.table_schema.fields]
        if rowkind and spec.rowkind_field is None:
            # Only writers read rowkind.field (how their input marks each row's kind), so a write
            # may name it for a table that stores none, as Paimon's dynamic options do: used for
            # this write, not stored. (It was silently ignored before: -D rows became upserts.)
            # A column the table does not have is read as the row kind and never stored.
            if rowkind not in columns and rowkind in schema.names:
                schema = pa.schema([f for f in schema if f.name != rowkind])
                columns = [*columns, rowkind]
            spec = KeyedSpec.resolve(table.primary_keys, table.partition_keys,
                                     {**table.table_schema.options, "rowkind.field": rowkind}, columns)
        layout = plan_layout(table, _keys_not_null(schema, table.primary_keys), options)
        target = PaimonTarget(path, fs_options=fs_options, branch=options.branch, table=table)
        latest = table.snapshot_manager().get_latest_snapshot()
        # Sequence numbers continue above what this snapshot holds: a commit landing in
        # our buckets after it would be overtaken by ours, so the commit checks from here.
        target.bucket_check_from = latest.id if latest else 0
        if plan_sequences:
            next_sequence, target.uniform_buckets = sequences_and_buckets(table)
        else:
            next_sequence = {}
    else:
        fmt = options.table_options.get("file.format", "parquet").lower()
        if fmt != "parquet":
            raise ConfigurationError(f"file.format={fmt!r}: lakesink writes Parquet tables only.")
        unknown = [k for k in options.partition_keys if k not in schema.names]
        if unknown:
            raise ConfigurationError(f"partition column(s) {unknown} are not among the data's columns {schema.names}.")
        check_types(schema)
        iceberg.check_new(schema, options.partition_keys, options.table_options, options.primary_keys, path=path)
        spec = KeyedSpec.resolve(options.primary_keys, options.partition_keys, options.table_options, schema.names)
        # Like Spark's file tables, columns are nullable, except the primary key (Paimon: NOT NULL);
        # null keys are refused row by row while Spark writes.
        table_schema = _keys_not_null(pa.schema([f.with_nullable(True) for f in schema]), spec.primary_keys)
        table_options = dict(options.table_options)
        table_options["bucket"] = str(spec.num_buckets)
        create = TableSpec(table_schema, options.partition_keys, list(spec.primary_keys), table_options)
        target = PaimonTarget(path, create=create, fs_options=fs_options)
        target.bucket_check_from = 0
        layout = TableLayout.for_new_table(table_schema, options.partition_keys)
        next_sequence = {}
    check_aggregate_types(spec, layout.arrow_schema())
    for name in spec.primary_keys:
        if pa.types.is_nested(schema.field(name).type):
            raise ConfigurationError(f"primary-key column {name!r} has nested type {schema.field(name).type}.")
    target.maintenance = options.maintenance
    if table is None and options.catalog_entry is not None:
        options.catalog_entry.create(target)  # a write by name: the table enters its catalog now
    return target, layout, spec, next_sequence


def plan_batch(target, identifier: int | None = None, pending=()) -> dict:
    """Sequence numbers for the next write into `target`, planned on its latest snapshot (and
    the commit checks from that snapshot that no one else wrote those buckets meanwhile).

    `identifier`: the checkpoint (micro-batch) planned, which keeps its own base snapshot
    while earlier ones commit. `pending`: committables of earlier batches accepted but perhaps
    not committed yet (pipelined); the plan continues above them too. Read them before this
    call: a batch that commits in between is then in the snapshot read here."""
    table = target.table(refresh=True)
    latest = table.snapshot_manager().get_latest_snapshot() if table is not None else None
    # The base snapshot before the sequence numbers: whatever lands after it is checked.
    check_from = latest.id if latest else 0
    next_sequence, uniform = sequences_and_buckets(table) if latest else ({}, None)
    if identifier is None:
        target.bucket_check_from, target.uniform_buckets = check_from, uniform
    else:
        target.plan_check_from(identifier, check_from, uniform)
    return continue_above(next_sequence, pending)


def continue_above(next_sequence: dict[tuple, int], files) -> dict[tuple, int]:
    """`next_sequence` raised above the sequence numbers of `files` (committables of earlier
    batches that may not be in the table yet: pipelined commits), per (partition, bucket).
    A later batch must never order below an earlier one for the same key."""
    out = dict(next_sequence)
    for f in files:
        key = (tuple(f.partition), f.bucket)
        top = f.meta.max_sequence_number + 1
        if top > out.get(key, 0):
            out[key] = top
    return out


def _keys_not_null(schema: pa.Schema, keys) -> pa.Schema:
    return pa.schema([f.with_nullable(False) if f.name in keys else f for f in schema])


def compacts_automatically(target: PaimonTarget, options: WriteOptions) -> bool:
    """Whether this keyed write compacts its buckets after its commit: primary-key tables do,
    unless `write-only` (docs/compaction.md); the table's own options, or the write's for a new one."""
    from ..compaction.keyed_aggregator import compacts_after_commit
    from ..keyed.lsm_policy import check_compactable
    table = target.table()
    if table is None:
        return compacts_after_commit(options.table_options, target.create.primary_keys if target.create else [])
    if not compacts_after_commit(dict(table.table_schema.options), table.primary_keys):
        return False
    try:
        check_compactable(table)
    except UnsupportedTableError as exc:  # written, never compacted by lakesink (docs/compaction.md)
        log.info("%s is not compacted after writes: %s", target.path, exc)
        return False
    return True

