"""One write job against a Paimon table, independent of the engine that runs it.

`BatchWrite.plan` checks everything before a byte is written (options, mode,
schema, table kind) and picks the job's staging directory; the engine writes
Parquet files there; `commit` hands their metadata to the committer; `abort`
removes everything. Staging is per job, so files of failed or speculative task
attempts, which the engine never reports, go with the directory.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigurationError
from ..options import WriteOptions
from ..protocol import Committer, CommitReport, Overwrite
from . import tables
from .datafiles import StagedFile, TableLayout, describe_parquet
from .publish import publication_kind
from .target import PaimonTarget, TableSpec

log = logging.getLogger(__name__)

BATCH_IDENTIFIER = 0x7FFFFFFFFFFFFFFF  # Paimon's identifier for one-off batch commits
MODES = ("append", "overwrite")


def new_token() -> str:
    return uuid.uuid4().hex[:16]


@dataclass
class BatchWrite:
    target: PaimonTarget
    layout: TableLayout
    commit_user: str
    identifier: int
    anonymous: bool  # no user-given identity: no replay to recognise later
    overwrite: Overwrite | None
    staging_dir: str
    compression: str
    aggregate: bool = False  # option aggregator.enabled: combine small files after the commit

    @classmethod
    def plan(cls, path: str, schema: pa.Schema, options: WriteOptions, mode: str,
             path_name: str) -> BatchWrite:
        mode = (mode or "append").lower()
        if mode not in MODES:
            raise ConfigurationError(
                f"Save mode {mode!r} is not supported: use 'append' or 'overwrite' "
                "(Paimon tables have no error/ignore semantics for existing data)."
            )
        if options.commit_user is not None and options.commit_identifier is None:
            # Without an identifier a re-run cannot be told from a new run: refusing is
            # safer than skipping the second run, or committing the first one twice.
            raise ConfigurationError(
                f"commit.user={options.commit_user!r} needs commit.identifier for a batch write: give both "
                "(a stable user and an increasing number, e.g. the run number) for idempotent re-runs, "
                "or neither."
            )
        target, layout = prepare_target(path, schema, options, path_name)
        anonymous = options.commit_user is None
        commit_user = options.commit_user or f"lakesink-batch-{uuid.uuid4()}"
        identifier = options.commit_identifier if options.commit_identifier is not None else BATCH_IDENTIFIER
        overwrite = Overwrite(dynamic=options.dynamic_overwrite) if mode == "overwrite" else None
        staging = f"{target.lakesink_dir()}/staging/{new_token()}"
        compression = options.table_options.get("file.compression") or "snappy"
        return cls(target, layout, commit_user, identifier, anonymous, overwrite, staging, compression,
                   options.aggregator)

    def committer(self) -> Committer:
        return Committer(self.target, self.commit_user)

    def already_committed(self) -> bool:
        return not self.anonymous and self.committer().is_committed(self.identifier)

    def commit(self, files: Sequence[StagedFile], properties: dict[str, str] | None = None) -> CommitReport:
        try:
            report = self.committer().commit(self.identifier, files, self.overwrite, properties)
            if self.aggregate:
                from .compaction import aggregate_batch
                aggregate_batch(self.target, self.commit_user, report, files, forget_user=self.anonymous)
            if self.anonymous:
                self.target.forget_commit_user(self.commit_user)
            return report
        finally:
            self.remove_staging()

    def abort(self, files: Sequence[StagedFile]) -> None:
        try:
            self.committer().abort(files, None if self.anonymous else self.identifier)
        finally:
            self.remove_staging()

    def remove_staging(self) -> None:
        self.target.file_io.delete_directory_quietly(self.staging_dir)

    def describe_staged(self, paths: Sequence[str]) -> list[StagedFile]:
        return describe_files(paths, self.layout, self.target.file_io)


def prepare_target(path: str, schema: pa.Schema, options: WriteOptions,
                   path_name: str) -> tuple[PaimonTarget, TableLayout]:
    """Open (or plan to create) the table and check the data fits it. Writes nothing."""
    if options.primary_keys:
        raise ConfigurationError(
            "primary-key: lakesink cannot create primary-key tables yet; create the table with "
            "pypaimon and write it with pypaimon's table writer."
        )
    fs_options = options.fs_options or None
    table = tables.open_table(path, fs_options)
    # Refuse storages without an atomic snapshot publication before anything is written.
    publication_kind(tables.normalize_path(path),
                     {**(table.table_schema.options if table else {}), **options.fs_options})
    if table is not None:
        tables.check_writable(table, path_name)
        tables.check_schema(table, schema)
        _check_options_match(table, options)
        target = PaimonTarget(path, fs_options=fs_options)
        target.maintenance = options.maintenance
        return target, TableLayout.of(table)
    fmt = options.table_options.get("file.format", "parquet").lower()
    if fmt != "parquet":
        raise ConfigurationError(f"file.format={fmt!r}: lakesink writes Parquet tables only.")
    bucket = options.table_options.get("bucket", "-1")
    if bucket.strip() != "-1":
        raise ConfigurationError(
            f"bucket={bucket!r}: {path_name} creates unaware-bucket append tables only (bucket=-1)."
        )
    unknown = [k for k in options.partition_keys if k not in schema.names]
    if unknown:
        raise ConfigurationError(f"partition column(s) {unknown} are not among the data's columns {schema.names}.")
    _check_types(schema)
    # Like Spark's own file tables, created columns are nullable: a later write of the
    # same query shape must not fail because one DataFrame happened to be non-null.
    table_schema = pa.schema([f.with_nullable(True) for f in schema])
    table_options = dict(options.table_options)
    table_options.setdefault("bucket", "-1")
    spec = TableSpec(table_schema, options.partition_keys, [], table_options)
    target = PaimonTarget(path, create=spec, fs_options=fs_options)
    target.maintenance = options.maintenance
    return target, TableLayout.for_new_table(table_schema, options.partition_keys)


def _check_types(schema: pa.Schema) -> None:
    from pypaimon.schema.data_types import PyarrowFieldParser
    for field in schema:
        try:
            PyarrowFieldParser.to_paimon_type(field.type, field.nullable)
        except ValueError:
            raise ConfigurationError(f"column {field.name!r} has type {field.type}, which Paimon cannot store.") from None
        if pa.types.is_large_binary(field.type) or pa.types.is_null(field.type):
            raise ConfigurationError(f"column {field.name!r} has type {field.type}, which lakesink cannot write.")


def _check_options_match(table, options: WriteOptions) -> None:
    if options.partition_keys and list(options.partition_keys) != list(table.partition_keys):
        raise ConfigurationError(
            f"partition columns {options.partition_keys} differ from the table's {table.partition_keys}; "
            "the partitioning of an existing table cannot be changed by a write."
        )
    for key, value in options.table_options.items():
        current = table.table_schema.options.get(key)
        if current is not None and current != value:
            raise ConfigurationError(
                f"option {key}={value!r} contradicts the table's {key}={current!r}; "
                "table options of an existing table are changed with ALTER TABLE, not by a write."
            )


def describe_files(paths: Sequence[str], layout: TableLayout, file_io) -> list[StagedFile]:
    """Describe staged Parquet files from their footers (threaded: footers are small reads)."""
    def one(p: str) -> StagedFile | None:
        with file_io.new_input_stream(p) as stream:
            metadata = pq.read_metadata(stream)
        if metadata.num_rows == 0:
            file_io.delete_quietly(p)
            return None
        return describe_parquet(p, layout, file_io, metadata=metadata)

    if len(paths) <= 2:
        described = [one(p) for p in paths]
    else:
        with ThreadPoolExecutor(min(16, len(paths))) as pool:
            described = list(pool.map(one, paths))
    return [d for d in described if d is not None]


def list_parquet_files(file_io, directory: str) -> list[str]:
    """Data files Spark left in a staging directory (skipping _temporary and hidden files)."""
    from pyarrow import fs as pafs

    from ..protocol.state import filesystem_for
    filesystem, root = filesystem_for(directory)
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return []
    out = []
    for info in infos:
        rel = info.path[len(root):]
        if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
            continue
        if any(part.startswith(("_", ".")) for part in rel.strip("/").split("/")):
            continue
        out.append(info.path if "://" not in directory else directory.split("://")[0] + "://" + info.path)
    return sorted(out)
