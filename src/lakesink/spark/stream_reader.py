"""The Spark-native streaming read: `spark.readStream.format("paimon")` (Python Data Source API).

Each micro-batch reads the snapshots committed since the last one: the rows an append table's
snapshots add, or a primary-key table's changelog (`read.readChangeLog`, paimon/read/changes.py).
Planning and the reading of splits are the batch reader's (spark/reader.py). With the option
`branch` the stream follows that branch's snapshots, schema and consumers instead of main's, and
its offsets name the branch, so a checkpoint of one branch's stream refuses another's.
Options: scope `stream-read` of `lakesink.options` (docs/options.md).
"""

from __future__ import annotations


from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from .. import options as registry
from ..errors import CheckpointMismatchError, InvalidOptionError, SnapshotNotFoundError
from .reader import ChangesPartition, _expected_arrow_schema, _partitions, _serialize, read_branch, read_splits


def _offset(snapshot: int, full: bool = False, branch: str | None = None) -> dict:
    offset = {"snapshot": int(snapshot)}
    if full:
        offset["full"] = True
    if branch is not None:  # (main's offsets stay as they always were)
        offset["branch"] = branch
    return offset


class PaimonStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The rows each new snapshot adds. Offsets are `{"snapshot": n}`: snapshots up to n are read.

    `{"snapshot": n, "full": true}` (a start offset only) means: snapshot n's full
    contents have not been read yet either (starts `latest-full`, `from-snapshot-full`,
    and `earliest` once early snapshots expired).

    `read.stream.maxRowsPerTrigger` (Paimon's name; `maxRowsPerTrigger` also works)
    caps a micro-batch at whole snapshots holding up to that many added rows; a
    single larger snapshot is read alone, never split.
    """

    def __init__(self, path: str, options: dict, schema):
        from ..paimon.read import scan

        opts = registry.parse(options, ("stream-read",))
        self.fs_options = registry.storage_options(options) or None
        self.path = path
        self.branch = read_branch(opts)  # the branch's snapshots, schema and consumers (None: main)
        self.schema = schema
        self.mode = opts.get("scan.mode", registry.option("scan.mode").default)
        if self.mode == "default":  # Paimon's rule
            self.mode = ("from-snapshot" if "scan.snapshot-id" in opts
                         else "from-timestamp" if "scan.timestamp-millis" in opts else "latest-full")
        self.start_snapshot = opts.get("scan.snapshot-id")
        self.start_millis = opts.get("scan.timestamp-millis")
        need = {"from-snapshot": self.start_snapshot, "from-snapshot-full": self.start_snapshot,
                "from-timestamp": self.start_millis}
        if self.mode in need and need[self.mode] is None:
            key = "scan.timestamp-millis" if self.mode == "from-timestamp" else "scan.snapshot-id"
            raise InvalidOptionError("scan.mode", self.mode, f"to be given together with {key}")
        self.consumer_id = opts.get("consumer-id")
        if self.consumer_id is not None:
            from pypaimon.consumer.consumer_manager import ConsumerManager
            try:
                ConsumerManager._validate_consumer_id(self.consumer_id)
            except ValueError as exc:
                raise InvalidOptionError("consumer-id", self.consumer_id, str(exc)) from None
        self.read_overwrite = opts.get("streaming-read-overwrite", False)
        self.max_rows = opts.get("read.stream.maxRowsPerTrigger")
        self.available_now_end: int | None = None
        self.recorded: int | None = None  # snapshot the consumer file last recorded as read
        self.changelog = opts.get("read.readChangeLog", False)
        table = scan.open_for_read(path, self.fs_options, self.branch)
        scan.check_streamable(table, self.changelog)
        if self.changelog:
            from ..paimon.read.changes import check_changelog_readable
            check_changelog_readable(table)
        self.arrow_schema = _expected_arrow_schema(schema)

    def _table(self):
        from ..paimon.read import scan
        return scan.open_for_read(self.path, self.fs_options, self.branch)

    def _at(self, snapshot: int, full: bool = False) -> dict:
        return _offset(snapshot, full, self.branch)

    def _check(self, offset: dict) -> dict:
        """`offset` (from Spark's checkpoint) if it is of the branch this stream reads: snapshot ids
        of main and of each branch are different histories."""
        recorded = offset.get("branch")
        if recorded != self.branch:
            def name(branch):
                return f"branch {branch!r}" if branch is not None else "main"
            raise CheckpointMismatchError(
                f"This query's checkpoint holds offsets of {name(recorded)} of {self.path}, but the stream now "
                f"reads {name(self.branch)}: snapshot ids of different branches are different histories. Read "
                f"{name(recorded)} again, or start the query from a new checkpoint. Nothing was read.")
        return offset

    def initialOffset(self) -> dict:
        from ..paimon.read import scan

        table = self._table()
        if self.consumer_id is not None:
            consumer = _consumers(table).consumer(self.consumer_id)
            if consumer is not None:
                return self._at(consumer.next_snapshot - 1)
        span = scan.available_range(table)
        earliest, latest = span if span else (1, 0)
        if self.mode == "latest":
            return self._at(latest)
        if self.mode == "latest-full":
            return self._at(latest, full=latest > 0)
        if self.mode == "earliest":
            return self._at(0) if earliest <= 1 else self._at(earliest, full=True)
        if self.mode in ("from-snapshot", "from-snapshot-full"):
            wanted = scan._snapshot_id(self.start_snapshot)
            full = self.mode == "from-snapshot-full"
            if not (earliest <= wanted <= latest + (0 if full else 1)):
                raise SnapshotNotFoundError(
                    f"Cannot start streaming {self.path} at snapshot {wanted}: {scan.describe_range(table)}.")
            return self._at(wanted, full=True) if full else self._at(wanted - 1)
        millis = scan.to_millis(self.start_millis)  # from-timestamp
        before = table.snapshot_manager().earlier_or_equal_time_mills(millis)
        return self._at(before.id if before is not None else earliest - 1)

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        latest = self._table().snapshot_manager().get_latest_snapshot()
        self.available_now_end = latest.id if latest is not None else 0

    def latestOffset(self, start: dict, limit) -> dict:
        # Spark asks for the next batch's end only after the batch ending at `start`
        # is in its commit log: record the consumer now, not only in commit(), which
        # Spark calls when the next batch starts (never, after an availableNow run).
        self._check(start)
        if not start.get("full"):
            self._record_consumer(int(start["snapshot"]))
        latest = self._table().snapshot_manager().get_latest_snapshot()
        newest = latest.id if latest is not None else 0
        if self.available_now_end is not None:
            newest = min(newest, self.available_now_end)
        begin = int(start["snapshot"])
        if start.get("full") and newest >= begin:
            from pyspark.sql.streaming.datasource import ReadMaxRows
            # Under a row limit the snapshot's full contents are a batch of their own.
            return self._at(begin if isinstance(limit, ReadMaxRows) else max(newest, begin))
        if newest > begin:
            return self._at(self._admitted(begin, newest, limit))
        return start

    def _admitted(self, begin: int, newest: int, limit) -> int:
        """The last snapshot of the next batch: whole snapshots up to `limit`'s rows, at least one."""
        from pyspark.sql.streaming.datasource import ReadMaxRows

        from ..paimon.read import scan

        if not isinstance(limit, ReadMaxRows):
            return newest
        table = self._table()
        manager, rows, end = table.snapshot_manager(), 0, begin
        for snapshot_id in range(begin + 1, newest + 1):
            snapshot = manager.get_snapshot_by_id(snapshot_id)
            if snapshot is None:
                return snapshot_id  # expired: partitions() says so
            if scan.streaming_reads(table, snapshot, self.read_overwrite):
                rows += max(0, snapshot.delta_record_count or 0)
                if rows > limit.max_rows and end > begin:
                    break
            end = snapshot_id
        return end

    def partitions(self, start: dict, end: dict):
        from ..paimon.read import scan

        table = self._table()
        begin, stop = int(self._check(start)["snapshot"]), int(self._check(end)["snapshot"])
        if self.changelog:
            return self._change_partitions(table, start, begin, stop)
        splits = []
        if start.get("full"):
            snapshot = table.snapshot_manager().get_snapshot_by_id(begin)
            if snapshot is None:
                raise SnapshotNotFoundError(
                    f"Snapshot {begin} of {self.path} expired before the stream read it; "
                    f"{scan.describe_range(table)}. Restart the query from a new checkpoint.")
            splits.extend(scan.plan_snapshot(table, snapshot).splits)
        if stop > begin:
            splits.extend(scan.plan_added(table, begin, stop, self.read_overwrite))
        return _partitions(splits)

    def _change_partitions(self, table, start: dict, begin: int, stop: int) -> list:
        from ..paimon.read import changes, scan

        parts = []
        if start.get("full"):
            snapshot = table.snapshot_manager().get_snapshot_by_id(begin)
            if snapshot is None:
                raise scan.expired(table, begin)
            planned = scan.plan_snapshot(table, snapshot, levels=changes.full_state_levels(table))
            parts += [ChangesPartition([blob], []) for blob in _serialize(planned.splits)]
        if stop > begin:
            # One task per change file: a file is the unit of a write's output, in snapshot order.
            parts += [ChangesPartition([], [f]) for f in changes.plan_changes(table, begin, stop, self.read_overwrite)]
        return parts

    def read(self, partition):
        if isinstance(partition, ChangesPartition):
            return self._read_changes(partition)
        return read_splits(self.path, partition.splits, self.arrow_schema, [], self.fs_options, branch=self.branch)

    def _read_changes(self, partition):
        import pyarrow as pa

        from ..paimon.read import changes

        values = pa.schema(list(self.arrow_schema)[1:])
        for batch in read_splits(self.path, partition.splits, values, [], self.fs_options, branch=self.branch):
            yield changes.with_insert_kind(batch, self.arrow_schema)
        if partition.files:
            table = self._table()
            for change in partition.files:
                yield from changes.read_change_file(table, change, self.arrow_schema).to_batches()

    def commit(self, end: dict) -> None:
        """Spark has durably finished the batch ending at `end`: record the consumer's progress."""
        if not end.get("full"):
            self._record_consumer(int(end["snapshot"]))

    def _record_consumer(self, read_up_to: int) -> None:
        if self.consumer_id is None or read_up_to == self.recorded:
            return
        from ..paimon.read import scan

        scan.record_consumer(self._table(), self.consumer_id, read_up_to + 1)
        self.recorded = read_up_to

    def stop(self) -> None:
        pass


def _consumers(table):
    from pypaimon.consumer.consumer_manager import ConsumerManager
    return ConsumerManager(table.file_io, table.table_path, table.current_branch())  # a branch's own consumers
