"""The order the test run hands tests to its workers: the longest work first.

Three workers take work one unit at a time (`--dist loadgroup`: a test, or a whole module that
shares a module-scoped fixture, tests/conftest.py; `--no-loadscope-reorder` keeps this order); started longest
first, the run ends when the last short test does, not after a crash chain that began
last (longest-processing-time-first scheduling). A module stays contiguous (its
module-scoped fixtures, such as the Java-written interop tables, are built once per
worker), modules ordered by their measured seconds; unlisted modules go after them.
The figures are relative weights, not limits: regenerate them from a run's log with

    ./dev test -q --durations=0 > /tmp/run.log; .venv/bin/python -m tests.schedule /tmp/run.log
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

# Seconds per module (setup, call and teardown of its tests) in one default run.
MODULE_SECONDS = {
    "tests/spark/test_crash.py": 335,
    "tests/spark/test_crash_keyed.py": 318,
    "tests/spark/test_deletion_vectors.py": 156,
    "tests/spark/test_rowlevel.py": 123,
    "tests/jdbc/test_spark_jdbc.py": 90,
    "tests/spark/test_read_stream.py": 85,
    "tests/spark/test_iceberg.py": 82,
    "tests/spark/test_format_keyed.py": 75,
    "tests/spark/test_streaming.py": 71,
    "tests/spark/test_batch_failures.py": 58,
    "tests/jdbc/test_jdbc_crash.py": 57,
    "tests/spark/test_dynamic_buckets.py": 52,
    "tests/spark/test_keyed_bucket.py": 52,
    "tests/spark/test_keyed_write.py": 49,
    "tests/spark/test_branches.py": 47,
    "tests/spark/test_batch_write.py": 45,
    "tests/unit/test_s3_timeouts.py": 44,
    "tests/catalog/test_sql_statements.py": 42,
    "tests/spark/test_postpone_buckets.py": 39,
    "tests/unit/test_s3_requests.py": 39,
    "tests/spark/test_compaction.py": 38,
    "tests/spark/test_unhonoured_options.py": 37,
    "tests/spark/test_bad_input.py": 37,
    "tests/spark/test_ctas.py": 35,
    "tests/spark/test_keyed_read.py": 35,
    "tests/spark/test_cross_partition.py": 35,
    "tests/interop/test_changelog_producers.py": 31,
    "tests/catalog/test_catalog_lock.py": 30,
    "tests/interop/test_java_tables.py": 27,
    "tests/interop/test_merge_engines.py": 27,
    "tests/spark/test_not_null.py": 27,
    "tests/spark/test_read.py": 26,
    "tests/interop/test_keyed_compaction.py": 25,
    "tests/unit/test_aggregator.py": 25,
    "tests/catalog/test_spark_catalog.py": 24,
    "tests/spark/test_concurrency.py": 23,
    "tests/spark/test_schema_evolution.py": 23,
    "tests/test_java_fallback.py": 22,
    "tests/spark/test_docs_examples.py": 22,
    "tests/catalog/test_catalog_ctas.py": 21,
}


def order(items: list) -> None:
    """Sort pytest items in place: heavier modules first, each module's tests in their order."""
    position = {}
    for index, item in enumerate(items):
        position.setdefault(item.nodeid.split("::")[0], index)

    def key(item):
        module = item.nodeid.split("::")[0]
        return (-MODULE_SECONDS.get(module, 0), position[module])

    items.sort(key=key)


def module_seconds(log: str) -> dict[str, int]:
    """Seconds per module from the `--durations` lines of a pytest log."""
    totals: dict[str, float] = defaultdict(float)
    for match in re.finditer(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+?)::", log, re.MULTILINE):
        totals[match.group(2)] += float(match.group(1))
    return {m: round(s) for m, s in sorted(totals.items(), key=lambda kv: -kv[1]) if s >= 20}


if __name__ == "__main__":
    for module, seconds in module_seconds(Path(sys.argv[1]).read_text()).items():
        print(f'    "{module}": {seconds},')
