"""The order the test run hands tests to its workers: the longest work first.

Two workers take tests one at a time (`--dist load --maxschedchunk 1`); started longest
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
    "tests/spark/test_crash.py": 330,
    "tests/spark/test_crash_keyed.py": 310,
    "tests/spark/test_deletion_vectors.py": 143,
    "tests/jdbc/test_jdbc_crash.py": 102,
    "tests/spark/test_rowlevel.py": 94,
    "tests/spark/test_pipelines.py": 93,
    "tests/spark/test_format_keyed.py": 76,
    "tests/spark/test_dynamic_buckets.py": 65,
    "tests/jdbc/test_spark_jdbc.py": 64,
    "tests/spark/test_keyed_bucket.py": 62,
    "tests/spark/test_batch_failures.py": 61,
    "tests/spark/test_iceberg.py": 57,
    "tests/interop/test_lakesink_tables.py": 54,
    "tests/spark/test_ctas.py": 53,
    "tests/spark/test_crash_merge.py": 50,
    "tests/spark/test_compaction.py": 44,
    "tests/interop/test_deletion_vectors.py": 43,
    "tests/unit/test_s3_timeouts.py": 41,
    "tests/unit/test_s3_requests.py": 41,
    "tests/interop/test_java_tables.py": 39,
    "tests/interop/test_dynamic_buckets.py": 39,
    "tests/spark/test_read_stream.py": 39,
    "tests/interop/test_type_tables.py": 39,
    "tests/spark/test_streaming.py": 38,
    "tests/spark/test_in_place.py": 37,
    "tests/spark/test_keyed_write.py": 36,
    "tests/unit/test_aggregator.py": 36,
    "tests/catalog/test_spark_catalog.py": 35,
    "tests/interop/test_changelog_producers.py": 35,
    "tests/unit/test_race.py": 33,
    "tests/spark/test_batch_write.py": 33,
    "tests/interop/test_merge_engines.py": 30,
    "tests/spark/test_postpone_buckets.py": 29,
    "tests/spark/test_concurrency.py": 29,
    "tests/catalog/test_catalog_lock.py": 28,
    "tests/spark/test_bad_input.py": 26,
    "tests/catalog/test_sql_statements.py": 25,
    "tests/spark/test_keyed_stream_write.py": 25,
    "tests/interop/test_postpone_buckets.py": 22,
    "tests/spark/test_read.py": 21,
    "tests/interop/test_keyed_compaction.py": 21,
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
