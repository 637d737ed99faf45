"""What maintenance reads: a table's snapshots, manifests, tags and live files, and its options."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.utils.file_store_path_factory import canonical_data_file_path

from ... import options as registry
from ... import storage
from ...errors import InvalidOptionError, TableNotFoundError
from .. import tables

MAINTENANCE_USER = "lakesink-maintenance"
BATCH_IDENTIFIER = registry.BATCH_IDENTIFIER
ProgressFn = Callable[[str, int, int], None]  # (step, done, total)


@dataclass(frozen=True)
class MaintenanceOptions:
    """The table options maintenance follows (declared in `lakesink.options`, scope `table`)."""

    retain_min: int
    retain_max: int
    time_retained_ms: int
    expire_limit: int
    partition_expiration_ms: int | None
    partition_formatter: str | None
    partition_pattern: str | None
    auto_tag: str
    tag_period: str
    tag_num_retained_max: int | None
    tag_time_retained: str | None
    consumer_expiration_ms: int | None
    enabled: bool

    @classmethod
    def of(cls, table) -> MaintenanceOptions:
        raw = registry.table_options_of(table)

        def value(key):
            return registry.table_value(raw, key)

        retain_min, retain_max = value("snapshot.num-retained.min"), value("snapshot.num-retained.max")
        if retain_max < retain_min:
            raise InvalidOptionError("snapshot.num-retained.max", retain_max,
                                     f"at least snapshot.num-retained.min ({retain_min})")
        return cls(
            retain_min=retain_min, retain_max=retain_max,
            time_retained_ms=value("snapshot.time-retained"), expire_limit=value("snapshot.expire.limit"),
            partition_expiration_ms=value("partition.expiration-time"),
            partition_formatter=value("partition.timestamp-formatter"),
            partition_pattern=value("partition.timestamp-pattern"),
            auto_tag=value("tag.automatic-creation"), tag_period=value("tag.creation-period"),
            tag_num_retained_max=value("tag.num-retained-max"),
            tag_time_retained=value("tag.default-time-retained"),
            consumer_expiration_ms=value("consumer.expiration-time"),
            enabled=value("maintenance.enabled"),
        )


def open_table(path: str, fs_options: dict | None = None):
    table = tables.open_table(path, fs_options)
    if table is None:
        raise TableNotFoundError(f"No Paimon table at {storage.normalize(path)}.", table=storage.normalize(path))
    return table


def table_of(table_or_path, fs_options=None):
    return open_table(table_or_path, fs_options) if isinstance(table_or_path, str) else table_or_path


def lakesink_dir(table) -> str:
    return f"{table.table_path.rstrip('/')}/{tables.LAKESINK_DIR}"


def manifest_dir_of(table) -> str:
    return f"{table.table_path.rstrip('/')}/manifest"


def lists_of(snapshot: Snapshot) -> set[str]:
    return {n for n in (snapshot.base_manifest_list, snapshot.delta_manifest_list,
                        snapshot.changelog_manifest_list) if n}


def data_file_path(table, entry) -> str:
    if entry.file.external_path:
        return entry.file.external_path
    return canonical_data_file_path(table, tuple(entry.partition.values), entry.bucket, entry.file.file_name)


def entry_paths(table, entry) -> list[str]:
    main = data_file_path(table, entry)
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


def live_entries(table, snapshot: Snapshot | None = None) -> list:
    """The data files (manifest entries) a snapshot holds, ADD/DELETE applied.

    Manifests never change once written, so their entries are kept between calls (those of the
    snapshot last read, per table): a stream's planning and compaction read only the manifests
    its last commits added, not the whole table every micro-batch."""
    snapshot = snapshot or table.snapshot_manager().get_latest_snapshot()
    if snapshot is None:
        return []
    metas = CachedManifestLists(table).read_all(snapshot)
    return _CachedManifests(table).read_entries_parallel(metas, drop_stats=False)


class CachedManifestLists(ManifestListManager):
    """pypaimon's manifest-list reader, lists kept by path: a list never changes once written,
    and a micro-batch reads the latest snapshot's lists several times (its plan, its commit's
    check, pypaimon's commit itself), ~1 ms each."""

    _kept: OrderedDict[str, list] = OrderedDict()
    _KEEP = 64
    _lock = threading.Lock()

    def read(self, manifest_list_name: str, file_size: int | None = None) -> list:
        key = f"{self.manifest_path}/{manifest_list_name}"
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return list(kept)
        metas = super().read(manifest_list_name, file_size)
        with self._lock:
            self._kept[key] = metas
            while len(self._kept) > self._KEEP:
                self._kept.popitem(last=False)
        return list(metas)


class _CachedManifests(ManifestFileManager):
    """pypaimon's manifest reader, with whole-manifest reads (no filters) kept by file name."""

    _by_table: dict[str, dict[str, list]] = {}
    _lock = threading.Lock()

    def read_entries_parallel(self, manifest_files, *args, **kwargs):
        with self._lock:
            cached = self._by_table.get(self.manifest_path, {})
        self._kept = {m.file_name: cached[m.file_name] for m in manifest_files if m.file_name in cached}
        missing = len(manifest_files) - len(self._kept)
        local = storage.is_local(self.manifest_path)
        if (missing <= 1 or local) and not args and set(kwargs) <= {"drop_stats", "max_workers"}:
            # No thread pool (pypaimon starts one for more than one manifest) where it cannot
            # pay: one manifest to read, or a local disk, where reading is Python under the GIL
            # and each thread start waited ~3 ms in a busy Spark worker (a stream's commit and
            # plan read a few new manifests every micro-batch). Object stores wait on the
            # network: several manifests are read in parallel there.
            out = _live(entry for m in manifest_files
                        for entry in self.read(m.file_name, drop_stats=kwargs.get("drop_stats", True),
                                               file_size=m.file_size))
        else:
            kwargs["max_workers"] = max(1, min(kwargs.get("max_workers", 8), missing))
            out = super().read_entries_parallel(manifest_files, *args, **kwargs)
        with self._lock:  # only the manifests of the snapshot read last: bounded by one snapshot
            self._by_table[self.manifest_path] = self._kept
        return out

    def read(self, manifest_file_name, manifest_entry_filter=None, drop_stats=True, **kwargs):
        whole = manifest_entry_filter is None and not drop_stats and not any(kwargs.get(k) for k in (
            "early_entry_filter", "early_record_filter", "partition_filter", "selected_blocks"))
        if whole and manifest_file_name in self._kept:
            return self._kept[manifest_file_name]
        entries = super().read(manifest_file_name, manifest_entry_filter, drop_stats, **kwargs)
        if whole:
            self._kept[manifest_file_name] = entries
        return entries


def _live(entries) -> list:
    """The ADD entries no DELETE entry among `entries` removes (as pypaimon's parallel read)."""
    added, deleted = [], set()
    for entry in entries:
        if entry.kind == 0:
            added.append(entry)
        else:
            deleted.add(entry.identifier())
    return [entry for entry in added if entry.identifier() not in deleted] if deleted else added


class Metadata:
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
        manifest_dir = manifest_dir_of(self.table)
        for i, snapshot in enumerate(snapshots):
            out.update(f"{manifest_dir}/{n}" for n in lists_of(snapshot))
            if snapshot.index_manifest:
                out.add(f"{manifest_dir}/{snapshot.index_manifest}")
            added, deleted = set(), set()
            for meta in self.manifests(snapshot):
                path = f"{manifest_dir}/{meta.file_name}"
                if path in out and not live_only:
                    continue
                out.add(path)
                for entry in self.entries(meta):
                    (added if entry.kind == 0 or not live_only else deleted).update(entry_paths(self.table, entry))
            out.update(added - deleted)
            if progress:
                progress("reading snapshots", i + 1, len(snapshots))
        return out
