"""Which protocol point the default run kills on which write path, and where the rest runs.

The write paths: "fast" is `lakesink.write/stream`, "native" is Spark's `format("paimon")`.
Every point of `lakesink.protocol.crashpoints.POINTS` is either killed on both paths by a
chain of the default run (the tables below feed the crash tests' parametrization), or listed
in `ELSEWHERE` with the test that kills it and why it is not a point of the two paths, or in
`KNOWN_GAPS` with the soak case that kills it and why the default run cannot yet;
tests/unit/test_crash_matrix.py checks that, so sampling cannot silently drop a step.
Every other combination (both commit modes for every chain, the deduplicate change
streams, the aggregator under Spark, random kills) runs with `./dev soak`.

    point            fast (default run)                      native (default run)
    tasks-done       append sync chain                       append sync chain
    schema-written   append sync chain (a new source column)  append sync chain (a new source column)
    files-placed     append sync chain                       append sync chain
    before-snapshot  append sync chain                       append sync chain
    after-snapshot   append sync chain                       append sync chain, A -> B chain
    accepted         keyed sums (its pipelined first run)    keyed sums (its pipelined first run)
    during-abort     append sync chain (a commit that raises)  append sync chain (a failed batch)
    mid-rewrite      keyed sums, compaction chain            keyed sums, compaction chain
    after-aggregate  keyed sums, compaction chain            keyed sums, compaction chain
    after-compact    keyed sums, compaction chain            keyed sums, compaction chain
"""

from __future__ import annotations

# Append tables, a Parquet source (tests/spark/test_crash.py). A chain that starts at
# schema-written runs with `write.merge-schema` on a table that lacks one of the source's
# columns: its first commit writes the table's next schema, and the driver dies right after.
APPEND_CHAINS = {
    ("native", "sync"): ["schema-written@1", "files-placed@2", "before-snapshot@2", "after-snapshot@2",
                         "tasks-done@2", "during-abort@1"],
    ("fast", "sync"): ["schema-written@1", "files-placed@2", "before-snapshot@2", "after-snapshot@2",
                       "tasks-done@2", "during-abort@1"],
}
# Steps the default run cannot kill on a path yet, each as (path, point): (file, soak test, why).
# The fast path aborts files only when a commit raises (a failed write leaves none: its staging
# directory goes whole), so its chain makes the commit raise (`fail_at`) and kills the discard.
KNOWN_GAPS: dict[tuple[str, str], tuple[str, str, str]] = {}
APPEND_SOAK_CHAINS = {
    # Pipelined: Spark may record every remaining batch before the service reaches a point,
    # so the service's point comes last (the next run then has only pending batches).
    ("native", "pipelined"): ["during-abort@1", "accepted@2", "after-snapshot@2"],
    ("fast", "pipelined"): ["accepted@2", "before-snapshot@2", "after-snapshot@2"],
}

# Keyed aggregation tables summing a column (tests/spark/test_crash_keyed.py): a batch applied
# twice or lost changes the sums. The compaction chain kills the checkpoint's compaction
# service mid-rewrite, between a round's rewrite and its COMPACT snapshot, and after it.
COMPACTION = ["mid-rewrite@1", "after-aggregate@1", "after-compact@1"]
# A run of a chain in pipelined commit mode (the chain's other runs keep its own mode): a query
# restarted with the other `commit.mode` takes over what the killed one accepted.
PIPELINED = "pipelined:"
KEYED_SUM_CHAINS = {
    # A background commit that raises must stop the query: ./dev soak (harness.FAIL, both paths).
    ("native", "sync"): [PIPELINED + "accepted@2", *COMPACTION],
    ("fast", "sync"): [PIPELINED + "accepted@2", *COMPACTION],
}
KEYED_SUM_SOAK_CHAINS = {
    ("native", "sync"): ["files-placed@2", "after-snapshot@2", "tasks-done@2"],
    ("fast", "sync"): ["before-snapshot@2", "after-snapshot@2"],
    # "fail:": no kill; the background commit raises there and must stop the query (harness.FAIL).
    ("native", "pipelined"): ["accepted@2", "after-snapshot@2", "fail:before-snapshot@2"],
    ("fast", "pipelined"): ["accepted@2", "after-snapshot@2"],
}

# Points that are not steps of the two streaming write paths into Paimon: the default test that
# reaches each (file, test function, a string the file must hold), and why it is elsewhere.
ELSEWHERE = {
    "events-held": ("tests/unit/test_aggregator.py",
                    "test_a_driver_killed_at_each_aggregation_step_still_has_every_row_exactly_once",
                    "events-held@3",
                    "the aggregator's coordinator (one for both paths) holding a writer event during a commit: "
                    "when that happens in a Spark driver is timing, so its Spark-less streaming child is killed"),
    "task-staged": ("tests/jdbc/test_jdbc_crash.py",
                    "test_a_task_attempt_that_failed_after_staging_is_retried_and_counted_once",
                    "task-staged@1", "the JDBC sink's tasks"),
    "catalog-publish": ("tests/catalog/test_catalog_ctas.py",
                        "test_a_process_killed_mid_job_or_mid_publication_leaves_no_entry_and_clean_up_removes_its_files",
                        "catalog-publish", "CREATE TABLE AS in a JDBC catalog"),
}

DEFAULT_TABLES = (APPEND_CHAINS, KEYED_SUM_CHAINS)


def killed_by_default() -> dict[str, set[str]]:
    """{path: names of the points the default run's chains kill on it}."""
    out: dict[str, set[str]] = {"fast": set(), "native": set()}
    for table in DEFAULT_TABLES:
        for (mode, _commit), points in table.items():
            out[mode].update(point_name(p) for p in points if not p.startswith("fail:"))
    return out


def point_name(point: str) -> str:
    """"pipelined:accepted@2" -> "accepted" (also "fail:before-snapshot@2" -> "before-snapshot")."""
    return point.split("@")[0].rpartition(":")[2]
