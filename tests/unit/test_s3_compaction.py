"""Compaction on S3 copies no file: its outputs are written in place (paimon.compaction.outputs).

The S3 server (moto, tests/s3server.py) sits behind the counting proxy (tests/s3proxy.py).
Small files of an append table, and level-0 runs of a primary-key table whose compaction
also writes changelog files (`changelog-producer=lookup`), are compacted by the aggregator's
round (`write.in-place=true`; and `false` once, for comparison) and by `lakesink.compact`
(`auto`: in place on S3); each compaction's requests are counted. Staged, the commit copies
each output into the table (a COPY and a DELETE per file); in place, nothing. Every table
reads back the same with pypaimon before and after, and holds no data file outside its
snapshots and no intent in its staging.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from lakesink import storage

from ..s3proxy import proxied_s3
from ..staged import commit, new_target, read_back, stage

BUCKET = "lakesink-compaction"
KEYED_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


@pytest.fixture(scope="module")
def s3():
    with proxied_s3(BUCKET) as both:
        yield both


@pytest.fixture()
def where(s3, request):
    server, proxy = s3
    options = proxy.fs_options(server)
    return f"s3://{BUCKET}/{request.node.name[:50]}", options, proxy


def _rows(path, options, keyed=False) -> list:
    rows = read_back(path, options).to_pylist()
    return sorted((r["id"], r["v"]) if keyed else (r["id"], r["part"]) for r in rows)


def _data_files(path: str, options: dict) -> set[str]:
    """Names of the Parquet files anywhere under the table (staging included)."""
    return {e.path.rsplit("/", 1)[-1] for e in storage.list_dir(path, options, recursive=True)
            if e.path.endswith(".parquet")}


def _referenced(path: str, options: dict) -> set[str]:
    """Names of the data and changelog files the table's snapshots reference."""
    from pypaimon.table.file_store_table import FileStoreTable

    from lakesink.paimon.commit.intents import added_names
    table = FileStoreTable.from_path(path, options)
    return {name for s in table.snapshot_manager().list_snapshots() for name in added_names(table, s)}


def _round(target, files, in_place: bool):
    """One aggregator round after an append of `files` (as a batch job's aggregation runs)."""
    from lakesink.paimon.compaction.wiring import new_coordinator
    from lakesink.protocol.coordinator import FilesWritten
    coordinator = new_coordinator(target, "writer", None, in_place=in_place)
    coordinator.send(FilesWritten(1, list(files)))
    return coordinator.commit_finished(1, landed=True)


def _append_table(path: str, options: dict, files: int = 6) -> tuple:
    """An append table whose partition holds `files` small files (one commit)."""
    target = new_target(path, options)
    staged = [f for i in range(files) for f in stage(target, [i], "a", "w")]
    commit(target, "setup", 1, staged)
    return target, [replace(f, staged_path=None) for f in staged]


def _keyed_table(path: str, options: dict, commits: int = 2, first: int = 0) -> tuple:
    """A primary-key table of 2 buckets with a level-0 run per bucket and commit."""
    from lakesink.options import WriteOptions
    from lakesink.paimon.write.keyed_plan import prepare_keyed_target
    from lakesink.spark.keyed_tasks import KeyedPlan, KeyedTaskSpec, KeyedTaskWriter
    opts = WriteOptions.parse({**options, "primary-key": "id", "bucket": "2", "changelog-producer": "lookup",
                               "num-sorted-run.compaction-trigger": "2", "write-only": "true"})
    written = []
    for c in range(first, first + commits):
        target, layout, spec, bases = prepare_keyed_target(path, KEYED_SCHEMA, opts)
        target.maintenance = False
        plan = KeyedPlan(bases, target.bucket_check_from)
        writer = KeyedTaskWriter(KeyedTaskSpec(f"{target.lakesink_dir()}/staging/setup{c}", layout, spec, plan,
                                               fs_options=options), 0, f"commit{c}")
        keys = list(range(c, 12 + c))
        writer.write(pa.table({"id": keys, "v": [f"c{c}"] * len(keys)}, schema=KEYED_SCHEMA))
        files = writer.finish()
        target.commit("setup", c + 1, files)
        target.file_io.delete_directory_quietly(f"{target.lakesink_dir()}/staging/setup{c}")  # as a job ends
        written += [replace(f, staged_path=None) for f in files]
    return target, written


def _compacted(path, options, proxy, compact, keyed=False):
    """The requests of one compaction (`compact()`), checked: rows the same before and after
    (pypaimon), and no data or changelog file but those the snapshots reference."""
    before = _rows(path, options, keyed)
    proxy.reset()
    report = compact()
    counts = proxy.counts()
    assert report is not None and report.snapshot_id is not None and report.files_added >= 1, report
    assert _rows(path, options, keyed) == before
    assert _data_files(path, options) == _referenced(path, options)  # nothing staged, nothing stray
    staging = storage.list_dir(f"{path}/_lakesink/staging", options, recursive=True)
    assert not [e.path for e in staging if e.path.endswith(".json")]  # every intent removed
    return counts, report


def _show(what: str, counts, report) -> None:
    print(f"\n{what}: {report.files_removed} files -> {report.files_added}; "
          f"requests {dict(sorted(counts.items()))}")


def _job(path, options):
    import lakesink
    return lambda: lakesink.compact(None, path, progress=False, options=options)


def test_compactions_of_small_files_copy_none_on_s3(where):
    base, options, proxy = where
    measured = {}
    for in_place in (False, True):
        path = f"{base}-{'in-place' if in_place else 'staged'}/db.db/t"
        target, files = _append_table(path, options)
        measured[in_place] = _compacted(path, options, proxy, lambda: _round(target, files, in_place))
        _show(f"aggregator round, {'in place' if in_place else 'staged'}", *measured[in_place])
    (staged, staged_report), (placed, _) = measured[False], measured[True]
    assert staged["COPY"] == staged_report.files_added == 1  # staged: the rewritten file, into the table
    assert placed["COPY"] == 0
    assert sum(placed.values()) < sum(staged.values())  # the intent's PUT costs less than the move

    # `lakesink.compact` (write.in-place auto: in place on S3), after more small files came.
    commit(target, "setup", 2, [f for i in range(6) for f in stage(target, [10 + i], "b", "w")])
    counts, report = _compacted(path, options, proxy, _job(path, options))
    _show("lakesink.compact", counts, report)
    assert counts["COPY"] == 0


# ./dev full: keyed runs on S3 (the default run: append compaction on S3; keyed compaction in place on local disk)
@pytest.mark.full
def test_compactions_of_keyed_runs_and_their_changelog_copy_none_on_s3(where):
    base, options, proxy = where
    path = f"{base}/db.db/t"
    target, files = _keyed_table(path, options)
    counts, report = _compacted(path, options, proxy, lambda: _round(target, files, True), keyed=True)
    _show("aggregator round, in place", counts, report)
    assert report.files_added == 4  # 2 buckets: a data file and a changelog file each
    assert counts["COPY"] == 0

    _keyed_table(path, options, commits=1, first=2)  # new level-0 runs, then a full compaction
    counts, report = _compacted(path, options, proxy, _job(path, options), keyed=True)
    _show("lakesink.compact", counts, report)
    assert counts["COPY"] == 0
