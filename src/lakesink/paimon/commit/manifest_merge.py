"""Manifest merging, as Paimon's ManifestFileMerger does it.

Every commit adds one small manifest. pypaimon carries all of them forward in
each snapshot's base manifest list, so reading and rewriting that list costs
more with every commit. Paimon keeps the list short:

* minor merge: walking the manifests in order, once the ones gathered reach
  `manifest.target-file-size` they are merged into target-size manifests; the
  tail is merged only when at least `manifest.merge-min-count` accumulated;
* full merge: when the manifests after the leading "clean" ones (target size,
  no DELETE entries) weigh `manifest.full-compaction-threshold-size` or more,
  DELETE entries are applied to the files they delete and dropped.

Merging drops an ADD together with its later DELETE (`FileEntry.merge_entries`),
so the merged manifests describe exactly the same live files. Merged manifests
are new files; the old ones stay until snapshot expiry deletes them, so a
reader of an older snapshot never misses one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.manifest.schema.file_entry import FileEntry
from pypaimon.manifest.schema.manifest_file_meta import ManifestFileMeta

from ... import options as registry

MERGE_MIN_COUNT = "manifest.merge-min-count"
TARGET_FILE_SIZE = "manifest.target-file-size"
FULL_COMPACTION_SIZE = "manifest.full-compaction-threshold-size"

_ADD, _DELETE = 0, 1


@dataclass(frozen=True)
class MergePolicy:
    target_size: int
    min_count: int
    full_compaction_size: int

    @classmethod
    def of(cls, table) -> MergePolicy:
        raw = registry.table_options_of(table)
        return cls(target_size=registry.table_value(raw, TARGET_FILE_SIZE),
                   min_count=max(registry.table_value(raw, MERGE_MIN_COUNT), 2),
                   full_compaction_size=registry.table_value(raw, FULL_COMPACTION_SIZE))


class ManifestMerger:
    """Merges one table's manifest list; remembers what it wrote (to delete on a failed commit)."""

    def __init__(self, table, policy: MergePolicy | None = None):
        self.files = ManifestFileManager(table)
        self.file_io = table.file_io
        self.policy = policy or MergePolicy.of(table)
        self.written: list[ManifestFileMeta] = []

    def merge(self, manifests: list[ManifestFileMeta]) -> list[ManifestFileMeta]:
        try:
            full = self._try_full(manifests)
            return full if full is not None else self._minor(manifests)
        except BaseException:
            self.delete_written()
            raise

    def delete_written(self) -> None:
        """Remove manifests this merger wrote: only for a commit known not to have landed."""
        for meta in self.written:
            self.file_io.delete_quietly(f"{self.files.manifest_path}/{meta.file_name}")
        self.written = []

    # -- minor ---------------------------------------------------------------
    def _minor(self, manifests: list[ManifestFileMeta]) -> list[ManifestFileMeta]:
        result: list[ManifestFileMeta] = []
        candidates: list[ManifestFileMeta] = []
        size = 0
        for meta in manifests:
            candidates.append(meta)
            size += meta.file_size
            if size >= self.policy.target_size:
                result.extend(self._merge_candidates(candidates))
                candidates, size = [], 0
        if len(candidates) >= self.policy.min_count:
            result.extend(self._merge_candidates(candidates))
        else:
            result.extend(candidates)
        return result

    def _merge_candidates(self, candidates: list[ManifestFileMeta]) -> list[ManifestFileMeta]:
        if len(candidates) == 1:
            return list(candidates)
        entries = []
        for meta in candidates:
            entries.extend(self._read(meta))
        return self._write(FileEntry.merge_entries(entries))

    # -- full ----------------------------------------------------------------
    def _try_full(self, manifests: list[ManifestFileMeta]) -> list[ManifestFileMeta] | None:
        split = 0
        while (split < len(manifests) and manifests[split].num_deleted_files == 0
               and manifests[split].file_size >= self.policy.target_size):
            split += 1
        base, delta = manifests[:split], manifests[split:]
        if sum(m.file_size for m in delta) < self.policy.full_compaction_size:
            return None
        delta_entries = []
        for meta in delta:
            delta_entries.extend(self._read(meta))
        merged = FileEntry.merge_entries(delta_entries)
        deleted = {e.identifier() for e in merged if e.kind == _DELETE}
        result: list[ManifestFileMeta] = []
        rewritten = []
        for meta in base:
            entries = self._read(meta) if deleted else None
            if entries is None or not any(e.identifier() in deleted for e in entries):
                result.append(meta)
            else:
                rewritten.extend(e for e in entries if e.identifier() not in deleted)
        rewritten.extend(e for e in merged if e.kind == _ADD)
        return result + self._write(rewritten)

    # -- i/o -----------------------------------------------------------------
    def _read(self, meta: ManifestFileMeta):
        return self.files.read(meta.file_name, drop_stats=False, file_size=meta.file_size)

    def _write(self, entries) -> list[ManifestFileMeta]:
        if not entries:
            return []
        metas = self.files.rolling_write(list(entries), self.policy.target_size, f"manifest-{uuid.uuid4()}")
        self.written.extend(metas)
        return metas
