"""One write job against a Paimon table, independent of the engine that runs it.

`BatchWrite.plan` checks everything before a byte is written (options, mode,
schema, table kind) and picks the job's staging directory; the engine writes
Parquet files there; `commit` hands their metadata to the committer; `abort`
removes everything. Staging is per job, so files of failed or speculative task
attempts, which the engine never reports, go with the directory.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import CommitStateUnknownError, ConfigurationError, UnsupportedTableError
from ...options import BATCH_IDENTIFIER, WriteOptions
from ...protocol import Committer, CommitReport, Overwrite
from ... import storage
from ..table import branches, evolution, tables
from ..commit import intents
from .. import iceberg
from ..files.datafiles import StagedFile, TableLayout, describe_parquet
from ..table.publish import publication_kind
from ..commit.target import PaimonTarget, TableSpec

if TYPE_CHECKING:
    from ..compaction.rewrite import Rewriter

log = logging.getLogger(__name__)

MODES = ("append", "overwrite")


# `table=` of the planning functions: not opened yet (they open it themselves).
NOT_OPENED = object()


def open_for_write(path: str, options: WriteOptions):
    """The table a write goes to, as its job opens it once (None: not there yet) and hands down
    to its planning, commit and maintenance. On a branch: the branch's table, after refusing a
    write to a branch or table that does not exist."""
    fs_options = options.fs_options or None
    if options.branch:
        main = tables.open_table(path, fs_options)
        branches.check_writable(path, main, options.branch)
        return main if branches.is_main(options.branch) else branches.open_branch(main, options.branch)
    return tables.open_table(path, fs_options)


def new_token() -> str:
    return uuid.uuid4().hex[:16]


def identity_prefix(commit_user: str, identifier: int) -> str:
    """How the staging tokens of a job with a user-given identity begin: a re-run after a dead
    driver finds the dead run's staging by it and removes what that run left."""
    return "id-" + hashlib.sha1(f"{commit_user}\0{identifier}".encode()).hexdigest()[:16] + "-"


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
    rewriter: Rewriter | None = None  # the engine's distributed rewrite for the aggregator (else threads)
    # Option write.in-place: tasks of the Spark-native path write data files at their table paths
    # (paimon.commit.intents); ending the job then also removes what its attempts' intents name.
    in_place: bool = False

    @classmethod
    def plan(cls, path: str, schema: pa.Schema, options: WriteOptions, mode: str,
             path_name: str, session_overwrite_mode: str | None = None, prepare=None,
             table=NOT_OPENED) -> BatchWrite:
        """`session_overwrite_mode`: the engine session's partition overwrite mode
        (Spark's `spark.sql.sources.partitionOverwriteMode`), where the engine can tell it.
        `prepare`: how to open or plan the target (keyed tables bring their own). `table`: the
        table as the job opened it (`open_for_write`), else opened here."""
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
        # `prepare`: keyed writes plan their target themselves (paimon.write.keyed_plan).
        if prepare is not None:
            target, layout = prepare(path, schema, options, path_name)
        else:
            target, layout = prepare_target(path, schema, options, path_name, table=table)
        anonymous = options.commit_user is None
        commit_user = options.commit_user or f"lakesink-batch-{uuid.uuid4()}"
        identifier = options.commit_identifier if options.commit_identifier is not None else BATCH_IDENTIFIER
        overwrite = None
        if mode == "overwrite" and options.overwrite_partition:
            overwrite = Overwrite(partitions=(dict(options.overwrite_partition),))
        elif mode == "overwrite":
            overwrite = Overwrite(dynamic=_dynamic_overwrite(options, session_overwrite_mode, target, path_name))
        if overwrite is not None:
            check_overwritable(target, overwrite)
        token = new_token() if anonymous else identity_prefix(commit_user, identifier) + new_token()[:8]
        staging = f"{target.lakesink_dir()}/staging/{token}"
        compression = options.table_options.get("file.compression") or "snappy"
        return cls(target, layout, commit_user, identifier, anonymous, overwrite, staging, compression,
                   options.aggregator, in_place=intents.in_place(target.path, options.in_place))

    def committer(self) -> Committer:
        return Committer(self.target, self.commit_user)

    def already_committed(self) -> bool:
        """A re-run of a job this identity already committed (logged at WARNING when it is)."""
        return not self.anonymous and self.committer().skips_as_replay(self.identifier, self.target.describe())

    def commit(self, files: Sequence[StagedFile], properties: dict[str, str] | None = None) -> CommitReport:
        report = None
        try:
            report = self.committer().commit(self.identifier, files, self.overwrite, properties)
            if self.aggregate:
                from ..compaction.wiring import aggregate_batch
                aggregate_batch(self.target, self.commit_user, report, files, forget_user=self.anonymous,
                                distributed=self.rewriter, in_place=self.in_place)
        except CommitStateUnknownError:
            # The intents must stay (files written in place, staged files already placed): whether
            # their files belong to the table is unknown. clean_staging decides later.
            raise
        except BaseException:
            self.remove_staging(report)
            raise
        self.remove_staging(report)
        if self.anonymous:  # after the sweep: it looks the commit up by this user
            self.target.forget_commit_user(self.commit_user)
        return report

    def abort(self, files: Sequence[StagedFile]) -> None:
        try:
            # With the identifier also for a one-off user: Spark aborts after a commit() that raised,
            # and a snapshot that landed keeps its files.
            self.committer().abort(files, self.identifier)
        finally:
            self.remove_staging()

    def remove_staging(self, report: CommitReport | None = None) -> None:
        """Remove the job's staging; first what its intents name (files written in place, staged
        files placed by a commit, also of a dead run with the same identity) and its snapshot (if
        it landed) did not add."""
        known = report is not None and not report.skipped_replay and report.snapshot_id is not None
        stagings = [self.staging_dir] + ([] if self.anonymous else self._dead_runs())
        for staging in stagings:
            if staging == self.staging_dir and not self.in_place and not intents.read_intents(
                    staging, self.target.fs_options):
                self.target.file_io.delete_directory_quietly(staging)  # the common case: nothing named
                continue
            try:
                intents.sweep(self.target, staging, self.commit_user, self.identifier,
                              report.snapshot_id if known else None)
            except Exception as exc:  # noqa: BLE001 - the job's outcome stands; clean_staging retries
                log.warning("%s: could not remove what failed attempts wrote (%s); the staging stays for "
                            "clean_staging", staging, exc)
                continue
            self.target.file_io.delete_directory_quietly(staging)

    def _dead_runs(self) -> list[str]:
        """Staging directories of earlier runs with this job's identity (their drivers died)."""
        root, own = self.staging_dir.rsplit("/", 1)
        prefix = identity_prefix(self.commit_user, self.identifier)
        return [e.path.rstrip("/") for e in storage.list_dir(root, self.target.fs_options, files_only=False)
                if e.path.rstrip("/").rsplit("/", 1)[-1].startswith(prefix)
                and e.path.rstrip("/").rsplit("/", 1)[-1] != own]

    def describe_staged(self, paths: Sequence[str]) -> list[StagedFile]:
        return describe_files(paths, self.layout, self.target.file_io)


def _dynamic_overwrite(options: WriteOptions, session_mode: str | None, target: PaimonTarget,
                       path_name: str) -> bool:
    """Whether an overwrite replaces only the partitions written: the write's option, else the
    session's setting; a partitioned table with neither is refused rather than guessed at (a
    static guess would wipe a table whose writer meant dynamic)."""
    if options.dynamic_overwrite is not None:
        return options.dynamic_overwrite
    if session_mode is not None:
        return session_mode.strip().lower() == "dynamic"
    table = target.table()
    partitioned = table.partition_keys if table is not None else (target.create.partition_keys if target.create else [])
    if not partitioned:
        return False
    raise ConfigurationError(
        f"{path_name}: overwrite of the partitioned table {target.path} needs to know which partitions to "
        "replace, and Spark does not pass spark.sql.sources.partitionOverwriteMode to a Python data "
        "source. Say it on the write: .option('partitionOverwriteMode', 'dynamic') (only the partitions "
        "written) or 'static' (the whole table); or write with lakesink.write, which reads the session's "
        "setting. Nothing was written.", option="partitionOverwriteMode", table=target.path)


def prepare_target(path: str, schema: pa.Schema, options: WriteOptions,
                   path_name: str, table=NOT_OPENED) -> tuple[PaimonTarget, TableLayout]:
    """Open (or plan to create) an unaware-bucket append table and check the data fits it.
    Writes nothing. Primary-key and fixed-bucket tables are planned by
    `keyed_target.prepare_keyed_target` (every write path asks `keyed_target.wants_keyed` first).
    `table`: as the job opened it (`open_for_write`); the target holds it for the commit."""
    if options.primary_keys:
        raise ConfigurationError(
            f"primary-key: {path_name} planned a write with primary-key {options.primary_keys} as an append "
            "write; keyed writes are planned by paimon.write.keyed_plan.prepare_keyed_target. Nothing was written."
        )
    for key in ("rowkind.field", "sequence.field"):
        if options.table_options.get(key):
            raise ConfigurationError(
                f"{key} applies to primary-key tables only, and {path_name} writes this table as an append "
                "table: " + ("rows marked -D or -U would be kept as plain rows" if key == "rowkind.field" else
                             "no versions of a key would ever be merged by it") + ". Give the table a primary key "
                "(primary_key=[...] or the option primary-key) when creating it. Nothing was written.", option=key)
    fs_options = options.fs_options or None
    if table is NOT_OPENED:
        table = open_for_write(path, options)
    # Refuse storages without an atomic snapshot publication before anything is written.
    publication_kind(storage.normalize(path),
                     {**(table.table_schema.options if table else {}), **options.fs_options})
    if table is not None:
        tables.check_writable(table, path_name)
        if not options.branch:
            iceberg.check(table)
        check_options_match(table, options)
        layout = plan_layout(table, schema, options)
        target = PaimonTarget(path, fs_options=fs_options, branch=options.branch, table=table)
        target.maintenance = options.maintenance
        return target, layout
    fmt = options.table_options.get("file.format", "parquet").lower()
    if fmt != "parquet":
        raise ConfigurationError(f"file.format={fmt!r}: lakesink writes Parquet tables only.")
    bucket = options.table_options.get("bucket", "-1")
    if bucket.strip() != "-1":
        raise ConfigurationError(
            f"bucket={bucket!r}: {path_name} planned a fixed-bucket table as an unaware-bucket append table "
            "(bucket=-1); keyed writes are planned by paimon.write.keyed_plan.prepare_keyed_target."
        )
    unknown = [k for k in options.partition_keys if k not in schema.names]
    if unknown:
        raise ConfigurationError(f"partition column(s) {unknown} are not among the data's columns {schema.names}.")
    check_types(schema)
    iceberg.check_new(schema, options.partition_keys, options.table_options, path=path)
    # Like Spark's own file tables, created columns are nullable: a later write of the
    # same query shape must not fail because one DataFrame happened to be non-null.
    table_schema = pa.schema([f.with_nullable(True) for f in schema])
    table_options = dict(options.table_options)
    table_options.setdefault("bucket", "-1")
    spec = TableSpec(table_schema, options.partition_keys, [], table_options)
    target = PaimonTarget(path, create=spec, fs_options=fs_options)
    target.maintenance = options.maintenance
    if options.catalog_entry is not None:
        # A write by name to a table its catalog does not hold: created and entered into the
        # catalog now, as Spark's saveAsTable creates a table before writing into it.
        options.catalog_entry.create(target)
    return target, TableLayout.for_new_table(table_schema, options.partition_keys)


def plan_layout(table, schema: pa.Schema, options: WriteOptions) -> TableLayout:
    """How this write's files are laid out: the table's schema, or (write.merge-schema) its next
    schema, which the commit writes before the snapshot. Refusals name every column. A nullable
    column may go into a NOT NULL one: every write path checks the rows (`TableLayout.not_null`)."""
    planned = evolution.plan(table.table_schema, schema, options.merge_schema, str(table.table_path),
                             table.file_io, nulls_checked=True)
    if planned is None:
        return TableLayout.of(table)
    log.info("%s: schema evolution planned (schema %s): %s", table.table_path, planned.schema.id,
             planned.describe())
    return TableLayout.evolved(table, planned.schema)


check_types = evolution.check_types


# Table options that decide the table's layout, how its rows merge or what its commits write beside
# the snapshot (Iceberg metadata), with Paimon's defaults: a write naming one checks it against the
# table's value, set or not (never applied to one write).
_LAYOUT_DEFAULTS = {"bucket": "-1", "merge-engine": "deduplicate", "changelog-producer": "none",
                    "file.format": "parquet", "sequence.field": None, "row-tracking.enabled": "false",
                    "metadata.iceberg.storage": "disabled", "metadata.iceberg.storage-location": None,
                    "deletion-vectors.enabled": "false"}


def check_overwritable(target: PaimonTarget, overwrite: Overwrite | None = None) -> None:
    """Refuse, before anything is written, an overwrite lakesink cannot commit: a deletion-vector
    table holding snapshots (the commit refuses it too; a new or empty one is written as an append);
    an overwrite of some partitions of a cross-partition table holding snapshots."""
    table = target.table()
    partial = overwrite is not None and (overwrite.dynamic or overwrite.partitions is not None)
    if (partial and table is not None and table.is_primary_key_table and table.table_schema.cross_partition_update()
            and str(table.table_schema.options.get("bucket", "-1")).strip() == "-1"
            and table.snapshot_manager().get_latest_snapshot() is not None):
        raise ConfigurationError(
            f"{target.path} is a cross-partition table (its primary key {table.primary_keys} lacks partition "
            f"columns of {table.partition_keys}, bucket=-1): an overwrite of some of its partitions would leave "
            "the keys it writes in the partitions it keeps as well. Overwrite the whole table (mode "
            "'overwrite' with partitionOverwriteMode=static and no partition), or write upserts (mode "
            "'append'). Nothing was written.", option="partitionOverwriteMode", table=target.path)
    if (table is not None and table.is_primary_key_table and table.options.deletion_vectors_enabled()
            and table.snapshot_manager().get_latest_snapshot() is not None):
        raise UnsupportedTableError(
            f"{target.path} has deletion-vectors.enabled=true: lakesink does not overwrite such a table yet "
            "(its deletion vectors would outlive the replaced files). Write the changes as upserts and deletes, "
            "or overwrite it with Apache Paimon's Java writers. Nothing was written.", table=target.path)


def check_options_match(table, options: WriteOptions) -> None:
    if options.partition_keys and list(options.partition_keys) != list(table.partition_keys):
        raise ConfigurationError(
            f"partition columns {options.partition_keys} differ from the table's {table.partition_keys}; "
            "the partitioning of an existing table cannot be changed by a write."
        )
    for key, value in options.table_options.items():
        current = table.table_schema.options.get(key, _LAYOUT_DEFAULTS.get(key))
        if key in _LAYOUT_DEFAULTS and current is None:
            raise ConfigurationError(
                f"option {key}={value!r}: the table has no {key}, and a write cannot add it (it changes how "
                "the table's rows merge); table options of an existing table are changed with ALTER TABLE.")
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
