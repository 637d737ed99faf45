"""Planning reads of Paimon tables with pypaimon: which snapshot, which data files.

Engine-neutral: the Spark binding turns the result into a DataFrame.

* `resolve_snapshot` — time travel by snapshot id, tag or timestamp; a snapshot
  that does not exist (never did, or expired) is an error naming the range
  still available.
* `plan_snapshot` — the data files of one snapshot, pruned by partition values
  and min/max statistics (pypaimon's `FileScanner`).
* `plan_added` — the rows *added* between two snapshots, for streaming. Which
  snapshots count (Paimon's own streaming semantics for tables without a
  changelog producer):
  - APPEND: read its added files.
  - COMPACT: skipped — it rewrites rows that were already delivered.
  - OVERWRITE: skipped by default. An overwrite *replaces* rows, which an
    append-only stream cannot express (there is no way to retract the rows it
    removed). Like Paimon's Flink/Spark sources, `streaming-read-overwrite=true`
    delivers the rows the overwrite added (and still retracts nothing), so a
    downstream copy then holds the old and the new rows.
  - ANALYZE and other metadata-only kinds add no files.
* `record_consumer` — a streaming reader's progress in Paimon's consumer file,
  replaced atomically (pypaimon rewrites it in place: a kill mid-write would
  leave a torn file that breaks expiry and the next query with that consumer).
* `Filter` — simple column predicates (`("dt", "=", "2024-01-01")`) used for
  pruning only: callers always evaluate the full filter on the rows too, so a
  file kept by mistake costs time, never correctness.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from pypaimon.common.predicate import Predicate
from pypaimon.common.predicate_builder import PredicateBuilder
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.read.scanner.file_scanner import FileScanner
from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.table.file_store_table import FileStoreTable

from ... import storage
from ...filters import Filter
from ...errors import ConfigurationError, SnapshotNotFoundError, TableNotFoundError, UnsupportedTableError
from ..table.branches import branch_path
from ..table.tables import open_table

log = logging.getLogger(__name__)


COMMIT_KINDS_ADDING_ROWS = ("APPEND",)


def open_for_read(path: str, fs_options: dict | None = None, branch: str | None = None) -> FileStoreTable:
    """The table to read (on `branch`, which must exist, when given)."""
    table = open_table(path, fs_options, branch)
    if table is None:
        raise TableNotFoundError(f"There is no Paimon table at {path}: nothing to read.", table=path)
    return table


def available_range(table: FileStoreTable) -> tuple[int, int] | None:
    """(earliest, latest) snapshot ids still in the table, or None when it has none."""
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    if latest is None:
        return None
    earliest = manager.try_get_earliest_snapshot()
    return (earliest.id if earliest else latest.id), latest.id


def describe_range(table: FileStoreTable) -> str:
    span = available_range(table)
    if span is None:
        return "the table has no snapshots yet"
    earliest, latest = span
    manager = table.snapshot_manager()
    first, last = manager.get_snapshot_by_id(earliest), manager.get_snapshot_by_id(latest)
    return (f"available snapshots are {earliest}..{latest} "
            f"(committed {_iso(first.time_millis)} .. {_iso(last.time_millis)})")


def _iso(millis: int) -> str:
    return dt.datetime.fromtimestamp(millis / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def to_millis(timestamp) -> int:
    """Epoch millis from an int (millis), a datetime (naive = UTC) or an ISO-8601 string."""
    if isinstance(timestamp, bool):
        raise ConfigurationError(f"timestamp={timestamp!r}: expected epoch millis, a datetime or an ISO string.")
    if isinstance(timestamp, int):
        return timestamp
    if isinstance(timestamp, str):
        text = timestamp.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            timestamp = dt.datetime.fromisoformat(text)
        except ValueError:
            raise ConfigurationError(
                f"timestamp={timestamp!r}: expected epoch millis or an ISO-8601 time "
                "such as '2024-05-01T12:00:00+00:00'.") from None
    if isinstance(timestamp, dt.datetime):
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=dt.timezone.utc)
        return int(timestamp.timestamp() * 1000)
    raise ConfigurationError(f"timestamp={timestamp!r}: expected epoch millis, a datetime or an ISO string.")


def resolve_snapshot(table: FileStoreTable, snapshot: int | None = None, tag: str | None = None,
                     timestamp=None) -> Snapshot | None:
    """The snapshot to read: the given id, tag or time (latest at or before it), else the latest.

    None only for a table without snapshots and no time travel asked.
    """
    given = [name for name, value in (("snapshot", snapshot), ("tag", tag), ("timestamp", timestamp))
             if value is not None]
    if len(given) > 1:
        raise ConfigurationError(f"Give at most one of snapshot=, tag=, timestamp= (got {', '.join(given)}).")
    manager = table.snapshot_manager()
    if snapshot is not None:
        snapshot_id = _snapshot_id(snapshot)
        found = manager.get_snapshot_by_id(snapshot_id)
        if found is None:
            raise SnapshotNotFoundError(
                f"Snapshot {snapshot_id} of {table.table_path} does not exist or has expired; "
                f"{describe_range(table)}.")
        return found
    if tag is not None:
        found_tag = table.tag_manager().get(str(tag))
        if found_tag is None:
            tags = sorted(name for name in _tag_names(table))
            raise SnapshotNotFoundError(
                f"Tag {tag!r} does not exist in {table.table_path}; tags: {tags or 'none'}; "
                f"{describe_range(table)}.")
        return found_tag.trim_to_snapshot()
    if timestamp is not None:
        millis = to_millis(timestamp)
        found = manager.earlier_or_equal_time_mills(millis)
        if found is None:
            raise SnapshotNotFoundError(
                f"No snapshot of {table.table_path} was committed at or before {_iso(millis)}; "
                f"{describe_range(table)}.")
        return found
    return manager.get_latest_snapshot()


def _snapshot_id(value) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"snapshot id {value!r} is not an integer.") from None
    if number < 1:
        raise ConfigurationError(f"snapshot id {value!r}: snapshot ids start at 1.")
    return number


def _tag_names(table: FileStoreTable) -> list[str]:
    try:
        return [str(t[0] if isinstance(t, tuple) else getattr(t, "name", t)) for t in table.tag_manager().list_tags()]
    except Exception:  # listing tags only decorates an error message
        return []


# ---------------------------------------------------------------- filters for pruning

_BUILDERS = {
    "=": "equal", "!=": "not_equal", "<": "less_than", "<=": "less_or_equal",
    ">": "greater_than", ">=": "greater_or_equal", "in": "is_in", "not_in": "is_not_in",
}


def to_predicate(table: FileStoreTable, filters: Iterable[Filter]) -> Predicate | None:
    """The conjunction of `filters` as a pypaimon predicate, for pruning files.

    Filters on columns unknown to the table are an error; filters whose value does
    not fit the column's type, or on float/timestamp columns (NaN and time zones
    make stats pruning unsafe), are left out: they cannot prune, nothing else.
    """
    builder = PredicateBuilder(table.fields)
    types = {f.name: str(f.type.type if hasattr(f.type, "type") else f.type).upper() for f in table.fields}
    parts = []
    for item in filters:
        if item.column not in types:
            raise ConfigurationError(
                f"Filter on unknown column {item.column!r}; the table's columns are {sorted(types)}.")
        leaf = _leaf(builder, item, types[item.column])
        if leaf is not None:
            parts.append(leaf)
    return PredicateBuilder.and_predicates(parts) if parts else None


def _leaf(builder: PredicateBuilder, item: Filter, paimon_type: str):
    if item.op == "is_null":
        return builder.is_null(item.column)
    if item.op == "is_not_null":
        return builder.is_not_null(item.column)
    if item.op not in _BUILDERS:
        return None
    if item.op in ("in", "not_in"):
        values = [coerce_literal(v, paimon_type) for v in item.value]
        if any(v is _UNUSABLE or v is None for v in values):
            return None
        return getattr(builder, _BUILDERS[item.op])(item.column, values)
    value = coerce_literal(item.value, paimon_type)
    if value is _UNUSABLE or value is None:
        return None
    return getattr(builder, _BUILDERS[item.op])(item.column, value)


_UNUSABLE = object()


def coerce_literal(value, paimon_type: str):
    """`value` as the Python value pypaimon's stats hold for the type, or _UNUSABLE."""
    base = paimon_type.split("(")[0].replace(" NOT NULL", "").strip()
    try:
        if base in ("TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT"):
            if isinstance(value, bool) or not isinstance(value, int):
                return _UNUSABLE
            return value
        if base in ("STRING", "VARCHAR", "CHAR"):
            return value if isinstance(value, str) else _UNUSABLE
        if base == "BOOLEAN":
            return value if isinstance(value, bool) else _UNUSABLE
        if base == "DATE":
            if isinstance(value, dt.datetime):
                return _UNUSABLE
            if isinstance(value, dt.date):
                return value
            if isinstance(value, str):
                return dt.date.fromisoformat(value.strip())
            return _UNUSABLE
        if base == "DECIMAL":
            if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
                return Decimal(value)
            if isinstance(value, str):
                return Decimal(value.strip())
            return _UNUSABLE
    except (ValueError, ArithmeticError):
        return _UNUSABLE
    return _UNUSABLE  # floats, timestamps, binary, nested: no pruning


# ---------------------------------------------------------------- planning

@dataclass
class PlannedScan:
    """What a read of one snapshot needs: the snapshot and its (pruned) splits."""

    table: FileStoreTable
    snapshot: Snapshot | None
    splits: list

    @property
    def files(self) -> list:
        return [f for split in self.splits for f in split.files]

    def file_paths(self) -> list[str]:
        return [str(f.physical_path()) for f in self.files]

    def deleted_positions(self) -> dict[str, list[int]]:
        """{data file name: row positions its deletion vector marks} for the planned files that
        have one (append tables with `deletion-vectors.enabled`): the rows a reader of the files
        as they are must leave out."""
        from ..files.deletion_vectors import positions, read_vector

        out = {}
        for split in self.splits:
            for f, deletion in zip(split.files, getattr(split, "data_deletion_files", None) or []):
                marked = positions(read_vector(self.table.file_io, deletion))
                if marked:
                    out[f.file_name] = marked
        return out


def plan_snapshot(table: FileStoreTable, snapshot: Snapshot | None,
                  predicate: Predicate | None = None, levels: Callable[[int], bool] | None = None) -> PlannedScan:
    """The splits of `snapshot`, pruned by `predicate` (partition values and file stats); of
    primary-key tables only the files whose level passes `levels`, given it."""
    if snapshot is None:
        return PlannedScan(table, None, [])
    manifests = ManifestListManager(table)
    scanner = (_LevelScanner if levels else FileScanner)(
        table, lambda: (manifests.read_all(snapshot), snapshot), predicate,
        skip_level0=table.options.batch_scan_skip_level0())
    if levels:
        scanner.levels = levels
    return PlannedScan(table, snapshot, list(scanner.scan().splits()))


class _LevelScanner(FileScanner):
    """pypaimon's scanner keeping only files of some levels (Java's `withLevelFilter`)."""

    levels: Callable[[int], bool] | None = None

    def _filter_manifest_entry(self, entry) -> bool:
        return self.levels(entry.file.level) and super()._filter_manifest_entry(entry)


def streaming_reads(table: FileStoreTable, snapshot: Snapshot, read_overwrite: bool) -> bool:
    """Whether the rows `snapshot` adds belong to a stream of the table (see module doc)."""
    if snapshot.commit_kind == "APPEND":
        return True
    if snapshot.commit_kind == "OVERWRITE":
        if not read_overwrite:
            log.warning("Stream of %s skips OVERWRITE snapshot %d (streaming-read-overwrite=false): "
                        "an append-only stream cannot retract the rows it replaced.",
                        table.table_path, snapshot.id)
        return read_overwrite
    return False


def plan_added(table: FileStoreTable, after: int, up_to: int, read_overwrite: bool = False,
               predicate: Predicate | None = None) -> list:
    """Splits of the rows added by snapshots after+1 .. up_to (see module doc for which count).

    Each snapshot is planned on its own: merging the deltas of several snapshots
    would let an overwrite's deletions hide files an earlier append in the range added.
    """
    check_streamable(table)
    manager = table.snapshot_manager()
    manifests = ManifestListManager(table)
    splits = []
    for snapshot_id in range(after + 1, up_to + 1):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise expired(table, snapshot_id)
        if not streaming_reads(table, snapshot, read_overwrite):
            continue
        # An overwrite's delta also deletes files; pypaimon's streaming mode refuses
        # those entries, its batch mode drops them and keeps what the snapshot added.
        scanner = FileScanner(table, lambda s=snapshot: (manifests.read_delta(s), s), predicate,
                              is_streaming=snapshot.commit_kind == "APPEND")
        splits.extend(scanner.scan().splits())
    return splits


def expired(table: FileStoreTable, snapshot_id: int) -> SnapshotNotFoundError:
    """The error of a stream whose next snapshot expired before it was read."""
    return SnapshotNotFoundError(
        f"Snapshot {snapshot_id} of {table.table_path} has expired before the stream read it; "
        f"{describe_range(table)}. Keep snapshots longer (snapshot.time-retained) or read "
        "with a consumer-id so expiry keeps what the stream still needs; to skip the gap "
        "restart the query from a new checkpoint.")


def consumer_file(table: FileStoreTable, consumer_id: str) -> str:
    """Paimon's consumer file of `consumer_id` on the branch `table` is opened on: `{"nextSnapshot": n}`
    in `<table>/consumer/` (main) or `<table>/branch/branch-<name>/consumer/`."""
    return f"{branch_path(str(table.table_path), table.current_branch())}/consumer/consumer-{consumer_id}"


def record_consumer(table: FileStoreTable, consumer_id: str, next_snapshot: int) -> None:
    """Record that a consumer has read every snapshot before `next_snapshot`.

    Readers (expiry, a new query with this consumer id) see the old or the new
    file, never a torn one: on local file systems the new text goes to a hidden
    temporary file (not named `consumer-*`, so never mistaken for a consumer) that
    replaces the old one; an object-store PUT is whole or nothing by itself.
    """
    from pypaimon.consumer.consumer import Consumer

    storage.write_atomically(table.file_io, consumer_file(table, consumer_id), Consumer(next_snapshot).to_json())


def check_streamable(table: FileStoreTable, changelog: bool = False) -> None:
    """A primary-key table streams only as its changelog (`read.readChangeLog`, paimon.read.changes)."""
    if table.is_primary_key_table and not changelog:
        raise UnsupportedTableError(
            f"{table.table_path} is a primary-key table: its stream is its changelog, rows with a "
            "`rowkind` column (+I, -U, +U, -D). Use lakesink.read_stream, or set the option "
            "read.readChangeLog=true on spark.readStream.format('paimon').")


def fast_path_blockers(table: FileStoreTable, scan: PlannedScan) -> list[str]:
    """Why Spark's own Parquet reader cannot read these files (empty: it can, leaving out the rows
    `scan.deleted_positions()` names)."""
    reasons = []
    if table.is_primary_key_table:
        reasons.append("primary-key table (rows are merged on read)")
    options = table.options
    if options.deletion_vectors_enabled() and table.is_primary_key_table:
        # (an append table's marked rows are left out by the reader: `PlannedScan.deleted_positions`)
        reasons.append("deletion vectors")
    elif options.deletion_vectors_enabled() and options.row_tracking_enabled():
        reasons.append("deletion vectors in a row-tracking table")
    if options.data_evolution_enabled():
        reasons.append("data evolution")
    if (options.file_format() or "parquet").lower() != "parquet":
        reasons.append(f"{options.file_format()} files")
    if storage.scheme(str(table.table_path)) not in ("file", "hdfs", "viewfs"):
        reasons.append(f"files on {storage.scheme(str(table.table_path))}:// (pip Spark has no connector for it)")
    for field in table.fields:
        text = str(getattr(field.type, "type", field.type)).upper()
        if text.startswith("TIMESTAMP") and _precision(text) > 6:
            reasons.append(f"column {field.name} is {text} (Spark reads microseconds)")
        if text.startswith("TIME") and not text.startswith("TIMESTAMP"):
            # Spark's Parquet reader takes TIME only as micros, and only with spark.sql.timeType.enabled.
            reasons.append(f"column {field.name} is {text} (Paimon stores millis of day)")
        if text.startswith(("BLOB", "VARIANT", "VECTOR")):
            reasons.append(f"column {field.name} is {text}")
    schema_id = table.table_schema.id
    old = sorted({f.schema_id for f in scan.files if f.schema_id != schema_id})
    if old:
        reasons.append(f"files written with older schema ids {old} (schema evolution)")
    return reasons


def _precision(type_text: str) -> int:
    if "(" not in type_text:
        return 6
    try:
        return int(type_text.split("(", 1)[1].split(")", 1)[0])
    except ValueError:
        return 6


def chunk(items: Sequence, count: int) -> list[list]:
    """`items` dealt round-robin into at most `count` non-empty lists."""
    count = max(1, min(count, len(items)))
    out = [[] for _ in range(count)]
    for index, item in enumerate(items):
        out[index % count].append(item)
    return [group for group in out if group]
