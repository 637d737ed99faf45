"""The live data files of a snapshot, read through caches: manifest lists and manifests never
change once written, so a stream's planning, its commit's checks and pypaimon's commit read only
what its last commits added (`live_entries`). Maintenance reads through here too."""

from __future__ import annotations

import threading
from collections import OrderedDict

from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.manifest_list_manager import ManifestListManager
from pypaimon.snapshot.snapshot import Snapshot

from ... import storage


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
