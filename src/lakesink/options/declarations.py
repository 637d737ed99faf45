"""Every option lakesink reads, declared once: key, aliases, type, default, scope, meaning.

Scopes:

* `write`: lakesink's own write options (`lakesink.write(options=...)`,
  `.option()` on `format("paimon")` writers, `lakesink.stream`);
* `ctas`: `lakesink.create_table_as` / `replace_table_as` only;
* `read`, `stream-read`: `spark.read` / `spark.readStream.format("paimon")`;
* `table`: Paimon table options lakesink honours (stored in the table's schema,
  given as write options when lakesink creates the table); any other Paimon
  table option pypaimon knows passes through unchanged;
* `storage`: how to reach the table's files and publish its snapshots; never
  stored in the table;
* `jdbc`: the database sink (`lakesink.jdbc`, `format("lakesink-jdbc")`):
  Spark's JDBC names where Spark has one, case-insensitive like Spark's.
* `catalog`: the session's Paimon catalog (`lakesink.session(catalog={...})`),
  named as Paimon names them; passed to pypaimon's `CatalogFactory` (docs/catalogs.md).

Anything else is an error naming the key (and a close match), so a typo never
silently does nothing. `docs/options.md` is generated from this registry
(`python -m lakesink.options`); a test keeps them equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidOptionError

# Paimon stores identifiers as signed 64-bit longs and reserves the largest for
# one-off batch commits.
BATCH_IDENTIFIER = 0x7FFFFFFFFFFFFFFF
MAX_COMMIT_IDENTIFIER = BATCH_IDENTIFIER - 1

# Options Spark passes to a Python data source on its own.
SPARK_SUPPLIED = {"path", "paths", "checkpointlocation", "queryname", "__partition_columns"}

SCOPES = {
    "write": "Write options (lakesink's own)",
    "ctas": "CREATE / REPLACE TABLE AS",
    "read": "Batch read options (`spark.read.format(\"paimon\")`)",
    "stream-read": "Streaming read options (`spark.readStream.format(\"paimon\")`)",
    "table": "Paimon table options lakesink honours",
    "storage": "Storage options",
    "jdbc": "Database sink options (`lakesink.jdbc`, `format(\"lakesink-jdbc\")`)",
    "catalog": "Catalog options (`lakesink.session(catalog={...})`, docs/catalogs.md)",
}


@dataclass(frozen=True)
class Option:
    key: str
    scope: str
    kind: str                 # bool | int | duration | size | choice | string | columns | timestamp
    default: object
    doc: str
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    default_text: str | None = None  # how the docs show a default that is not a plain value
    also: tuple[str, ...] = ()       # further scopes that accept the option

    @property
    def scopes(self) -> tuple[str, ...]:
        return (self.scope, *self.also)

    def parse(self, value: object, given_key: str | None = None):
        """The typed value; an `InvalidOptionError` naming the key as the user spelled it."""
        key = given_key or self.key
        text = str(value).strip()
        if self.kind == "bool":
            low = text.lower()
            if low in ("true", "1", "yes"):
                return True
            if low in ("false", "0", "no"):
                return False
            raise InvalidOptionError(key, value, "true or false")
        if self.kind == "int":
            try:
                number = int(text)
            except ValueError:
                raise InvalidOptionError(key, value, "an integer") from None
            if self.minimum is not None and number < self.minimum:
                raise InvalidOptionError(key, value, f"an integer >= {self.minimum}")
            if self.maximum is not None and number > self.maximum:
                raise InvalidOptionError(key, value, f"an integer <= {self.maximum}")
            return number
        if self.kind == "duration":
            from pypaimon.common.time_utils import parse_duration
            try:
                return int(parse_duration(text))
            except ValueError:
                raise InvalidOptionError(key, value, "a duration such as '1 h', '30 min', '7 d'") from None
        if self.kind == "size":
            from pypaimon.common.memory_size import MemorySize
            try:
                return MemorySize.parse(text).get_bytes()
            except (ValueError, TypeError):
                raise InvalidOptionError(key, value, "a size such as '128 mb'") from None
        if self.kind == "choice":
            low = text.lower()
            if low not in self.choices:
                raise InvalidOptionError(key, value, "one of " + ", ".join(self.choices))
            return low
        if self.kind == "columns":
            return [c.strip() for c in text.split(",") if c.strip()]
        if self.kind == "timestamp":
            return _timestamp_millis(key, value, text)
        if not text:
            raise InvalidOptionError(key, value, "a non-empty string")
        return text


def _timestamp_millis(key: str, value: object, text: str) -> int:
    """Epoch millis from millis or an ISO-8601 time (no offset: UTC)."""
    import datetime as dt

    if text.lstrip("-").isdigit():
        return int(text)
    if text[-1:] in ("Z", "z"):  # Python < 3.11 reads no "Z"
        text = text[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidOptionError(key, value, "epoch milliseconds or an ISO-8601 time such as "
                                 "'2024-05-01T12:00:00+00:00' (no offset: UTC)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


@dataclass(frozen=True)
class Refusal:
    """A name users bring from Spark or Delta that lakesink does not take, with its pointer."""

    key: str
    scopes: tuple[str, ...]
    reason: str


REGISTRY: dict[str, Option] = {}
REFUSED: dict[str, Refusal] = {}


def _declare(*options: Option) -> None:
    for option in options:
        assert option.key not in REGISTRY, option.key
        REGISTRY[option.key] = option


_declare(
    # -- write ---------------------------------------------------------------------
    Option("partition", "write", "columns", [], "Comma-separated partition columns of a table lakesink "
           "creates (Paimon's name; `partition_by=[...]` on the Python API). Must match an existing table's.",
           default_text="none"),
    Option("primary-key", "write", "columns", [], "Comma-separated primary key of a table lakesink creates "
           "(`primary_key=[...]` on `lakesink.write`; the fast path writes keyed tables, see docs/keyed.md).",
           default_text="none"),
    Option("commit.user", "write", "string", None, "Stable commit user. With `commit.identifier`, a re-run "
           "of a batch job that already committed commits nothing and writes nothing.",
           default_text="random per batch job; derived from the query id for streams", also=("jdbc",)),
    Option("commit.identifier", "write", "int", None, "Increasing integer naming this job for `commit.user` "
           "(e.g. a run number or date), 0 ≤ n < 2^63−1. An identifier at or below the last one committed "
           "by the same user is skipped. Batch writes take `commit.user` and `commit.identifier` together "
           "or neither. Streams take the batch id.", minimum=0, maximum=MAX_COMMIT_IDENTIFIER,
           default_text="Paimon's batch identifier", also=("jdbc",)),
    Option("branch", "write", "string", None, "Paimon branch to write (or read): its snapshots live in "
           "`<table>/branch/branch-<name>/`, main is unchanged (docs/branches.md). The table and the branch "
           "must exist (`lakesink.branch.create`); every write path and table kind; batch and streaming reads.",
           default_text="main", also=("read", "stream-read")),
    Option("partitionOverwriteMode", "write", "choice", "static", "Spark's name: `static` overwrites the "
           "whole table, `dynamic` only the partitions written.", choices=("static", "dynamic")),
    Option("dynamic-partition-overwrite", "write", "bool", False, "Paimon's name for "
           "`partitionOverwriteMode=dynamic` (`true`) / `static` (`false`)."),
    Option("checkpointLocation", "write", "string", None, "Streaming: the query's checkpoint directory; "
           "required (exactly-once needs it).", default_text="none", also=("jdbc",)),
    Option("commit.mode", "write", "choice", "sync", "Streaming: `sync` commits each micro-batch before "
           "the next starts; `pipelined` accepts it durably and commits while the next batch runs (fast "
           "path: a driver thread; `format(\"paimon\")`: a committer process per checkpoint, see "
           "docs/design.md).", choices=("sync", "pipelined")),
    Option("commit.empty-batches", "write", "bool", False, "Streaming: make a snapshot for micro-batches "
           "without rows."),
    Option("maintenance.enabled", "write", "bool", True, "Run snapshot/partition/tag expiry after each "
           "commit, in the background."),
    Option("write.merge-schema", "write", "bool", False, "Schema evolution on write (Paimon's name; "
           "`mergeSchema` is Delta's and Spark's): new DataFrame columns are added to the table as "
           "nullable columns and columns widen (e.g. int → bigint, float → double, decimal precision up) "
           "in the same snapshot as the data. Missing columns, narrowing and other type changes stay "
           "errors. See [schema-evolution.md](schema-evolution.md).", aliases=("mergeSchema",)),
    Option("aggregator.enabled", "write", "bool", False, "Append tables: after each commit, compact the "
           "small files of the partitions written, also those earlier writes left (picked from the "
           "table, `compaction.min.file-num`/`compaction.max.file-num`), into files of "
           "`target-file-size` in a COMPACT snapshot. See [compaction.md](compaction.md)."),
    Option("write.in-place", "write", "choice", "auto", "`format(\"paimon\")`: tasks write each data file "
           "at its table path under a name no other attempt takes, named first in an intent under the job's "
           "staging (what failed attempts wrote is found there and removed), so the commit moves nothing; "
           "`false` stages the files and the commit renames them into the table. `auto`: in place on object "
           "stores, where a rename is a copy and a delete per file; staged on the local file system, where "
           "it is cheap and atomic (see [storage.md](storage.md#data-files-written-in-place)). The same for "
           "the outputs of the compaction that follows the write (small-file aggregator, keyed compaction, "
           "their changelog files; [compaction.md](compaction.md)). The fast path always stages.",
           choices=("auto", "true", "false")),
    Option("write.keyed-shuffle", "write", "choice", "auto", "`lakesink.stream` into primary-key and "
           "fixed-bucket tables: `true` routes each micro-batch's rows to their buckets with a Spark "
           "shuffle (one task per bucket, one sorted run per bucket, Spark's Parquet writer); `false` lets "
           "one task read the whole micro-batch and write it, merging its rows with pyarrow as Paimon's "
           "write buffer does (no shuffle, no second stage, one sorted run per bucket). `auto`: one task "
           "while the previous micro-batch wrote fewer than `write.keyed-shuffle.min-rows` rows; the "
           "first micro-batch of a run shuffles. "
           "`lakesink.write` always shuffles, `format(\"paimon\")` never can. See [keyed.md](keyed.md).",
           choices=("auto", "true", "false")),
    Option("write.keyed-shuffle.min-rows", "write", "int", 1_000_000, "`write.keyed-shuffle=auto`: "
           "micro-batches after one that wrote this many rows or more are shuffled.", minimum=0),
    # -- ctas ----------------------------------------------------------------------
    Option("ctas.atomicity-enabled", "ctas", "bool", True, "Stage the table and publish it atomically; "
           "`false` writes in place (object stores, which have no atomic directory rename)."),
    # -- batch read ----------------------------------------------------------------
    Option("filter-pushdown", "read", "bool", False, "Take Spark's filters (also needs "
           "`spark.sql.python.filterPushdown.enabled=true`)."),
    Option("scan.snapshot-id", "read", "int", None, "Time travel: read this snapshot. Streaming: the "
           "start of `scan.mode=from-snapshot[-full]`. `versionAsOf` is Delta's and Spark's name for "
           "batch reads.", aliases=("snapshot-id", "versionAsOf"), minimum=1,
           default_text="latest", also=("stream-read",)),
    Option("read.system-columns", "read", "bool", False, "Row-tracking tables: each row also has its "
           "`_ROW_ID` and `_SEQUENCE_NUMBER` (the last columns). `lakesink.read(columns=[...])` sets it when "
           "it names them."),
    Option("scan.tag-name", "read", "string", None, "Time travel: read the snapshot of this tag.",
           aliases=("tag",), default_text="none"),
    Option("scan.timestamp-millis", "read", "timestamp", None, "Time travel: the latest snapshot committed "
           "at or before this time: epoch millis (a number is always millis, never seconds) or ISO-8601 "
           "(`2024-05-01T12:00:00+02:00`; no offset: UTC). Streaming: the start of "
           "`scan.mode=from-timestamp`. `timestampAsOf` is Delta's and Spark's name for batch reads.",
           aliases=("timestamp", "timestampAsOf"), default_text="none", also=("stream-read",)),
    # -- streaming read ------------------------------------------------------------
    Option("scan.mode", "stream-read", "choice", "default", "Where a new query starts: `default` "
           "(Paimon's: `from-snapshot` with `scan.snapshot-id`, `from-timestamp` with "
           "`scan.timestamp-millis`, else `latest-full`), `latest-full` (the current rows, then new "
           "ones, as Paimon and Delta start), `latest` (only rows committed after the query starts), "
           "`earliest` (everything still retained), `from-snapshot` / `from-snapshot-full` (with "
           "`scan.snapshot-id`), `from-timestamp` (with `scan.timestamp-millis`).",
           choices=("default", "latest-full", "latest", "earliest", "from-snapshot", "from-snapshot-full",
                    "from-timestamp")),
    Option("consumer-id", "stream-read", "string", None, "Record progress in the table's consumer file "
           "(expiry keeps what it still needs); a new query with the same id resumes there.",
           default_text="none"),
    Option("streaming-read-overwrite", "stream-read", "bool", False, "Also emit the rows an OVERWRITE "
           "snapshot adds."),
    Option("read.stream.maxRowsPerTrigger", "stream-read", "int", None, "A micro-batch takes whole "
           "snapshots holding up to this many added rows; a larger snapshot is read alone (never split).",
           aliases=("maxRowsPerTrigger",), minimum=1, default_text="unlimited"),
    Option("read.readChangeLog", "stream-read", "bool", False, "Stream the table's changelog: every row "
           "with a first column `rowkind` (`+I`, `-U`, `+U`, `-D`), as Paimon's Spark connector names it. "
           "Needed for primary-key tables (`lakesink.read_stream` sets it for them); see "
           "[keyed.md](keyed.md#streaming-reads-the-changelog)."),
    # -- Paimon table options lakesink honours -----------------------------------------
    Option("file.format", "table", "choice", "parquet", "Data file format; lakesink writes `parquet`.",
           choices=("parquet", "orc", "avro")),
    Option("file.compression", "table", "string", "snappy", "Parquet compression of the files lakesink "
           "writes (Paimon's default is zstd; lakesink keeps Spark's snappy)."),
    Option("parquet.compression", "table", "string", None, "Paimon's Parquet-specific compression key "
           "(stored; `file.compression` decides what lakesink writes).", default_text="none"),
    Option("bucket", "table", "int", -1, "Buckets: `-1` unaware-bucket append tables, and dynamic buckets for "
           "primary-key tables (Paimon's default: keys assigned to buckets through a hash index, a new bucket "
           "opened as others reach `dynamic-bucket.target-row-num`; a primary key without every partition column "
           "is Paimon's cross-partition mode, a key moving between partitions); `N` >= 1 fixed buckets (a fixed-bucket append table also needs `bucket-key`); `-2` "
           "postpone buckets (primary-key tables: rows wait unbucketed, invisible to readers, until "
           "`lakesink.compact` assigns them to buckets). See [keyed.md](keyed.md#dynamic-buckets) and "
           "[keyed.md](keyed.md#postpone-buckets) and [keyed.md](keyed.md#cross-partition-tables)."),
    Option("postpone.default-bucket-num", "table", "int", None, "Postpone-bucket tables: the bucket count "
           "`lakesink.compact` gives a partition that has no real buckets yet (a partition that has some keeps "
           "their count); unset: estimated from the partition's postpone rows, as Paimon does.",
           default_text="none", minimum=1),
    Option("postpone.target-row-num-per-bucket", "table", "int", None, "Postpone-bucket tables without "
           "`postpone.default-bucket-num`: a new partition gets one bucket per this many postpone rows.",
           default_text="none", minimum=1),
    Option("postpone.target-size-per-bucket", "table", "size", 1024 * 1024 * 1024, "Postpone-bucket tables "
           "without `postpone.default-bucket-num` or `postpone.target-row-num-per-bucket`: a new partition "
           "gets one bucket per this many bytes of postpone files (Paimon's estimate).", default_text="1 gb"),
    Option("dynamic-bucket.target-row-num", "table", "int", 2_000_000, "Dynamic-bucket tables: keys a bucket "
           "takes before the assigner opens another (Paimon's hash index counts them).", minimum=1),
    Option("dynamic-bucket.max-buckets", "table", "int", -1, "Dynamic-bucket tables: the most buckets of a "
           "partition (`-1`: unlimited); once reached, new keys go to existing buckets of their assigner. Not "
           "applied to cross-partition tables (nor by Paimon's cross-partition assigner).",
           minimum=-1),
    Option("dynamic-bucket.assigner-parallelism", "table", "int", None, "Dynamic-bucket tables: assigner tasks "
           "of a write; each opens buckets of its own. Default: `lakesink.write` 4 per core up to 64 (and at least "
           "one per core; each task sorts all rows of its buckets), streams and `format(\"paimon\")` one per core.",
           default_text="4 per core (streams: 1)", minimum=1),
    Option("dynamic-bucket.initial-buckets", "table", "int", None, "Dynamic-bucket tables: caps the assigner "
           "tasks (Paimon: the assigners of a write are at most this many); cross-partition tables: the assigner "
           "tasks are the larger of this and `dynamic-bucket.assigner-parallelism`, as in Paimon.",
           default_text="none", minimum=1),
    Option("target-file-size", "table", "size", 128 * 1024 * 1024, "Size the aggregator, compaction and "
           "the Spark-native writer aim files at.", default_text="128 mb"),
    Option("write-buffer-size", "table", "size", 64 * 1024 * 1024, "Keyed tables written by "
           "`format(\"paimon\")`: the rows (Arrow bytes) a Spark task buffers, sorts and merges per key "
           "before it writes them as one sorted run per bucket, as Paimon's write buffer; peak memory of a "
           "task is a few times this (Paimon's Java writer: 256 mb). See [keyed.md](keyed.md).",
           default_text="64 mb"),
    Option("compaction.min.file-num", "table", "int", 5, "Append tables: a partition's small files that "
           "fill no `target-file-size` yet are merged into one once there are this many (Paimon's rule "
           "and default; see [compaction.md](compaction.md)).", minimum=2),
    Option("compaction.max.file-num", "table", "int", 50, "Append tables: the most small files one "
           "automatic rewrite reads; that many are merged even below `target-file-size` (Paimon's "
           "default, 50).", minimum=2),
    Option("write-only", "table", "bool", False, "Paimon: writers never compact. Turns off lakesink's "
           "automatic compaction after commits (primary-key tables; append tables even with "
           "`aggregator.enabled`): run `lakesink.compact` instead."),
    Option("num-sorted-run.compaction-trigger", "table", "int", 5, "Primary-key tables: a bucket with more "
           "sorted runs than this (each level-0 file is one, each level above one) is fully compacted "
           "after a commit (see [compaction.md](compaction.md)).", minimum=1),
    Option("num-levels", "table", "int", None, "Primary-key tables: LSM levels; full compactions write "
           "to the highest, `num-levels` - 1.", minimum=2,
           default_text="`num-sorted-run.compaction-trigger` + 1"),
    Option("compaction.max-size-amplification-percent", "table", "int", 200, "Primary-key tables "
           "(universal compaction): a bucket whose newer runs add up to more than this percentage of its "
           "oldest run is fully compacted (Paimon's default, 200).", minimum=0),
    Option("compaction.size-ratio", "table", "int", 1, "Primary-key tables (universal compaction): "
           "newer runs are merged with the next older run while their total is within this percentage "
           "of its size (Paimon's default, 1).", minimum=0),
    Option("changelog-producer", "table", "choice", "none", "Primary-key tables: what feeds their "
           "changelog (streaming reads). `input`: the written rows; `lookup`: a compaction after each commit "
           "compares every new key with its previous value; `full-compaction`: each full compaction compares "
           "with the last one (see [keyed.md](keyed.md#changelog-producers)).",
           choices=("none", "input", "lookup", "full-compaction")),
    Option("changelog-producer.row-deduplicate", "table", "bool", False, "`lookup` and `full-compaction` "
           "producers: no `-U`/`+U` pair for an update that leaves the row as it was (Paimon's default: "
           "false, pairs are written)."),
    Option("full-compaction.delta-commits", "table", "int", None, "Primary-key tables: after this many "
           "commits since the last full compaction, the next compaction round compacts every bucket "
           "fully (with `changelog-producer=full-compaction`: after every commit unless set).", minimum=1,
           default_text="none"),
    Option("rowkind.field", "table", "string", None, "Keyed tables: the column holding each row's kind "
           "(`+I`, `-U`, `+U`, `-D`); other values fail the job.", default_text="none"),
    Option("snapshot.num-retained.min", "table", "int", 10, "Snapshots always kept by expiry.", minimum=1),
    Option("snapshot.num-retained.max", "table", "int", 2**31 - 1, "Snapshots kept at most.", minimum=1,
           default_text="unlimited"),
    Option("snapshot.time-retained", "table", "duration", 3_600_000, "Snapshots younger than this are "
           "kept.", default_text="1 h"),
    Option("snapshot.expire.limit", "table", "int", 50, "Snapshots expired at most per run after a commit "
           "(Paimon's default, 50).", minimum=1),
    Option("partition.expiration-time", "table", "duration", None, "Drop partitions whose time (from their "
           "values) is older than this.", default_text="never"),
    Option("partition.expiration-check-interval", "table", "duration", None, "Paimon's check interval "
           "(stored; lakesink checks after every commit).", default_text="none"),
    Option("partition.timestamp-formatter", "table", "string", None, "How partition values read as times "
           "(Java pattern, e.g. `yyyyMMdd`).", default_text="`yyyy-MM-dd` and friends"),
    Option("partition.timestamp-pattern", "table", "string", None, "How partition columns form a time "
           "(e.g. `$dt $hour:00:00`).", default_text="first partition column"),
    Option("tag.automatic-creation", "table", "choice", "none", "`process-time`: tag each complete period.",
           choices=("none", "process-time", "watermark", "batch")),
    Option("tag.creation-period", "table", "choice", "daily", "Period of automatic tags.",
           choices=("daily", "hourly", "two-hours")),
    Option("tag.num-retained-max", "table", "int", None, "Automatic tags kept at most.", minimum=1,
           default_text="unlimited"),
    Option("tag.default-time-retained", "table", "string", None, "How long a new tag is kept.",
           default_text="forever"),
    Option("consumer.expiration-time", "table", "duration", None, "Consumers idle this long are removed.",
           default_text="never"),
    Option("manifest.merge-min-count", "table", "int", 30, "Manifests merged when this many small ones "
           "accumulate."),
    Option("manifest.target-file-size", "table", "size", 8 * 1024 * 1024, "Size of merged manifests.",
           default_text="8 mb"),
    Option("manifest.full-compaction-threshold-size", "table", "size", 16 * 1024 * 1024, "Deleted entries "
           "above this size trigger a full manifest compaction.", default_text="16 mb"),
    # -- storage -------------------------------------------------------------------
    Option("commit.lock", "storage", "string", None, "Storages with no atomic create-if-absent (not local, "
           "not S3): `file:/path` of a lock file all writers share (see docs/storage.md).",
           default_text="none"),
    Option("commit.allow-unsafe-publication", "storage", "bool", False, "Use pypaimon's non-atomic "
           "publication on such storages anyway (concurrent commits may be lost)."),
    Option("fs.s3.connection.establish.timeout", "storage", "duration", 60_000, "S3: how long to wait for a "
           "connection to the store (Hadoop S3A's name; pyarrow's `connect_timeout` for data and metadata "
           "files, botocore's for the snapshot's conditional PUT). `s3.`, `s3a.`, `fs.s3a.` prefixes too.",
           default_text="60 s (pypaimon's and botocore's)"),
    Option("fs.s3.connection.request.timeout", "storage", "duration", 60_000, "S3: how long a request may "
           "wait for its answer before the client gives up and retries it (botocore's `read_timeout`; "
           "pyarrow's `request_timeout`, curl's low-speed time: whole seconds, and a PUT gives up about "
           "6 s later, see [storage.md](storage.md#faults-of-the-store)). A timed-out PUT may have landed. "
           "`s3.`, `s3a.`, `fs.s3a.` prefixes too.", default_text="60 s (pypaimon's and botocore's)"),
    Option("fs.s3.attempts.maximum", "storage", "int", None, "S3: attempts per request, the first "
           "included, on a timeout, a dropped connection or throttling (503 SlowDown), with backoff, before "
           "the client gives up (Hadoop S3A's name; pyarrow's retry strategy for data and metadata files, "
           "boto3's for the snapshot's conditional PUT). `s3.`, `s3a.`, `fs.s3a.` prefixes too.", minimum=1,
           default_text="10 for files (pypaimon's), 6 for the snapshot PUT"),
    Option("commit.catalog-lock", "storage", "string", None, "Set by lakesink, not by hand: the JDBC "
           "catalog lock of a table resolved by name through a catalog with `lock.enabled` (its database "
           "connection and lock id), so that every process committing the table takes it (see "
           "docs/catalogs.md).", default_text="none"),
    # -- catalog -------------------------------------------------------------------
    Option("metastore", "catalog", "choice", "filesystem", "Where the catalog keeps its tables: "
           "`filesystem` (the warehouse's directories are the catalog) or `jdbc` (a database through Python "
           "DB-API drivers: SQLite, PostgreSQL). Paimon's `rest` is not supported yet.",
           choices=("filesystem", "jdbc")),
    Option("warehouse", "catalog", "string", None, "Root of the catalog's tables: "
           "`<warehouse>/<database>.db/<table>`. Required.", default_text="required"),
    Option("uri", "catalog", "string", None, "`metastore=jdbc`: the database, "
           "`jdbc:sqlite:/path/catalog.db` or `jdbc:postgresql://host:5432/db`.", default_text="none"),
    Option("jdbc.user", "catalog", "string", None, "`metastore=jdbc`: the database user.",
           default_text="none"),
    Option("jdbc.password", "catalog", "string", None, "`metastore=jdbc`: the user's password (Spark "
           "redacts it in its UI: the key holds `password`).", default_text="none"),
    Option("catalog-key", "catalog", "string", "jdbc", "`metastore=jdbc`: the catalog's key in Paimon's "
           "catalog tables (several catalogs may share one database)."),
    Option("sync-all-properties", "catalog", "bool", True, "`metastore=jdbc`: also keep each table's "
           "options in `paimon_table_properties` (Paimon's default)."),
    Option("name", "catalog", "string", "paimon", "lakesink's own: the catalog's name, the first part of a "
           "three-part name (`paimon.shop.orders`)."),
    Option("lock.enabled", "catalog", "bool", None, "`metastore=jdbc`: every commit of a table written by "
           "name publishes while holding Paimon's JDBC catalog lock (a row of `paimon_distributed_locks` in "
           "the catalog database), as Paimon's writers with this option do, so they and lakesink exclude "
           "each other; needed for warehouses on storages without an atomic create "
           "(docs/catalogs.md#commit-lock).",
           default_text="Paimon's: on for a warehouse on an object store (`s3://`, `oss://`, `gs://`, ...), "
           "off elsewhere"),
    Option("lock-acquire-timeout", "catalog", "duration", 8 * 60_000, "`metastore=jdbc`, `lock.enabled`: how "
           "long a commit waits for the catalog lock before it fails (nothing published). Also the expiry "
           "of the lock row a writer inserts (Paimon's `expire_time_seconds`): a writer killed while "
           "holding the lock blocks the others at most this long.", default_text="8 min"),
    Option("lock-check-max-sleep", "catalog", "duration", 8_000, "`metastore=jdbc`, `lock.enabled`: the "
           "longest sleep between two tries of a held lock (sleeps start at 100 ms and double).",
           default_text="8 s"),
    Option("lock-key-max-length", "catalog", "int", 255, "`metastore=jdbc`, `lock.enabled`: the width of "
           "`paimon_distributed_locks.lock_id` when lakesink creates that table (lock ids are "
           "`<catalog-key>.<database>.<table>`).", minimum=1),
)

_declare(
    # -- the database sink ---------------------------------------------------------
    Option("url", "jdbc", "string", None, "`postgresql://user[:password]@host:port/db[?params]`, "
           "`sqlite:///relative.db` or `sqlite:////absolute.db`; a `jdbc:` prefix is accepted. Relative "
           "SQLite paths are made absolute on the driver.", default_text="required"),
    Option("dbtable", "jdbc", "string", None, "Target table, `schema.table` or `table` (PostgreSQL: "
           "`public`; unquoted names fold to lower case, `\"Quoted\"` names keep theirs; SQLite: `table` or "
           "`main.table`).", aliases=("path",), default_text="required"),
    Option("user", "jdbc", "string", None, "Database user (overrides the URL's).", default_text="from the URL"),
    Option("password", "jdbc", "string", None, "Database password (overrides the URL's); never written to "
           "durable state.", default_text="from the URL"),
    Option("batchsize", "jdbc", "int", 10_000, "Rows per `executemany` call (SQLite) or per COPY chunk "
           "(PostgreSQL).", minimum=1),
    Option("isolationLevel", "jdbc", "string", "READ_COMMITTED", "Isolation of the commit transaction: "
           "`READ_UNCOMMITTED`, `READ_COMMITTED`, `REPEATABLE_READ` or `SERIALIZABLE`; `NONE` is refused "
           "(exactly-once needs a transaction; SQLite's are always serializable)."),
    Option("createTableColumnTypes", "jdbc", "string", None, "Column types used instead of the defaults when "
           "lakesink creates the table, e.g. `\"name VARCHAR(64), note TEXT\"`.", default_text="none"),
    Option("createTableOptions", "jdbc", "string", None, "Text appended to `CREATE TABLE` when lakesink "
           "creates the table.", default_text="none"),
    Option("connectTimeout", "jdbc", "int", 10, "Seconds to wait for a PostgreSQL connection; SQLite waits "
           "up to 300 s (or this, if longer) for its write lock, which tasks take one after another.",
           minimum=1),
    Option("write.mode", "jdbc", "choice", "append", "`append`, `overwrite` (rows replaced, definition "
           "kept; `replace_table_as` changes it) or `upsert`.", choices=("append", "overwrite", "upsert")),
    Option("upsert.key", "jdbc", "columns", [], "Key columns of an upsert; the table needs a primary key or "
           "unique index on exactly them (a table lakesink creates gets that primary key).",
           default_text="none"),
    Option("staging.schema", "jdbc", "string", "lakesink", "PostgreSQL schema of lakesink's progress, "
           "registry and staging tables."),
)

# Catalog options passed through as a family (to the database driver, without the prefix).
CATALOG_FAMILY_PREFIX = "jdbc."
CATALOG_FAMILY_DOC = ("`metastore=jdbc`: any other connection parameter of the driver (e.g. `jdbc.sslmode`), "
                      "passed without the prefix. Storage options (`fs.*`, `s3.*`) reach the warehouse's files.")

# Keys of the `fs.*` / `s3.*` family documented as one row.
STORAGE_FAMILY_DOC = ("File-system options for pypaimon, e.g. `fs.s3.endpoint`, `fs.s3.accessKeyId`, "
                      "`fs.s3.accessKeySecret`, `fs.s3.region`, `s3.path-style-access`.")


def _refuse(*refusals: Refusal) -> None:
    for refusal in refusals:
        REFUSED[refusal.key.lower()] = refusal


_MAX_ROWS = ("lakesink limits a micro-batch by rows, in whole snapshots (a snapshot's files are never "
             "split across micro-batches): use `read.stream.maxRowsPerTrigger` (alias `maxRowsPerTrigger`).")
_refuse(
    Refusal("maxFilesPerTrigger", ("stream-read",), _MAX_ROWS),
    Refusal("read.stream.maxFilesPerTrigger", ("stream-read",), _MAX_ROWS),
    Refusal("maxBytesPerTrigger", ("stream-read",), _MAX_ROWS),
    Refusal("read.stream.maxBytesPerTrigger", ("stream-read",), _MAX_ROWS),
    Refusal("versionAsOf", ("stream-read",), "Batch time travel only (as in Delta). A stream starts at a "
            "snapshot with `scan.mode=from-snapshot` and `scan.snapshot-id`."),
    Refusal("timestampAsOf", ("stream-read",), "Batch time travel only (as in Delta). A stream starts at a "
            "time with `scan.mode=from-timestamp` and `scan.timestamp-millis`."),
)
