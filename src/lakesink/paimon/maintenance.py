"""Table maintenance: what Paimon's committer does after each commit, and more on demand.

After each successful commit (see `after_commit`) a background thread, one per
table in this process and one run at a time, does, with Paimon's options:

* automatic tags (`tag.automatic-creation=process-time`, `tag.creation-period`,
  `tag.num-retained-max`, `tag.default-time-retained`);
* partition expiry (`partition.expiration-time`, `partition.timestamp-formatter`,
  `partition.timestamp-pattern`) as an OVERWRITE commit dropping the partitions;
* snapshot expiry (`snapshot.num-retained.min` 10, `snapshot.num-retained.max`
  unlimited, `snapshot.time-retained` 1 h, `snapshot.expire.limit` 10 per run);
* consumer expiry (`consumer.expiration-time`).

A failure is logged and stored in `_lakesink/maintenance-failure.json`; the next
commit to the table (from any process) raises it as `MaintenanceError`.

How snapshot expiry stays safe:

* It never expires the snapshot a registered consumer reads next
  (`consumer/consumer-<id>`), nor fewer than `snapshot.num-retained.min` (>= 1).
* Deleted: manifest lists and manifests of expired snapshots that neither the
  first retained snapshot nor a tag lists, and data files a DELETE entry in
  (first expired, first retained] removed, unless a tag still holds them. Every
  later snapshot is built from the first retained one, so nothing deleted can be
  needed by a later snapshot. Files of a commit in flight are never candidates:
  a commit's new manifests and data files are in no expired snapshot, and an
  in-flight commit based on an expired snapshot cannot publish (its snapshot id
  is taken) and re-reads the latest one.
* Commit-user markers (`_lakesink/commit-users/`) whose scan would start in the
  expired range first get the highest identifier their user committed there,
  so `PaimonTarget.last_committed` stays right after the snapshots are gone.
* Crash safety: the plan (range and files) is written to
  `_lakesink/expiry.json` before anything is deleted; then the EARLIEST hint
  moves to the first retained snapshot, snapshot files are deleted oldest
  first, then the planned files, then the plan. The table reads exactly at every
  step, and the next run (or `rollback`) first finishes a plan left behind.
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pyarrow as pa
from pypaimon.common.time_utils import parse_duration
from pypaimon.consumer.consumer_manager import ConsumerManager
from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.utils.file_store_path_factory import canonical_data_file_path

from ..errors import InvalidOptionError, MaintenanceError, NotAPaimonTableError
from ..protocol import crashpoints
from . import tables
from .publish import write_file_atomically

log = logging.getLogger(__name__)

MAINTENANCE_USER = "lakesink-maintenance"
BATCH_IDENTIFIER = 2**63 - 1  # Paimon's identifier for one-off (batch) commits
JOURNAL_FORMAT, JOURNAL_VERSION = "lakesink.expiry", 1
FAILURE_FORMAT, FAILURE_VERSION = "lakesink.maintenance-failure", 1
ProgressFn = Callable[[str, int, int], None]  # (step, done, total)


# --------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class MaintenanceOptions:
    retain_min: int = 10
    retain_max: int = 2**31 - 1
    time_retained_ms: int = 3_600_000
    expire_limit: int = 10
    partition_expiration_ms: int | None = None
    partition_formatter: str | None = None
    partition_pattern: str | None = None
    auto_tag: str = "none"
    tag_period: str = "daily"
    tag_num_retained_max: int | None = None
    tag_time_retained: str | None = None
    consumer_expiration_ms: int | None = None
    enabled: bool = True

    @classmethod
    def of(cls, table) -> MaintenanceOptions:
        raw = table.options.options.to_map()
        d = cls()

        def integer(key, default, minimum=None):
            if raw.get(key) is None:
                return default
            try:
                value = int(str(raw[key]).strip())
            except ValueError:
                raise InvalidOptionError(key, raw[key], "an integer") from None
            if minimum is not None and value < minimum:
                raise InvalidOptionError(key, raw[key], f"an integer >= {minimum}")
            return value

        def duration(key, default):
            if raw.get(key) is None:
                return default
            try:
                return int(parse_duration(str(raw[key])))
            except ValueError:
                raise InvalidOptionError(key, raw[key], "a duration such as '1 h', '30 min', '7 d'") from None

        def choice(key, default, choices):
            value = str(raw.get(key, default)).strip().lower()
            if value not in choices:
                raise InvalidOptionError(key, raw[key], "one of " + ", ".join(choices))
            return value

        retain_min = integer("snapshot.num-retained.min", d.retain_min, minimum=1)
        retain_max = integer("snapshot.num-retained.max", d.retain_max, minimum=1)
        if retain_max < retain_min:
            raise InvalidOptionError("snapshot.num-retained.max", retain_max,
                                     f"at least snapshot.num-retained.min ({retain_min})")
        return cls(
            retain_min=retain_min, retain_max=retain_max,
            time_retained_ms=duration("snapshot.time-retained", d.time_retained_ms),
            expire_limit=integer("snapshot.expire.limit", d.expire_limit, minimum=1),
            partition_expiration_ms=duration("partition.expiration-time", None),
            partition_formatter=raw.get("partition.timestamp-formatter"),
            partition_pattern=raw.get("partition.timestamp-pattern"),
            auto_tag=choice("tag.automatic-creation", "none", ("none", "process-time", "watermark", "batch")),
            tag_period=choice("tag.creation-period", "daily", ("daily", "hourly", "two-hours")),
            tag_num_retained_max=integer("tag.num-retained-max", None, minimum=1),
            tag_time_retained=raw.get("tag.default-time-retained"),
            consumer_expiration_ms=duration("consumer.expiration-time", None),
            enabled=str(raw.get("maintenance.enabled", "true")).strip().lower() not in ("false", "0", "no"),
        )


# --------------------------------------------------------------------------
# small helpers over pypaimon
# --------------------------------------------------------------------------
def open_table(path: str, fs_options: dict | None = None):
    table = tables.open_table(path, fs_options)
    if table is None:
        raise NotAPaimonTableError(f"No Paimon table at {tables.normalize_path(path)}.")
    return table


def _table_of(table_or_path, fs_options=None):
    return open_table(table_or_path, fs_options) if isinstance(table_or_path, str) else table_or_path


def _lakesink_dir(table) -> str:
    return f"{table.table_path.rstrip('/')}/{tables.LAKESINK_DIR}"


def _journal_path(table) -> str:
    return f"{_lakesink_dir(table)}/expiry.json"


def _failure_path(path: str) -> str:
    return f"{path}/{tables.LAKESINK_DIR}/maintenance-failure.json"


def _manifest_dir(table) -> str:
    return f"{table.table_path.rstrip('/')}/manifest"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _lists_of(snapshot: Snapshot) -> set[str]:
    return {n for n in (snapshot.base_manifest_list, snapshot.delta_manifest_list,
                        snapshot.changelog_manifest_list) if n}


def _data_file_path(table, entry) -> str:
    if entry.file.external_path:
        return entry.file.external_path
    return canonical_data_file_path(table, tuple(entry.partition.values), entry.bucket, entry.file.file_name)


def _entry_paths(table, entry) -> list[str]:
    main = _data_file_path(table, entry)
    parent = main.rsplit("/", 1)[0]
    return [main] + [f"{parent}/{extra}" for extra in (entry.file.extra_files or [])]


def list_tags(table) -> dict[str, Snapshot]:
    """Tag name -> tagged snapshot."""
    manager = table.tag_manager()
    if not table.file_io.exists(manager.tag_directory()):
        return {}
    out = {}
    for name in manager.list_tags():
        tag = manager.get(name)
        if tag is not None:
            out[name] = tag
    return out


class _Metadata:
    """Reads manifest lists and manifests of one table, each at most once."""

    def __init__(self, table):
        self.table = table
        self.lists = ManifestListManager(table)
        self.files = ManifestFileManager(table)
        self._entries: dict[str, list] = {}

    def manifests(self, snapshot: Snapshot) -> list:
        metas = self.lists.read_all(snapshot)
        if snapshot.changelog_manifest_list:
            metas += self.lists.read_changelog(snapshot)
        return metas

    def entries(self, meta) -> list:
        if meta.file_name not in self._entries:
            self._entries[meta.file_name] = self.files.read(meta.file_name, file_size=meta.file_size)
        return self._entries[meta.file_name]

    def referenced(self, snapshots: Iterable[Snapshot], progress: ProgressFn | None = None,
                   live_only: bool = False) -> set[str]:
        """Every file the snapshots need: lists, manifests, index manifest, data files.

        By default conservative: a data file named in any of their manifests
        counts, even if a DELETE entry removed it. With `live_only`, only data
        files live in one of the snapshots (ADD not cancelled by a DELETE) count.
        """
        out: set[str] = set()
        snapshots = list(snapshots)
        manifest_dir = _manifest_dir(self.table)
        for i, snapshot in enumerate(snapshots):
            out.update(f"{manifest_dir}/{n}" for n in _lists_of(snapshot))
            if snapshot.index_manifest:
                out.add(f"{manifest_dir}/{snapshot.index_manifest}")
            added, deleted = set(), set()
            for meta in self.manifests(snapshot):
                path = f"{manifest_dir}/{meta.file_name}"
                if path in out and not live_only:
                    continue
                out.add(path)
                for entry in self.entries(meta):
                    (added if entry.kind == 0 or not live_only else deleted).update(_entry_paths(self.table, entry))
            out.update(added - deleted)
            if progress:
                progress("reading snapshots", i + 1, len(snapshots))
        return out


# --------------------------------------------------------------------------
# snapshot expiry
# --------------------------------------------------------------------------
@dataclass
class ExpiryReport:
    snapshots_expired: int = 0
    files_deleted: int = 0
    markers_updated: int = 0
    first_retained: int | None = None
    expired_range: tuple[int, int] | None = None  # [begin, end)
    dry_run: bool = False
    would_delete: list[str] = field(default_factory=list)


def expire_snapshots(table_or_path, now_ms: int | None = None, limit: int | None = -1,
                     dry_run: bool = False, progress: ProgressFn | None = None,
                     fs_options: dict | None = None) -> ExpiryReport:
    """Expire snapshots by the table's retention options.

    `limit` caps how many snapshots go in one call: -1 = `snapshot.expire.limit`
    (the after-commit default), None = no cap (on-demand expiry).
    """
    table = _table_of(table_or_path, fs_options)
    report = ExpiryReport(dry_run=dry_run)
    if not dry_run:
        report.files_deleted += finish_pending_expiry(table)
    options = MaintenanceOptions.of(table)
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    if latest is None:
        return report
    earliest = manager.try_get_earliest_snapshot()
    begin = earliest.id
    low = max(latest.id - options.retain_max + 1, begin)
    end = latest.id - options.retain_min + 1
    consumer_next = ConsumerManager(table.file_io, table.table_path).min_next_snapshot()
    if consumer_next is not None:
        end = min(end, consumer_next)
    cap = options.expire_limit if limit == -1 else limit
    if cap is not None:
        end = min(end, begin + cap)
    older_than = (now_ms if now_ms is not None else _now_ms()) - options.time_retained_ms
    for snapshot_id in range(low, end):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is not None and older_than <= snapshot.time_millis:
            end = snapshot_id
            break
    report.first_retained = max(end, begin)
    if end <= begin:
        return report

    plan = _plan_expiry(table, begin, end, progress)
    report.expired_range = (begin, end)
    if dry_run:
        report.would_delete = plan
        report.snapshots_expired = end - begin
        return report
    report.markers_updated = _update_markers(table, begin, end)
    journal = {"format": JOURNAL_FORMAT, "version": JOURNAL_VERSION, "begin": begin, "end": end,
               "files": plan}
    write_file_atomically(table.file_io, _journal_path(table), json.dumps(journal))
    crashpoints.reached("expire-planned")
    report.snapshots_expired = end - begin
    report.files_deleted += _carry_out(table, journal, progress)
    return report


def _plan_expiry(table, begin: int, end: int, progress: ProgressFn | None) -> list[str]:
    """Files that expiring snapshots [begin, end) makes unreferenced (see module doc)."""
    manager = table.snapshot_manager()
    meta = _Metadata(table)
    manifest_dir = _manifest_dir(table)
    retained = manager.get_snapshot_by_id(end)
    if retained is None:
        raise MaintenanceError(f"Snapshot {end} of {table.table_path} is missing; expiry needs it to "
                               "know what later snapshots use. Run `lakesink verify` on the table.")
    tags = list(list_tags(table).values())
    keep_lists = set(_lists_of(retained)).union(*(_lists_of(t) for t in tags))
    keep_manifests = {m.file_name for s in [retained, *tags] for m in meta.manifests(s)}
    keep_index = {s.index_manifest for s in [retained, *tags] if s.index_manifest}
    tag_data: set[str] | None = None  # read only if some expired DELETE entry needs checking

    files: list[str] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        if path not in seen:
            seen.add(path)
            files.append(path)

    # Data files removed by DELETE entries in (begin, end]: live before, not after.
    for i, snapshot_id in enumerate(range(begin + 1, end + 1)):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            continue
        for m in meta.lists.read_delta(snapshot):
            if m.num_deleted_files == 0:
                continue
            for entry in meta.entries(m):
                if entry.kind != 1:
                    continue
                if tag_data is None:
                    tag_data = meta.referenced(tags)
                for path in _entry_paths(table, entry):
                    if path not in tag_data:
                        add(path)
        if progress:
            progress("planning", i + 1, end - begin)
    # Manifests, then manifest lists, of the expired snapshots.
    lists: list[str] = []
    for snapshot_id in range(begin, end):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            continue
        for name in _lists_of(snapshot) - keep_lists:
            try:
                metas = meta.lists.read(name)
            except FileNotFoundError:
                metas = []
            for m in metas:
                if m.file_name not in keep_manifests:
                    add(f"{manifest_dir}/{m.file_name}")
            lists.append(f"{manifest_dir}/{name}")
        if snapshot.index_manifest and snapshot.index_manifest not in keep_index:
            lists.append(f"{manifest_dir}/{snapshot.index_manifest}")
    for path in lists:
        add(path)
    return files


def _carry_out(table, journal: dict, progress: ProgressFn | None) -> int:
    """Execute an expiry plan; idempotent, so a plan left by a crash can run again."""
    manager = table.snapshot_manager()
    file_io = table.file_io
    begin, end = int(journal["begin"]), int(journal["end"])
    write_file_atomically(file_io, f"{manager.snapshot_dir}/EARLIEST", str(end))
    for snapshot_id in range(begin, end):  # oldest first: what is left is always a contiguous range
        file_io.delete_quietly(manager.get_snapshot_path(snapshot_id))
        crashpoints.reached("expire-snapshot-deleted")
    deleted = 0
    files = journal["files"]
    for i, path in enumerate(files):
        if file_io.exists(path):
            file_io.delete_quietly(path)
            deleted += 1
        crashpoints.reached("expire-file-deleted")
        if progress:
            progress("deleting", i + 1, len(files))
    file_io.delete_quietly(_journal_path(table))
    return deleted


def finish_pending_expiry(table) -> int:
    """Finish an expiry a crash interrupted; returns the number of files it deleted."""
    path = _journal_path(table)
    if not table.file_io.exists(path):
        return 0
    journal = json.loads(table.file_io.read_file_utf8(path))
    if journal.get("format") != JOURNAL_FORMAT or journal.get("version") != JOURNAL_VERSION:
        raise MaintenanceError(f"{path} is not a lakesink expiry plan of version {JOURNAL_VERSION}; "
                               "move it away if it is not lakesink's.")
    log.info("finishing interrupted expiry of snapshots [%s, %s) of %s", journal["begin"], journal["end"],
             table.table_path)
    return _carry_out(table, journal, None)


def _update_markers(table, begin: int, end: int) -> int:
    """Carry each commit user's highest identifier in [begin, end) into its marker."""
    from .target import MARKER_FORMAT
    directory = f"{_lakesink_dir(table)}/commit-users"
    file_io = table.file_io
    if not file_io.exists(directory):
        return 0
    manager = table.snapshot_manager()
    cache: dict[int, Snapshot | None] = {}
    updated = 0
    for status in file_io.list_status(directory):
        name = status.base_name
        if not name.endswith(".json"):
            continue
        path = f"{directory}/{name}"
        marker = json.loads(file_io.read_file_utf8(path))
        if marker.get("format") != MARKER_FORMAT:
            continue
        start = marker.get("scan_from")
        if start is None:
            start = (marker.get("last_snapshot") or 0) + 1
        if start >= end:
            continue
        best = None
        for snapshot_id in range(end - 1, max(start, begin) - 1, -1):
            if snapshot_id not in cache:
                cache[snapshot_id] = manager.get_snapshot_by_id(snapshot_id)
            snapshot = cache[snapshot_id]
            if snapshot is not None and snapshot.commit_user == marker["commit_user"]:
                best = snapshot.commit_identifier
                break  # identifiers of one user only grow: the newest is the highest
        if best is None:
            continue
        fresh = json.loads(file_io.read_file_utf8(path))  # shrink the window for a racing commit
        last = fresh.get("last_identifier")
        if last is None or best > last:
            fresh["last_identifier"] = best
            write_file_atomically(file_io, path, json.dumps(fresh))
            updated += 1
    return updated


# --------------------------------------------------------------------------
# partitions, tags, consumers
# --------------------------------------------------------------------------
_JAVA_TO_STRFTIME = [("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S")]


def _partition_time(values: dict, options: MaintenanceOptions) -> dt.datetime | None:
    if options.partition_pattern:
        text = options.partition_pattern
        for key, value in values.items():
            text = text.replace(f"${key}", str(value))
    else:
        text = str(next(iter(values.values())))
    if options.partition_formatter:
        fmt = options.partition_formatter
        for java, py in _JAVA_TO_STRFTIME:
            fmt = fmt.replace(java, py)
        formats = [fmt]
    else:
        formats = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d", "%Y%m%d"]
    for fmt in formats:
        try:
            return dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def live_entries(table, snapshot: Snapshot | None = None) -> list:
    """The data files (manifest entries) a snapshot holds, ADD/DELETE applied."""
    snapshot = snapshot or table.snapshot_manager().get_latest_snapshot()
    if snapshot is None:
        return []
    lists = ManifestListManager(table)
    return ManifestFileManager(table).read_entries_parallel(lists.read_all(snapshot), drop_stats=False)


def expire_partitions(table, now: dt.datetime | None = None) -> list[dict]:
    """Drop partitions whose time (from their values) is older than `partition.expiration-time`."""
    options = MaintenanceOptions.of(table)
    if options.partition_expiration_ms is None or not table.partition_keys:
        return []
    now = now or dt.datetime.now()
    cutoff = now - dt.timedelta(milliseconds=options.partition_expiration_ms)
    expired, seen = [], set()
    for entry in live_entries(table):
        values = tuple(entry.partition.values)
        if values in seen:
            continue
        seen.add(values)
        spec = dict(zip(table.partition_keys, values))
        when = _partition_time(spec, options)
        if when is not None and when < cutoff:
            expired.append(spec)
    if expired:
        from .commit import new_file_store_commit
        commit = new_file_store_commit(table, MAINTENANCE_USER)
        try:
            commit.drop_partitions(expired, BATCH_IDENTIFIER)
        finally:
            commit.close()
        log.info("dropped %d expired partition(s) of %s", len(expired), table.table_path)
    return expired


_PERIODS = {"daily": (dt.timedelta(days=1), "%Y-%m-%d"),
            "hourly": (dt.timedelta(hours=1), "%Y-%m-%d %H"),
            "two-hours": (dt.timedelta(hours=2), "%Y-%m-%d %H")}


def create_automatic_tags(table, now: dt.datetime | None = None) -> list[str]:
    """process-time tags: once a period is over, tag the latest snapshot with its name."""
    options = MaintenanceOptions.of(table)
    created: list[str] = []
    if options.auto_tag != "process-time":
        return created
    latest = table.snapshot_manager().get_latest_snapshot()
    if latest is None:
        return created
    period, fmt = _PERIODS[options.tag_period]
    now = now or dt.datetime.now()
    start = dt.datetime(now.year, now.month, now.day)
    while start + period <= now:
        start += period
    name = (start - period).strftime(fmt)  # the last complete period
    manager = table.tag_manager()
    if not manager.tag_exists(name):
        manager.create_tag(latest, name, ignore_if_exists=True, time_retained=options.tag_time_retained)
        created.append(name)
    if options.tag_num_retained_max is not None:
        auto = sorted(n for n in list_tags(table) if _is_period_name(n, fmt))
        for old in auto[:max(len(auto) - options.tag_num_retained_max, 0)]:
            delete_tag(table, old)
    return created


def _is_period_name(name: str, fmt: str) -> bool:
    try:
        dt.datetime.strptime(name, fmt)
        return True
    except ValueError:
        return False


def expire_tags_by_time(table, now: dt.datetime | None = None) -> list[str]:
    now = now or dt.datetime.now()
    gone = []
    for name, tag in list_tags(table).items():
        created, retained = getattr(tag, "tag_create_time", None), getattr(tag, "tag_time_retained", None)
        if created is not None and retained is not None and created + retained < now:
            delete_tag(table, name)
            gone.append(name)
    return gone


def delete_tag(table, name: str) -> int:
    """Delete a tag and the files only it still needed; returns files deleted."""
    tags = list_tags(table)
    if name not in tags:
        raise ValueError(f"Tag {name!r} does not exist in {table.table_path}; existing tags: "
                         f"{', '.join(sorted(tags)) or 'none'}.")
    tag = tags.pop(name)
    table.tag_manager().delete_tag(name)
    manager = table.snapshot_manager()
    earliest = manager.try_get_earliest_snapshot() if manager.get_latest_snapshot() else None
    if earliest is not None and tag.id >= earliest.id and manager.get_snapshot_by_id(tag.id):
        return 0  # its snapshot is still retained: snapshot expiry deals with its files
    meta = _Metadata(table)
    still = meta.referenced(list(manager.list_snapshots()) + list(tags.values()), live_only=True)
    mine = meta.referenced([tag])
    deleted = 0
    for path in sorted(mine - still):
        table.file_io.delete_quietly(path)
        deleted += 1
    return deleted


def expire_consumers(table, now: dt.datetime | None = None) -> None:
    options = MaintenanceOptions.of(table)
    if options.consumer_expiration_ms is None:
        return
    now = now or dt.datetime.now()
    ConsumerManager(table.file_io, table.table_path).expire(
        now - dt.timedelta(milliseconds=options.consumer_expiration_ms))


# --------------------------------------------------------------------------
# one maintenance run, and the background runner
# --------------------------------------------------------------------------
def maintain(table_or_path, now: dt.datetime | None = None, limit: int | None = -1,
             fs_options: dict | None = None) -> dict:
    """One full maintenance run, synchronously: tags, partitions, snapshots, consumers."""
    table = _table_of(table_or_path, fs_options)
    out = {"tags_created": create_automatic_tags(table, now),
           "tags_expired": expire_tags_by_time(table, now),
           "partitions_dropped": expire_partitions(table, now)}
    if out["partitions_dropped"]:
        table = tables.open_table(table.table_path, fs_options) or table
    now_ms = int(now.timestamp() * 1000) if now else None
    expiry = expire_snapshots(table, now_ms=now_ms, limit=limit)
    out.update(snapshots_expired=expiry.snapshots_expired, files_deleted=expiry.files_deleted)
    expire_consumers(table, now)
    return out


class Maintenance:
    """Background maintenance of one table in this process: one run at a time."""

    def __init__(self, path: str, fs_options: dict | None = None):
        self.path = path
        self.fs_options = fs_options
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = False
        self.runs = 0

    def trigger(self) -> None:
        """Start a run unless one is running (then one more runs after it)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._again = True
                return
            self._thread = threading.Thread(target=self._loop, name=f"lakesink-maintenance:{self.path}",
                                            daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            self._run_once()
            with self._lock:
                if not self._again:
                    return
                self._again = False

    def _run_once(self) -> None:
        try:
            maintain(self.path, fs_options=self.fs_options)
            self.runs += 1
        except Exception as exc:
            log.exception("maintenance of %s failed", self.path)
            record_failure(self.path, exc, self.fs_options)


_registry: dict[str, Maintenance] = {}
_registry_lock = threading.Lock()


def maintenance_for(path: str, fs_options: dict | None = None) -> Maintenance:
    path = tables.normalize_path(path)
    with _registry_lock:
        if path not in _registry:
            _registry[path] = Maintenance(path, fs_options)
        return _registry[path]


def after_commit(path: str, table, report=None, fs_options: dict | None = None) -> None:
    """Called by PaimonTarget after each successful commit: start background maintenance."""
    try:
        if not MaintenanceOptions.of(table).enabled:
            return
    except InvalidOptionError as exc:
        record_failure(tables.normalize_path(path), exc, fs_options)
        return
    maintenance_for(path, fs_options).trigger()


def record_failure(path: str, exc: BaseException, fs_options: dict | None = None) -> None:
    file_io = tables.file_io_for(path, fs_options)
    data = {"format": FAILURE_FORMAT, "version": FAILURE_VERSION, "at_ms": _now_ms(),
            "error": f"{type(exc).__name__}: {exc}"}
    try:
        write_file_atomically(file_io, _failure_path(path), json.dumps(data))
    except Exception:
        log.exception("could not record the maintenance failure of %s", path)


def raise_failure(path: str, file_io) -> None:
    """Raise (once) a maintenance failure recorded for the table. Called before each commit."""
    failure = _failure_path(path)
    if not file_io.exists(failure):
        return
    try:
        data = json.loads(file_io.read_file_utf8(failure))
        error = data.get("error", "unknown error")
    except (ValueError, OSError):
        error = "unreadable failure record"
    file_io.delete_quietly(failure)
    raise MaintenanceError(
        f"Table maintenance of {path} failed after an earlier commit: {error}. Nothing was committed "
        "now; fix the cause (e.g. the table option it names) and commit again, or run "
        f"`lakesink expire {path}` to see the error directly.")


@atexit.register
def _drain() -> None:
    # Let a run in progress finish at interpreter exit (it is crash-safe anyway).
    for maintenance in list(_registry.values()):
        maintenance.wait(timeout=30)


# --------------------------------------------------------------------------
# history, files, verify, orphans, rollback
# --------------------------------------------------------------------------
_HISTORY_SCHEMA = pa.schema([
    ("snapshot_id", pa.int64()), ("commit_kind", pa.string()), ("commit_user", pa.string()),
    ("commit_identifier", pa.int64()), ("committed_at", pa.timestamp("ms", tz="UTC")),
    ("commit_duration_ms", pa.int64()), ("attempts", pa.int64()), ("rows_added", pa.int64()),
    ("files_added", pa.int64()), ("bytes_added", pa.int64()), ("files_removed", pa.int64()),
    ("total_rows", pa.int64()), ("delta_rows", pa.int64()),
])


def _int_prop(props: dict, key: str) -> int | None:
    try:
        return int(props[key])
    except (KeyError, TypeError, ValueError):
        return None


def history(path: str, fs_options: dict | None = None, progress: ProgressFn | None = None) -> pa.Table:
    """One row per retained snapshot, oldest first.

    `rows_added`/`files_added`/`bytes_added` come from lakesink's snapshot
    properties; for snapshots other writers made, files come from the delta
    manifest list and rows from the snapshot's delta record count.
    """
    table = open_table(path, fs_options)
    lists = ManifestListManager(table)
    rows = []
    snapshots = table.snapshot_manager().list_snapshots()
    for i, s in enumerate(snapshots):
        props = s.properties or {}
        try:
            delta = lists.read_delta(s)
            added = sum(m.num_added_files for m in delta)
            removed = sum(m.num_deleted_files for m in delta)
        except FileNotFoundError:
            added = removed = None
        started = _int_prop(props, "lakesink.commit-started-ms")
        rows.append({
            "snapshot_id": s.id, "commit_kind": s.commit_kind, "commit_user": s.commit_user,
            "commit_identifier": s.commit_identifier, "committed_at": s.time_millis,
            "commit_duration_ms": (s.time_millis - started) if started is not None else None,
            "attempts": _int_prop(props, "lakesink.commit-attempt"),
            "rows_added": _int_prop(props, "lakesink.rows-added") if "lakesink.rows-added" in props
            else (s.delta_record_count if s.delta_record_count and s.delta_record_count > 0 else 0),
            "files_added": _int_prop(props, "lakesink.files-added") if "lakesink.files-added" in props else added,
            "bytes_added": _int_prop(props, "lakesink.bytes-added"),
            "files_removed": removed,
            "total_rows": s.total_record_count, "delta_rows": s.delta_record_count,
        })
        if progress:
            progress("reading snapshots", i + 1, len(snapshots))
    return pa.Table.from_pylist(rows, schema=_HISTORY_SCHEMA)


def files(path: str, snapshot_id: int | None = None, fs_options: dict | None = None) -> pa.Table:
    """The data files of a snapshot (latest by default)."""
    table = open_table(path, fs_options)
    snapshot = None
    if snapshot_id is not None:
        snapshot = table.snapshot_manager().get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise ValueError(f"Snapshot {snapshot_id} does not exist in {table.table_path}.")
    rows = [{"partition": json.dumps(dict(zip(table.partition_keys, entry.partition.values)), default=str),
             "bucket": entry.bucket, "file": _data_file_path(table, entry),
             "rows": entry.file.row_count, "bytes": entry.file.file_size, "level": entry.file.level}
            for entry in live_entries(table, snapshot)]
    schema = pa.schema([("partition", pa.string()), ("bucket", pa.int32()), ("file", pa.string()),
                        ("rows", pa.int64()), ("bytes", pa.int64()), ("level", pa.int32())])
    return pa.Table.from_pylist(rows, schema=schema)


def verify(path: str, fs_options: dict | None = None, progress: ProgressFn | None = None) -> list[str]:
    """Problems with the latest snapshot: unreadable schema/manifests, missing or resized files."""
    table = open_table(path, fs_options)
    problems: list[str] = []
    snapshot = table.snapshot_manager().get_latest_snapshot()
    if snapshot is None:
        return problems
    try:
        if table.schema_manager.get_schema(snapshot.schema_id) is None:
            problems.append(f"schema {snapshot.schema_id} of snapshot {snapshot.id} is missing")
    except Exception as exc:
        problems.append(f"schema {snapshot.schema_id} is unreadable: {exc}")
    lists = ManifestListManager(table)
    manifests = ManifestFileManager(table)
    try:
        metas = lists.read_all(snapshot)
    except Exception as exc:
        return problems + [f"manifest list of snapshot {snapshot.id} is unreadable: {exc}"]
    entries = []
    for meta in metas:
        try:
            entries.extend(manifests.read(meta.file_name, file_size=meta.file_size))
        except Exception as exc:
            problems.append(f"manifest {meta.file_name} is unreadable: {exc}")
    from pypaimon.manifest.schema.file_entry import FileEntry
    live = [e for e in FileEntry.merge_entries(entries) if e.kind == 0]
    file_io = table.file_io
    for i, entry in enumerate(live):
        file_path = _data_file_path(table, entry)
        if not file_io.exists(file_path):
            problems.append(f"data file {file_path} is missing")
        else:
            size = file_io.get_file_size(file_path)
            if size != entry.file.file_size:
                problems.append(f"data file {file_path} has {size} bytes, the manifest says {entry.file.file_size}")
        if progress:
            progress("checking files", i + 1, len(live))
    return problems


# Directories of the table that hold roots, never orphans.
_ROOT_DIRS = {"schema", "snapshot", "tag", "consumer", "branch", "index", "statistics"}


def remove_orphans(path: str, older_than: dt.timedelta = dt.timedelta(days=1), dry_run: bool = False,
                   fs_options: dict | None = None, progress: ProgressFn | None = None) -> list[str]:
    """Delete files under the table that no snapshot or tag needs and older than `older_than`.

    Covers manifest/ and the data directories, plus stale `_lakesink/staging/*`
    job directories. A commit in flight has written its files within the last
    moments; the age guard (default one day, never below one hour unless asked)
    keeps them. Pending commits kept in a checkpoint directory are outside the
    table: keep `older_than` longer than any checkpoint stays pending. Returns
    the paths deleted (or, with `dry_run`, that would be).
    """
    table = open_table(path, fs_options)
    if not dry_run:
        finish_pending_expiry(table)
    file_io = table.file_io
    root = table.table_path.rstrip("/")
    cutoff = time.time() - older_than.total_seconds()
    manager = table.snapshot_manager()
    referenced = _Metadata(table).referenced(list(manager.list_snapshots()) + list(list_tags(table).values()),
                                             progress)
    referenced = {os.path.normpath(p) for p in referenced}
    orphans: list[str] = []
    for status in file_io.list_status(root):
        name = status.base_name
        if name in _ROOT_DIRS:
            continue
        if name == tables.LAKESINK_DIR:
            orphans.extend(_stale_staging(file_io, f"{root}/{name}/staging", cutoff))
            continue
        for file_path, mtime in _walk(file_io, f"{root}/{name}", status):
            if os.path.normpath(file_path) not in referenced and mtime < cutoff:
                orphans.append(file_path)
    if not dry_run:
        for i, orphan in enumerate(orphans):
            if file_io.exists(orphan):
                if _is_dir(file_io, orphan):
                    file_io.delete_directory_quietly(orphan)
                else:
                    file_io.delete_quietly(orphan)
            if progress:
                progress("deleting", i + 1, len(orphans))
    return orphans


def _is_dir(file_io, path: str) -> bool:
    import pyarrow.fs as pafs
    return file_io.get_file_status(path).type == pafs.FileType.Directory


def _walk(file_io, path: str, status=None):
    import pyarrow.fs as pafs
    status = status or file_io.get_file_status(path)
    if status.type == pafs.FileType.Directory:
        for child in file_io.list_status(path):
            yield from _walk(file_io, f"{path}/{child.base_name}", child)
    else:
        yield path, status.mtime or 0


def _stale_staging(file_io, staging: str, cutoff: float) -> list[str]:
    out = []
    if not file_io.exists(staging):
        return out
    for status in file_io.list_status(staging):
        directory = f"{staging}/{status.base_name}"
        newest = max((m for _, m in _walk(file_io, directory, status)), default=status.mtime or 0)
        if max(newest, status.mtime or 0) < cutoff:
            out.append(directory)
    return out


def rollback(path: str, target: int | str, fs_options: dict | None = None) -> Snapshot:
    """Roll the table back to a snapshot id or tag name (newer snapshots are removed).

    Commit-user markers are moved back too, so a streaming writer re-commits
    what the rollback removed instead of skipping it as a replay. Files of the
    removed snapshots become orphans (`remove_orphans`).
    """
    table = open_table(path, fs_options)
    finish_pending_expiry(table)
    manager = table.snapshot_manager()
    if isinstance(target, str) and target.isdigit():
        target = int(target)
    if isinstance(target, int):
        snapshot = manager.get_snapshot_by_id(target)
        if snapshot is None:
            raise ValueError(f"Snapshot {target} does not exist (or was expired) in {table.table_path}.")
    else:
        snapshot = table.tag_manager().get(target)
        if snapshot is None:
            raise ValueError(f"Tag {target!r} does not exist in {table.table_path}.")
    table.rollback_to(target)
    _rewind_markers(table, snapshot.id)
    return snapshot


def _rewind_markers(table, retained_id: int) -> None:
    directory = f"{_lakesink_dir(table)}/commit-users"
    file_io = table.file_io
    if not file_io.exists(directory):
        return
    manager = table.snapshot_manager()
    earliest = manager.try_get_earliest_snapshot()
    for status in file_io.list_status(directory):
        if not status.base_name.endswith(".json"):
            continue
        path = f"{directory}/{status.base_name}"
        marker = json.loads(file_io.read_file_utf8(path))
        if (marker.get("last_snapshot") or 0) <= retained_id and (marker.get("scan_from") or 0) <= retained_id + 1:
            continue
        best = None
        for snapshot_id in range(retained_id, (earliest.id if earliest else 1) - 1, -1):
            snapshot = manager.get_snapshot_by_id(snapshot_id)
            if snapshot is not None and snapshot.commit_user == marker.get("commit_user"):
                best = snapshot.commit_identifier
                break
        marker.update(last_identifier=best, last_snapshot=retained_id, scan_from=None)
        write_file_atomically(file_io, path, json.dumps(marker))


def create_tag(path: str, name: str, snapshot_id: int | None = None, time_retained: str | None = None,
               fs_options: dict | None = None) -> Snapshot:
    table = open_table(path, fs_options)
    manager = table.snapshot_manager()
    snapshot = manager.get_snapshot_by_id(snapshot_id) if snapshot_id is not None else manager.get_latest_snapshot()
    if snapshot is None:
        raise ValueError(f"Snapshot {snapshot_id if snapshot_id is not None else '(latest)'} does not exist "
                         f"in {table.table_path}.")
    table.tag_manager().create_tag(snapshot, name, time_retained=time_retained)
    return snapshot
