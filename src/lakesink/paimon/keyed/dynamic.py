"""Dynamic-bucket primary-key tables (`bucket=-1`, Paimon's default): which bucket a key goes to,
and the hash index that remembers it.

Paimon keeps, per (partition, bucket), an index file of kind HASH: the int32 hashes of the keys
in that bucket (Java's `HashIndexFile`, pypaimon's `index/dynamic_bucket.py`), listed in the
snapshot's index manifest. A key's hash is the `BinaryRow.hashCode()` of its trimmed primary key
(`files.keyhash.key_hashes`, the Murmur3 of the fixed-bucket function).

Assignment, as Paimon's engines distribute it: a key goes to assigner `abs(hash % n)` of `n`;
assigner `a` owns the buckets `b % n == a`, keeps every key the partition's index already has in
its bucket, and puts new keys into its own buckets with fewer than `target-row-num` keys, opening
new ones as those fill (pypaimon's `HashBucketAssigner`, run in the assigner's task). Keys of one
hash land in one assigner, so no key is ever given two buckets.

The index is written at commit (`index_changes`), from the keys of the files committed: each
bucket that got new keys gets a new complete index file (its old hashes and the new ones),
replacing the old one in the same snapshot. Every writer plans on one snapshot, so a concurrent
writer in the same partitions is a conflict (`partition_conflict`), never a key in two buckets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from ...errors import ConfigurationError, UnsupportedTableError
from ..files.keyhash import key_hashes
from .layout import KEY_PREFIX, KeyedSpec

HASH_INDEX = "HASH"


def assigner_of(hashes: np.ndarray, assigners: int) -> np.ndarray:
    """abs(hash % n) with Java's truncating remainder: Paimon's `computeAssigner` for one channel
    per assigner and a partition offset of 0 (assigner and task are the same)."""
    return np.abs(np.fmod(hashes.astype(np.int64), assigners)).astype(np.int32)


@dataclass(frozen=True)
class DynamicPlan:
    """What the assigners of one write share (picklable): the table, the snapshot whose index
    they read, how many assigners, and the table's assignment options."""

    path: str
    fs_options: dict | None
    snapshot_id: int | None  # None: the table has no snapshot (every key is new)
    assigners: int
    target_rows: int
    max_buckets: int = -1
    branch: str | None = None  # the Paimon branch written (None: main): its snapshots' index

    def open(self):
        from ..table import tables
        table = tables.open_table(self.path, self.fs_options, self.branch)
        snapshot = None
        if table is not None and self.snapshot_id:
            snapshot = table.snapshot_manager().get_snapshot_by_id(self.snapshot_id)
            if snapshot is None:
                raise UnsupportedTableError(
                    f"{self.path}: snapshot {self.snapshot_id}, which this write's bucket assignment was "
                    "planned on, has expired. Write again.")
        return table, snapshot


def plan(target, spec: KeyedSpec, snapshot_id: int | None, default_assigners: int) -> DynamicPlan:
    options = spec.dynamic
    if spec.cross_partition:  # paimon.keyed.cross_partition: the table's keys, not its hash index
        from .cross_partition import assigner_count
        return DynamicPlan(target.path, target.fs_options, snapshot_id or None,
                           assigner_count(options, default_assigners), options.target_rows)
    if options.max_buckets == 0:
        raise ConfigurationError("dynamic-bucket.max-buckets=0: it must be -1 (unlimited) or at least 1.",
                                 option="dynamic-bucket.max-buckets")
    return DynamicPlan(target.path, target.fs_options, snapshot_id or None,
                       options.assigner_count(default_assigners), options.target_rows, options.max_buckets,
                       getattr(target, "branch", None))


class Assigners:
    """The assigners of one task: each row's bucket from (partition, key hash), pypaimon's
    `HashBucketAssigner` per assigner id (its partition indexes loaded once, filtered to the
    hashes it is asked for)."""

    def __init__(self, plan: DynamicPlan):
        self.plan = plan
        self._table = self._snapshot = None
        self._by_id: dict[int, object] = {}
        self._stored: dict[tuple, StoredIndex] = {}

    def assign(self, partitions: list[tuple], hashes: np.ndarray) -> np.ndarray:
        from pypaimon.index.dynamic_bucket import HashBucketAssigner
        if self._table is None:
            self._table, self._snapshot = self.plan.open()
        ids = assigner_of(hashes, self.plan.assigners)
        out = np.zeros(len(hashes), np.int32)
        one_partition = len(set(partitions)) == 1  # an unpartitioned table, or one partition
        for assign_id in np.unique(ids).tolist():
            rows = np.flatnonzero(ids == assign_id)
            assigner = self._by_id.get(assign_id)
            if assigner is None:
                assigner = HashBucketAssigner(self._table, self.plan.assigners, self.plan.assigners, assign_id,
                                              self.plan.target_rows, self.plan.max_buckets,
                                              ignore_existing=self._snapshot is None, snapshot=self._snapshot)
                self._by_id[assign_id] = assigner
            by_partition: dict[tuple, list[int]] = {}
            if one_partition:
                by_partition[partitions[0]] = rows
            else:
                for i in rows.tolist():
                    by_partition.setdefault(partitions[i], []).append(i)
            for partition, at in by_partition.items():
                try:
                    stored = self._stored.get((assign_id, partition))
                    if stored is None:
                        stored = self._stored[(assign_id, partition)] = StoredIndex.of(assigner, partition)
                    out[at] = assign_keys(assigner, partition, hashes[at], stored)
                except RuntimeError as exc:  # e.g. data files without an index: refuse, name the table
                    raise UnsupportedTableError(f"{self.plan.path}: {exc}") from None
        return out


def index_entries(table, snapshot, partition: tuple) -> list:
    """The HASH index entries of `partition` in `snapshot`'s index manifest (None: no snapshot)."""
    if snapshot is None:
        return []
    from pypaimon.index.index_file_handler import IndexFileHandler
    return IndexFileHandler(table).scan(snapshot, lambda e: e.index_file.index_type == HASH_INDEX
                                        and tuple(e.partition.values) == partition)


class StoredIndex:
    """One assigner's keys in a partition's HASH index as of the planned snapshot: their hashes
    sorted, with their buckets, looked up in bulk. (pypaimon restores the hashes a batch asks
    for by reading the partition's index files hash by hash, again for every batch with a key it
    has not seen: ~0.4 s a batch on an index of 1M keys. Paimon's own assigners hold the whole
    index of a partition too.)"""

    def __init__(self, hashes: np.ndarray, buckets: np.ndarray):
        order = np.argsort(hashes, kind="stable")
        self.hashes, self.buckets = hashes[order], buckets[order]

    @classmethod
    def of(cls, assigner, partition: tuple) -> StoredIndex:
        if assigner.ignore_existing or assigner.snapshot is None:
            return cls(np.empty(0, np.int32), np.empty(0, np.int32))
        return cls.read(assigner.table, partition, index_entries(assigner.table, assigner.snapshot, partition),
                        (assigner.num_assigners, assigner.assign_id))

    @classmethod
    def read(cls, table, partition: tuple, entries: list, only: tuple[int, int] | None = None) -> StoredIndex:
        """The hashes of a partition's index `entries` (`index_entries`); `only` = (n, a): those of
        assigner `a` of `n`."""
        hashes, buckets = [], []
        for entry in entries:
            path = table.path_factory().bucket_index_path(partition, entry.bucket, entry.index_file, table.file_io)
            with table.file_io.new_input_stream(path) as stream:
                found = np.frombuffer(stream.read(), ">i4").astype(np.int32)  # Paimon's HashIndexFile
            if only is not None:
                found = found[assigner_of(found, only[0]) == only[1]]
            hashes.append(found)
            buckets.append(np.full(len(found), entry.bucket, np.int32))
        if not hashes:
            return cls(np.empty(0, np.int32), np.empty(0, np.int32))
        return cls(np.concatenate(hashes), np.concatenate(buckets))

    def lookup(self, values: np.ndarray) -> np.ndarray:
        """Each value's bucket, -1 where the index does not hold it."""
        if not len(self.hashes):
            return np.full(len(values), -1, np.int32)
        at = np.minimum(np.searchsorted(self.hashes, values), len(self.hashes) - 1)
        return np.where(self.hashes[at] == values, self.buckets[at], -1).astype(np.int32)


def assign_keys(assigner, partition: tuple, hashes: np.ndarray, stored: StoredIndex) -> np.ndarray:
    """The buckets pypaimon's `HashBucketAssigner.assign_batch` gives `hashes` (all of this
    assigner's) in `partition`, its per-key steps taken in bulk: pypaimon loads and checks the
    partition's index (its buckets and their key counts), a key the planned snapshot's index
    holds (`stored`) or this write gave a bucket keeps it, and a run of new keys (in first-seen
    order) fills the first bucket with room as far as the room goes. Only where no bucket has
    room does pypaimon's own step run, for one key (it opens the next bucket, or picks one when
    max-buckets is reached). pypaimon's per-key path validated and routed each key again:
    ~2.5 µs a key, 1.2 s for a task's 500k keys."""
    from itertools import repeat

    from pypaimon.index.dynamic_bucket import is_my_bucket

    values, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    requested = values[order].tolist()
    index = assigner._partition_indexes.get(partition)
    if index is None:  # pypaimon's checks and bucket counts; the hashes come from `stored`
        index = assigner._partition_indexes[partition] = assigner._load_partition(partition, set())
    known = index.hash_to_bucket  # the keys this write (or the caller) gave buckets
    out = stored.lookup(values[order])
    unseen = np.flatnonzero(out < 0)
    if known and len(unseen):
        out[unseen] = np.fromiter(map(known.get, [requested[i] for i in unseen.tolist()], repeat(-1)), np.int32,
                                  len(unseen))
    fresh = np.flatnonzero(out < 0).tolist()
    room, target = index.non_full_bucket_information, index.target_bucket_row_number

    def mine(bucket):
        return is_my_bucket(bucket, assigner.num_assigners, assigner.assign_id)

    start = 0
    while start < len(fresh):
        for bucket, count in list(room.items()):  # the first with room; full ones dropped, as pypaimon does
            if count < target:
                break
            del room[bucket]
        else:
            bucket = None
        if bucket is None:  # pypaimon's step for one key: a new bucket, or one picked at random
            at = fresh[start]
            chosen = index.assign(requested[at], mine, assigner.max_buckets_num, assigner.max_bucket_id)
            assigner.max_bucket_id = max(assigner.max_bucket_id, chosen)
            out[at] = chosen
            start += 1
            continue
        taken = fresh[start:start + target - room[bucket]]
        room[bucket] += len(taken)
        known.update(zip([requested[i] for i in taken], [bucket] * len(taken)))
        out[taken] = bucket
        assigner.max_bucket_id = max(assigner.max_bucket_id, bucket)
        start += len(taken)
    by_value = np.empty(len(out), np.int32)
    by_value[order] = out
    return by_value[inverse.reshape(-1)]


def key_hashes_of(table_rows, spec: KeyedSpec, fields, prefixed: bool = False) -> np.ndarray:
    """int32 hashes of the rows' trimmed primary keys (`prefixed`: key columns named `_KEY_<k>`)."""
    if prefixed:
        table_rows = table_rows.select([KEY_PREFIX + k for k in spec.trimmed_keys]).rename_columns(
            list(spec.trimmed_keys))
    return key_hashes(table_rows, list(spec.trimmed_keys), fields)


# -- at commit: the index files of the buckets that got new keys -----------------------------

def index_changes(table, files, latest, fresh: bool = False) -> tuple[dict, object]:
    """{(partition, bucket): (index entries to add, to delete)} for the data files `files`
    (committables still staged or already placed) on top of snapshot `latest` (`fresh`: an
    overwrite, on top of nothing), and the pypaimon maintainer that wrote the new index files
    (its `abort()` removes them)."""
    from concurrent.futures import ThreadPoolExecutor

    from pypaimon.index.dynamic_bucket import DynamicBucketIndexMaintainer
    from pypaimon.index.index_file_handler import IndexFileHandler

    from ..files.datafiles import table_path_of
    spec = KeyedSpec.of_table(table)
    fields = table.table_schema.fields
    data = [f for f in files if not f.changelog]
    file_io = table.file_io

    def hashes(staged):
        path = staged.staged_path if staged.staged_path and file_io.exists(staged.staged_path) \
            else table_path_of(table, staged)
        with file_io.new_input_stream(path) as stream:
            keys = pq.read_table(stream, columns=[KEY_PREFIX + k for k in spec.trimmed_keys])
        return (tuple(staged.partition), staged.bucket), key_hashes_of(keys, spec, fields, prefixed=True)

    by_bucket: dict[tuple, list] = {}
    with ThreadPoolExecutor(max(1, min(8, len(data)))) as pool:
        for key, found in pool.map(hashes, data):
            by_bucket.setdefault(key, []).append(found)
    existing = {}
    if latest is not None and not fresh:
        for entry in IndexFileHandler(table).scan(latest, lambda e: e.index_file.index_type == HASH_INDEX):
            existing[(tuple(entry.partition.values), entry.bucket)] = entry
    maintainer = DynamicBucketIndexMaintainer(table, ignore_existing=fresh, snapshot=latest)
    for (partition, bucket), parts in by_bucket.items():
        # notify_new_record's step for every key of the bucket at once (~2 µs a key one by one)
        hashes, modified = maintainer._states.get((partition, bucket)) or (
            maintainer._load_bucket(partition, bucket), False)
        before = len(hashes)
        hashes.update(np.unique(np.concatenate(parts)).tolist())
        maintainer._states[(partition, bucket)] = (hashes, modified or len(hashes) != before)
    changes = {}
    try:
        for key, change in maintainer.prepare_commit().items():
            old = existing.get(key)
            deletes = [_as_delete(old)] if old is not None else []
            changes[key] = (change.additions, deletes)
    except BaseException:
        maintainer.abort()
        raise
    return changes, maintainer


def _as_delete(entry):
    from pypaimon.manifest.index_manifest_entry import IndexManifestEntry
    return IndexManifestEntry(kind=1, partition=entry.partition, bucket=entry.bucket, index_file=entry.index_file)


def partition_conflict(table, check_from: int, latest, partitions: set | None, commit_user: str,
                       identifier: int) -> str | None:
    """Why a dynamic-bucket commit planned on snapshot `check_from` may not land on `latest`: a
    snapshot in between (not a compaction, not an earlier batch of this commit user) added files
    to a partition it writes (`partitions` None: to any partition, a cross-partition table's
    rule). Its assignment read that partition's index as of `check_from`; committing anyway could
    give a key a second bucket, or a second partition. None: no such snapshot."""
    if latest is None or latest.id <= check_from:
        return None
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager
    manager = table.snapshot_manager()
    lists, manifests = ManifestListManager(table), ManifestFileManager(table)
    # A deletion-vector table's commits are merged on write: OVERWRITE snapshots, as Paimon's.
    own_kinds = ("APPEND", "OVERWRITE") if table.options.deletion_vectors_enabled() else ("APPEND",)
    for snapshot_id in range(check_from + 1, latest.id + 1):
        snapshot = manager.get_snapshot_by_id(snapshot_id)
        if snapshot is None:
            return (f"snapshot {snapshot_id} (after snapshot {check_from}, which this write's bucket "
                    "assignment was planned on) has expired, so other writers cannot be ruled out")
        if snapshot.commit_kind == "COMPACT":
            continue  # keeps every key in its bucket and the index as it was
        if (snapshot.commit_user == commit_user and snapshot.commit_kind in own_kinds
                and snapshot.commit_identifier <= identifier):
            continue  # an earlier batch of this stream, planned before this one (or this commit itself)
        for meta in lists.read_delta(snapshot):
            for entry in manifests.read(meta.file_name, file_size=meta.file_size):
                partition = tuple(entry.partition.values)
                if entry.kind == 0 and (partitions is None or partition in partitions):
                    return (f"snapshot {snapshot_id} ({snapshot.commit_user!r}) wrote partition {partition} "
                            f"after snapshot {check_from}, which this write's bucket assignment was planned on")
    return None


# -- without a shuffle: every task assigns alike ----------------------------------------------

class PlannedAssignment:
    """Assignment by tasks that cannot share their rows (a Python data source's tasks, which
    Spark gives any rows): every task reads the partition's whole index as of the planned
    snapshot, keeps known keys in their buckets, and sends a new key to the first bucket of its
    assigner (`abs(hash % n)`) that had room in that snapshot, or the assigner's next new bucket.
    The same function in every task, so a key gets one bucket however its rows are spread; a
    bucket may pass `target-row-num` by one write's new keys (the next write opens another).
    Looked up in bulk: the partition's index as sorted arrays (`StoredIndex`), read once a task."""

    _NONE, _FULL = -2, -1  # an assigner without a bucket for new keys; one whose buckets are full

    def __init__(self, plan: DynamicPlan):
        self.plan = plan
        self._table = self._snapshot = None
        # partition -> (its index, each assigner's bucket for new keys, full assigners' buckets)
        self._partitions: dict[tuple, tuple[StoredIndex, np.ndarray, dict]] = {}

    def assign(self, partitions: list[tuple], hashes: np.ndarray) -> np.ndarray:
        if self._table is None:
            self._table, self._snapshot = self.plan.open()
        hashes = np.asarray(hashes, np.int32)
        out = np.zeros(len(hashes), np.int32)
        distinct = set(partitions)
        if len(distinct) == 1:  # an unpartitioned table, or one partition
            groups = {next(iter(distinct)): slice(None)}
        else:
            rows: dict[tuple, list[int]] = {}
            for i, partition in enumerate(partitions):
                rows.setdefault(partition, []).append(i)
            groups = {p: np.asarray(r, np.int64) for p, r in rows.items()}
        for partition, rows in groups.items():
            out[rows] = self._assign(partition, hashes[rows])
        return out

    def _assign(self, partition: tuple, hashes: np.ndarray) -> np.ndarray:
        stored, opened, full = self._partition(partition)
        buckets = stored.lookup(hashes)
        new = np.flatnonzero(buckets < 0)
        if not len(new):
            return buckets
        n = self.plan.assigners
        ids = assigner_of(hashes[new], n)
        chosen = opened[ids]
        if (chosen == self._NONE).any():
            a = int(ids[np.argmax(chosen == self._NONE)])
            raise ConfigurationError(
                f"{self.plan.path}: partition {partition} has dynamic-bucket.max-buckets={self.plan.max_buckets} "
                f"buckets, none of them owned by assigner {a} of {n}; raise dynamic-bucket.max-buckets.",
                option="dynamic-bucket.max-buckets")
        for a in np.unique(ids[chosen == self._FULL]).tolist():  # max-buckets reached: spread by hash
            at = np.flatnonzero((ids == a) & (chosen == self._FULL))
            own = full[a]
            chosen[at] = own[np.abs(hashes[new][at].astype(np.int64)) % len(own)]
        buckets[new] = chosen
        return buckets

    def _partition(self, partition: tuple):
        found = self._partitions.get(partition)
        if found is not None:
            return found
        entries = index_entries(self._table, self._snapshot, partition)
        stored = StoredIndex.read(self._table, partition, entries)
        n, target, most = self.plan.assigners, self.plan.target_rows, self.plan.max_buckets
        counts = {e.bucket: e.index_file.row_count for e in entries}
        opened = np.full(n, self._NONE, np.int32)
        full: dict[int, np.ndarray] = {}
        for a in range(n):
            own = [b for b in counts if b % n == a]
            room = [b for b in own if counts[b] < target]
            if room:
                opened[a] = room[0]
                continue
            fresh = next((b for b in range(a, most if most > 0 else 1 << 15, n) if b not in counts), None)
            if fresh is not None:
                opened[a] = fresh
            elif own:
                opened[a], full[a] = self._FULL, np.asarray(sorted(own), np.int32)
        self._partitions[partition] = (stored, opened, full)
        return self._partitions[partition]
