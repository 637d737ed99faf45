import threading

import pytest

import lakesink
from tests.helpers import read_table

pytestmark = pytest.mark.spark


def test_format_paimon_works_from_a_new_thread_after_register(spark, table_path):
    errors = []

    def write():
        try:
            lakesink.register(spark)  # makes the session active for this thread's JVM calls
            spark.range(7).write.format("paimon").mode("append").save(table_path)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(timeout=120)
    assert errors == []
    assert sorted(read_table(table_path).column("id").to_pylist()) == list(range(7))
