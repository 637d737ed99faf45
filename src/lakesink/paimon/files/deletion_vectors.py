"""Deletion vectors: the rows of a data file marked deleted, as Paimon keeps them.

A table with `deletion-vectors.enabled` may mark rows of its data files deleted instead of
rewriting the files: per (partition, bucket), one or more index files of kind DELETION_VECTORS
(listed in the snapshot's index manifest) hold a bitmap of row positions per data file. Every
lakesink path that reads, marks or rewrites such files goes through this module: the merge on
write of keyed tables, row-level changes and compaction of append tables, and reads that hand
files to Spark's own Parquet reader. The bitmaps and the index file format are pypaimon's
(`pypaimon.deletionvectors`, the index reader and writer of `pypaimon.write.table_delete`).

A bucket's vectors change as a whole: a commit deletes the bucket's index entries it read and
adds one index file holding the vectors after the change. pypaimon's conflict check then
refuses the commit if another writer changed that bucket's vectors meanwhile (the entries it
deletes are gone) or removed a file it marks (the file is no longer live).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

_ADD, _DELETE = 0, 1
KIND = "DELETION_VECTORS"


def enabled(table) -> bool:
    return bool(table.options.deletion_vectors_enabled())


def positions(vector) -> list[int]:
    """The row positions a deletion vector marks, ascending (none for None)."""
    if vector is None or vector.is_empty():
        return []
    return sorted(int(p) for p in vector.bit_map())


def drop_marked(data, vector):
    """`data` (an Arrow table, one data file's rows in file order) without the rows `vector` marks."""
    import pyarrow as pa
    import pyarrow.compute as pc

    gone = positions(vector)
    if not gone:
        return data
    keep = pc.invert(pc.is_in(pa.array(range(data.num_rows), pa.int64()), pa.array(gone, pa.int64())))
    return data.filter(keep)


def read_vector(file_io, deletion) -> object | None:
    """The deletion vector a `Deletion` (or pypaimon `DeletionFile`) points at; None for None."""
    if deletion is None:
        return None
    from pypaimon.deletionvectors.deletion_vector import DeletionVector
    from pypaimon.table.source.deletion_file import DeletionFile

    if not isinstance(deletion, DeletionFile):
        deletion = DeletionFile(dv_index_path=deletion[0], offset=deletion[1], length=deletion[2],
                                cardinality=deletion[3])
    return DeletionVector.read(file_io, deletion)


class Vectors:
    """A snapshot's deletion vectors per bucket, read and written with pypaimon's DV index code."""

    def __init__(self, table, snapshot):
        from pypaimon.write.table_delete import TableDeleteByRowId

        self.table, self.snapshot = table, snapshot
        self._io = TableDeleteByRowId(table)  # its index-file reader and writer; it deletes nothing here
        self._entries = None

    def _row(self, partition: tuple):
        from pypaimon.table.row.generic_row import GenericRow
        return GenericRow(list(partition), self.table.partition_keys_fields)

    def entries(self) -> list:
        """The snapshot's live DELETION_VECTORS index entries (all buckets)."""
        if self._entries is None:
            self._entries = []
            if self.snapshot is not None and self.snapshot.index_manifest:
                from pypaimon.manifest.index_manifest_file import IndexManifestFile
                self._entries = [e for e in IndexManifestFile(self.table).read(self.snapshot.index_manifest)
                                 if e.kind == _ADD and e.index_file.index_type == KIND]
        return self._entries

    def deletions(self) -> dict[str, tuple]:
        """{data file name: (index file path, offset, length, cardinality)}: where each marked file's
        vector lies, without reading it (a picklable `Deletion` for tasks)."""
        out = {}
        for entry in self.entries():
            path = self.path_of(entry)
            for name, meta in (entry.index_file.dv_ranges or {}).items():
                out[name] = (path, meta.offset, meta.length, meta.cardinality)
        return out

    def cardinalities(self) -> dict[str, int]:
        """{data file name: rows its vector marks}, from the index manifest alone."""
        return {name: int(d[3] or 0) for name, d in self.deletions().items()}

    def of_bucket(self, partition: tuple, bucket: int) -> tuple[list, dict]:
        """(the bucket's DELETION_VECTORS index entries, {data file name: deletion vector})."""
        if self.snapshot is None:
            return [], {}
        return self._io._read_existing_deletion_vectors(self._row(partition), bucket, self.snapshot.id)

    def write(self, partition: tuple, bucket: int, vectors: dict):
        return self._io._write_deletion_vector_index(self._row(partition), bucket, vectors)

    def path_of(self, entry) -> str:
        return self._io._index_file_path(entry.index_file, entry.partition, entry.bucket)

    def change_bucket(self, partition: tuple, bucket: int, marks: Mapping[str, Iterable[int]] | None = None,
                      dropped: Iterable[str] = ()) -> BucketChange | None:
        """The bucket's index after marking `marks` ({data file name: positions}) and dropping the
        vectors of the files in `dropped` (removed by the same commit). None: nothing changes."""
        entries, vectors = self.of_bucket(partition, bucket)
        dropped = set(dropped)
        after = {name: dv for name, dv in vectors.items() if name not in dropped}
        changed = len(after) != len(vectors) or bool(dropped & set(marks or {}))
        for name, marked in (marks or {}).items():
            if name in dropped:
                continue
            dv = after.get(name)
            if dv is None:
                from pypaimon.deletionvectors import BitmapDeletionVector
                dv = after[name] = BitmapDeletionVector()
            for position in marked:
                changed = dv.checked_delete(int(position)) or changed
        if not changed:
            return None
        adds = [self.write(partition, bucket, after)] if after else []
        return BucketChange(adds, [as_delete(e) for e in entries], [self.path_of(a) for a in adds],
                            {name: dv.get_cardinality() for name, dv in after.items()})


class BucketChange:
    """One bucket's deletion-vector index change: entries to add (their files written) and delete."""

    def __init__(self, adds: list, deletes: list, paths: list[str], cardinalities: dict[str, int]):
        self.adds, self.deletes, self.paths, self.cardinalities = adds, deletes, paths, cardinalities


def as_delete(entry):
    from pypaimon.manifest.index_manifest_entry import IndexManifestEntry
    return IndexManifestEntry(kind=_DELETE, partition=entry.partition, bucket=entry.bucket,
                              index_file=entry.index_file)


def index_entries(changes: Iterable[BucketChange]) -> tuple[list, list]:
    """(adds, deletes) of several buckets' changes, as pypaimon's commit takes them."""
    adds, deletes = [], []
    for change in changes:
        adds += change.adds
        deletes += change.deletes
    return adds, deletes


def discard(file_io, changes: Iterable[BucketChange]) -> None:
    """Index files of a commit that definitely failed: referenced by nothing."""
    for change in changes:
        for path in change.paths:
            file_io.delete_quietly(path)


def applied_conflict(table, snapshot, replaced, rows_after: int) -> str | None:
    """A rewrite of `replaced` (data files) into `rows_after` rows applied their deletion vectors as
    it read them. A file's vector only grows while it is live, so the rewrite still holds exactly the
    rows not deleted iff the vectors in `snapshot` mark as many rows as the rewrite left out. A
    description of the difference, or None (also when the files are gone: the commit's own file
    check reports that)."""
    marked = Vectors(table, snapshot).cardinalities()
    now = sum(marked.get(f.meta.file_name, 0) for f in replaced)
    applied = sum(f.row_count for f in replaced) - rows_after
    if now == applied:
        return None
    return (f"rows of the rewritten files were marked deleted after the rewrite read them (snapshot "
            f"{snapshot.id if snapshot else None} marks {now} rows of them, the rewrite left out {applied})")


def marked_since(table, snapshot, replaced, applied: Mapping[str, int]) -> str | None:
    """A rewrite read `replaced` when their vectors marked `applied` ({file name: rows}, absent: 0).
    A description of the files whose vectors in `snapshot` mark more rows, or None."""
    marked = Vectors(table, snapshot).cardinalities()
    grown = [f.meta.file_name for f in replaced
             if marked.get(f.meta.file_name, 0) != applied.get(f.meta.file_name, 0)]
    if not grown:
        return None
    return (f"rows of {len(grown)} rewritten file(s) ({grown[0]}, ...) were marked deleted after the rewrite "
            f"read them (snapshot {snapshot.id if snapshot else None})")
