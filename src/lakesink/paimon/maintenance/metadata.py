"""What maintenance reads: a table's snapshots, manifests, tags and live files, and its options."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.snapshot.snapshot import Snapshot
from pypaimon.utils.file_store_path_factory import canonical_data_file_path

from ... import options as registry
from ... import storage
from ...errors import InvalidOptionError, TableNotFoundError
from ..table import tables

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
