"""`lakesink.write` into primary-key and fixed-bucket tables (see spark.keyed for the Spark plan)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq

from ..options import WriteOptions
from ..paimon.keyed.layout import describe_keyed
from ..paimon.write.keyed_plan import compacts_automatically, prepare_keyed_target
from ..paimon.write.batch import NOT_OPENED, BatchWrite
from ..protocol import CommitReport, crashpoints
from .arrow import spark_to_arrow
from .checks import translate_error
from .keyed import keyed_frame
from .bucket import key_type
from .output import check_spark_can_write, ensure_micros_timestamps, list_parquet_files, spark_output
from .rewrite import distributed
from .settings import concurrent_writers


def write_keyed(df, path: str, mode: str, opts: WriteOptions, path_name: str, table=NOT_OPENED) -> CommitReport:
    """`table`: as the job opened it (`paimon.write.batch.open_for_write`), else opened here."""
    check_spark_can_write(df.sparkSession, path, path_name)
    target, layout, spec, next_sequence = prepare_keyed_target(path, spark_to_arrow(df.schema), opts, table=table)
    fields = {f.name: f for f in layout.fields}
    for name in spec.bucket_keys:
        key_type(fields[name].type)  # refuses key types the bucket function cannot serialize
    session_mode = df.sparkSession.conf.get("spark.sql.sources.partitionOverwriteMode", "static")
    job = BatchWrite.plan(path, spark_to_arrow(df.schema), opts, mode, path_name, session_mode,
                          prepare=lambda *_: (target, layout))
    # Primary-key tables: buckets whose sorted runs pass the trigger are compacted after the
    # commit (unless write-only), by the same coordinator as the small-file aggregator.
    job.aggregate = job.aggregate or compacts_automatically(target, opts)
    job.rewriter = distributed(df.sparkSession)
    if job.already_committed():
        return CommitReport(job.commit_user, job.identifier, skipped_replay=True)
    files = []
    try:
        # An overwrite replaces what the partitions held: its keys are assigned afresh (Paimon's
        # assigner ignores the old index), and its commit writes the new index alone.
        files = write_keyed_files(df, job.target, layout, spec, next_sequence, job.staging_dir, job.compression,
                                  0 if job.overwrite is not None else None, commit_user=job.commit_user)
    except BaseException as exc:
        job.abort(files)
        translated = translate_error(exc, job.target.path)
        if translated is not None:
            raise translated from None
        raise
    return job.commit(files)


def write_keyed_files(df, target, layout, spec, next_sequence, staging_dir: str, compression: str,
                      check_from: int | None = None, commit_user: str | None = None) -> list:
    """Spark writes `df` as key-value files into `staging_dir`; their descriptions (one batch or job).
    `check_from`: the snapshot the write was planned on (default: the target's), whose hash index
    a dynamic-bucket write assigns new keys from. Postpone-bucket tables: keys are spread over the
    write's tasks by Paimon's bucket function of as many buckets as tasks (each key merged in one
    task), and each task's file becomes a postpone file of writer `commit_user`."""
    if spec.postpone:
        from dataclasses import replace

        from ..paimon.keyed.rules import POSTPONE_BUCKET
        from ..paimon.keyed.postpone import relabel
        from .keyed import MAX_OPEN_FILES, _write_tasks
        tasks = _write_tasks(df.sparkSession, MAX_OPEN_FILES)  # one per core
        # Every task's file numbered from the partition's postpone bucket's next free sequence
        # number: a later write lies above an earlier one (the compaction orders versions so).
        bases = {(p, task): base for (p, bucket), base in next_sequence.items() if bucket == POSTPONE_BUCKET
                 for task in range(tasks)}
        files = write_keyed_files(df, target, layout, replace(spec, num_buckets=tasks, postpone=False), bases,
                                  staging_dir, compression, check_from)
        return [relabel(f, commit_user, f.bucket) for f in files]
    dynamic = None
    if spec.dynamic is not None:
        from .dynamic_bucket import default_assigners
        from .keyed_tasks import dynamic_plan
        base = target.bucket_check_from if check_from is None else check_from
        # A batch write's assigner task sorts every row of its buckets: four per core keep those
        # sorts in memory (10M rows on 2 cores and Spark's default 1 GB: 2 tasks spilled 0.2 GB).
        dynamic = dynamic_plan(target, spec, base, default_assigners(df.sparkSession, per_core=4))
    kept = []
    try:
        frame, partition_columns, open_files = keyed_frame(df, spec, list(layout.fields), next_sequence, dynamic,
                                                           kept)
        ensure_micros_timestamps(df.sparkSession)
        writer = frame.write.mode("error").option("compression", compression).partitionBy(*partition_columns)
        # Sorting by bucket instead would lose the files' key order.
        with concurrent_writers(df.sparkSession, open_files):
            spark_output(df.sparkSession, staging_dir, target.fs_options, "lakesink.write").write(writer)
    finally:
        for persisted in kept:
            persisted.unpersist()
    crashpoints.reached("tasks-done")
    return _describe(list_parquet_files(staging_dir, target.fs_options), layout, spec, target.file_io)


def _describe(paths, layout, spec, file_io):
    def one(p):
        with file_io.new_input_stream(p) as stream:
            metadata = pq.read_metadata(stream)
        if metadata.num_rows == 0:
            file_io.delete_quietly(p)
            return None
        return describe_keyed(p, layout, spec, file_io, metadata=metadata)

    with ThreadPoolExecutor(max(1, min(16, len(paths)))) as pool:
        return [f for f in pool.map(one, paths) if f is not None]
