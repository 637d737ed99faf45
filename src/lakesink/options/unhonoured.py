"""The Paimon table options lakesink honours only in some tables or with some values, and why.

Each entry names the values lakesink writes as Paimon means them, and, where it writes other
values in some tables only, a rule saying why not in this one. `options.check_honoured` refuses
the rest by name at create and at write, and on an existing table that has them: never accepted
and then ignored. docs/options.md lists them (`options.page`).
"""

from __future__ import annotations

from dataclasses import dataclass


# Paimon table options lakesink cannot honour yet, with the values it can: refused by name at
# create and at write, and on an existing table that has them (never accepted and then ignored).
@dataclass(frozen=True)
class Unhonoured:
    key: str
    honoured: tuple[str, ...]   # lower-cased values lakesink writes as Paimon means them
    reason: str
    # Values outside `honoured` lakesink writes in some tables: callable(table options, primary
    # keys, complete) -> the reason it does not in this one, or None. `complete`: the options are
    # the table's (else a write's, which may leave the rest to an existing table: only what they
    # name is checked).
    honoured_in: object = None
    honoured_doc: str = ""      # where the values outside `honoured` are written (docs/options.md)


def iceberg_problem(options, primary_keys, complete: bool = True) -> str | None:
    """Why lakesink cannot keep the Iceberg metadata `metadata.iceberg.storage` asks for, or None."""
    storage = str(options.get("metadata.iceberg.storage", "disabled")).strip().lower()
    if storage not in ("table-location", "hadoop-catalog"):
        return ("It registers the table in no Hive or REST catalog, so Iceberg readers there would keep seeing "
                "the table as it was. Use table-location or hadoop-catalog, or write the table with Apache "
                "Paimon's Java writers.")
    return None


def iceberg_only_problem(options, primary_keys, complete: bool = True) -> str | None:
    """Why an option that matters only to Iceberg metadata is refused here, or None: a table without
    Iceberg metadata may hold it; a write naming it, or a table with the metadata, is refused."""
    storage = str(options.get("metadata.iceberg.storage", "disabled")).strip().lower()
    if complete and storage == "disabled":
        return None
    return "Unset the option, or write the table with Apache Paimon's Java writers."


def row_tracking_problem(options, primary_keys, complete: bool = True) -> str | None:
    """Why a table with these options cannot have `row-tracking.enabled=true`, or None."""
    if primary_keys:
        return "This table has a primary key. Create it without one, or without the option."
    bucket = str(options.get("bucket", "-1" if complete else "")).strip()
    if bucket and bucket != "-1":
        return (f"This table has bucket={bucket}. Create it with bucket=-1 (unaware buckets, the default of "
                "append tables), or without the option.")
    return None


_DV_ENGINES = ("deduplicate", "partial-update", "aggregation", "first-row")


def deletion_vector_problem(options, primary_keys, complete: bool = True) -> str | None:
    """Why lakesink cannot write a table with `deletion-vectors.enabled=true` and these options, or None."""
    merge_first = ("lakesink merges each commit into deletion vectors (Paimon's merge on write) for primary-key "
                   "tables with fixed buckets (bucket >= 1), dynamic buckets (bucket=-1, cross-partition "
                   "tables included) or postpone buckets (bucket=-2, merged by lakesink.compact) and no "
                   "changelog producer only")
    bitmap64 = str(options.get("deletion-vectors.bitmap64", "false")).strip().lower() == "true"
    if not primary_keys:
        if not complete:
            return None
        marks = ("lakesink marks the rows row-level changes delete in deletion vectors of append tables, and "
                 "applies them wherever it reads or rewrites a file")
        if str(options.get("row-tracking.enabled", "false")).strip().lower() == "true":
            return (f"{marks}, but not together with row-tracking.enabled=true (an updated row would need its "
                    "_ROW_ID kept in a new file). Create the table with one of deletion-vectors.enabled and "
                    "row-tracking.enabled, or write it with Apache Paimon's Java writers.")
        iceberg = str(options.get("metadata.iceberg.storage", "disabled")).strip().lower()
        if iceberg != "disabled":
            return (f"{marks}; with metadata.iceberg.storage={iceberg} Iceberg readers would still read the "
                    "rows they mark. Create the table with one of the two options.")
        if bitmap64:
            return (f"{marks}, in 32-bit bitmaps only; deletion-vectors.bitmap64=true is not written. Create the "
                    "table without it, or write it with Apache Paimon's Java writers.")
        return None
    bucket = str(options.get("bucket", "-1" if complete else "")).strip()
    if bucket:
        try:
            count = int(bucket)
        except ValueError:
            count = 0
        # dynamic buckets (cross-partition too): merged per bucket as fixed ones; postpone buckets:
        # written plainly, merged by the compaction that assigns them
        if count < 1 and count not in (-1, -2):
            return (f"{merge_first}; bucket={bucket} (no fixed buckets) is not written with them. Create the "
                    "table with bucket >= 1, bucket=-1 or bucket=-2, or write it with Apache Paimon's Java writers.")
    producer = str(options.get("changelog-producer", "none")).strip().lower()
    if producer != "none":
        return (f"{merge_first}; changelog-producer={producer} is not written with them (its changelog would "
                "come from the same compaction). Create the table without it, or write it with Apache Paimon's "
                "Java writers.")
    if str(options.get("full-compaction.delta-commits", "")).strip():
        return (f"{merge_first}; full-compaction.delta-commits is not honoured with them: lakesink compacts "
                "such a table in each commit's merge and with lakesink.compact, never in full rounds after "
                "commits. Unset the option and run lakesink.compact (or Paimon's own compaction) instead.")
    engine = str(options.get("merge-engine", "deduplicate")).strip().lower()
    if engine not in _DV_ENGINES:
        return f"{merge_first}; merge-engine={engine} is not written with them."
    if bitmap64:
        return (f"{merge_first}; deletion-vectors.bitmap64=true (64-bit bitmaps) is not written. Create the "
                "table without it, or write it with Apache Paimon's Java writers.")
    return None


UNHONOURED: dict[str, Unhonoured] = {}


def _unhonoured(*entries: Unhonoured) -> None:
    for entry in entries:
        UNHONOURED[entry.key] = entry


_unhonoured(
    Unhonoured("deletion-vectors.enabled", ("false",),
               "Readers of a deletion-vector table skip the rows its vectors mark, and those of a primary-key "
               "table skip level-0 files and merge no rows across files.",
               honoured_in=deletion_vector_problem,
               honoured_doc="`true` in primary-key tables with `bucket` >= 1 or `bucket=-1` (cross-partition "
                            "tables too) and no `changelog-producer` (each commit merged on write, "
                            "docs/keyed.md), in postpone-bucket tables (`bucket=-2`: merged by the compaction "
                            "assigning buckets), and in append tables without `row-tracking.enabled` or Iceberg "
                            "metadata (row-level changes mark rows deleted, docs/row-level.md)"),
    Unhonoured("row-tracking.enabled", ("false",), "Paimon tracks the rows of unaware-bucket append tables only "
               "(it refuses the option with a primary key or fixed buckets).",
               honoured_in=row_tracking_problem,
               honoured_doc="`true` in append tables with `bucket=-1` (every row keeps its `_ROW_ID` through "
                            "compaction and row-level changes, docs/row-level.md); refused with a primary key or "
                            "fixed buckets, as Paimon refuses it"),
    Unhonoured("data-evolution.enabled", ("false",),
               "lakesink does not write data-evolution tables (column groups merged by row id). Create the "
               "table without it, or write it with Apache Paimon's Java writers."),
    Unhonoured("metadata.iceberg.storage", ("disabled",),
               "lakesink writes Iceberg metadata into the table's own directory (`table-location`) or its "
               "warehouse's Iceberg directory (`hadoop-catalog`), docs/iceberg.md.",
               honoured_in=iceberg_problem,
               honoured_doc="`table-location` and `hadoop-catalog` (docs/iceberg.md; `hadoop-catalog` in tables at "
                            "`<warehouse>/<db>.db/<table>`: metadata at `<warehouse>/iceberg/<db>/<table>/metadata`): "
                            "append tables list every live file; primary-key "
                            "tables (fixed, dynamic and postpone buckets, with or without deletion vectors) list "
                            "the files at their highest LSM level, as Paimon does (rows a full compaction "
                            "wrote); refused in cross-partition tables"),
    Unhonoured("metadata.iceberg.storage-location", ("table-location", "catalog-location"),
               "Paimon's values are `table-location` (the table's own `metadata/`) and `catalog-location` "
               "(`<warehouse>/iceberg/<db>/<table>/metadata`), docs/iceberg.md."),
    Unhonoured("metadata.iceberg.format-version", ("2",),
               "lakesink writes Iceberg table metadata of format version 2; with 3 Paimon writes version 3 "
               "(row lineage, and in primary-key tables with `deletion-vectors.bitmap64` the deletion vectors "
               "as Iceberg deletion vectors).",
               honoured_in=iceberg_only_problem,
               honoured_doc="other values only held by a table without Iceberg metadata "
                            "(`metadata.iceberg.storage=disabled`), where Paimon ignores the option"),
    Unhonoured("compaction.optimization-interval", (),
               "lakesink compacts after commits and with `lakesink.compact`, never by time: Iceberg readers "
               "of a primary-key table, which read only fully compacted rows (docs/iceberg.md), would wait "
               "for a full compaction that does not come. Use `full-compaction.delta-commits` or "
               "`lakesink.compact` instead.",
               honoured_in=iceberg_only_problem,
               honoured_doc="held by a table without Iceberg metadata (not read: no compaction by time)"),
    Unhonoured("metadata.iceberg-compatible", ("false",),
               "The Iceberg metadata of this older option (Paimon 0.9) is not what lakesink writes: use "
               "`metadata.iceberg.storage=table-location` instead (docs/iceberg.md), or write the table with "
               "Apache Paimon's Java writers."),
    Unhonoured("postpone.batch-write-fixed-bucket", ("false",),
               "lakesink writes every batch into a postpone-bucket table's postpone bucket, as streams do; "
               "it does not pick bucket counts for a batch and write it into real buckets directly. Rows "
               "become visible with `lakesink.compact`. Unset the option or set it to false."),
    Unhonoured("cross-partition-upsert.index-ttl", (),
               "With it Paimon's cross-partition writers forget keys whose files are older than the TTL, and "
               "a later row of such a key lands beside it in another partition; lakesink reads every key of "
               "the table before each write and keeps each key in one partition. Unset the option, or write "
               "the table with Apache Paimon's Java writers.", honoured_doc="unset (every key is read)"),
    Unhonoured("sequence.snapshot-ordering", ("false",),
               "With it (Paimon 2.0) the versions of a key are ordered first by the snapshot that committed "
               "them, stamped on each data file at commit, then by sequence number; lakesink's commits do "
               "not stamp that snapshot and its compaction and reads order by sequence numbers alone, so "
               "the version Paimon keeps and the one lakesink keeps could differ. Create the table without "
               "it, or write it with Apache Paimon's Java writers."),
)
