"""Rewrites of small files on Spark's executors: the distributed executor the Paimon connector takes.

The connector's aggregator and `lakesink.compact` plan rewrite tasks (picklable
`RewriteTask`s, one per bin of small files; `KeyedCompactTask`s, one per bucket
of a primary-key table); here one Spark job runs them, one task each, with
progress read from Spark's status tracker.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

from ..paimon.compaction.rewrite import Rewriter, run_task
from .session import is_connect


def rewrite_on_spark(spark, tasks: Sequence, on_progress=None) -> list:
    """One Spark job, one task per bin (or per bucket of a keyed compaction); their results in
    order. `on_progress(done, total)` is polled while it runs."""
    if not tasks:
        return []
    sc = spark.sparkContext
    group = f"lakesink-compact-{uuid.uuid4().hex[:8]}"
    sc.setJobGroup(group, f"lakesink: compaction, {len(tasks)} tasks", interruptOnCancel=True)
    result: dict = {}

    def run():
        try:
            result["files"] = sc.parallelize(list(tasks), len(tasks)).map(run_task).collect()
        except BaseException as exc:  # surfaced on the caller's thread
            result["error"] = exc

    worker = threading.Thread(target=run, name="lakesink-compact-rewrite", daemon=True)
    worker.start()
    tracker = sc.statusTracker()
    while worker.is_alive():
        worker.join(0.25)
        if on_progress is not None:
            done = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in (job.stageIds if job else []):
                    stage = tracker.getStageInfo(stage_id)
                    if stage:
                        done += stage.numCompletedTasks
            on_progress(min(done, len(tasks)), len(tasks))
    sc.setLocalProperty("spark.jobGroup.id", None)
    if "error" in result:
        raise result["error"]
    if on_progress is not None:
        on_progress(len(tasks), len(tasks))
    return result["files"]


def distributed(spark) -> Rewriter | None:
    """The connector's `distributed` rewriter running on `spark`; None on Spark Connect (no
    SparkContext to run tasks with: rewrites then run on this process's threads)."""
    if spark is None or is_connect(spark):
        return None
    return lambda tasks: rewrite_on_spark(spark, tasks)
