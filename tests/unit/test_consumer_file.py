"""A streaming reader's consumer file is replaced whole: a writer dying mid-update leaves the old progress."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from lakesink.paimon.read import scan


@pytest.fixture
def table(tmp_path):
    from pypaimon import CatalogFactory, Schema

    catalog = CatalogFactory.create({"warehouse": str(tmp_path)})
    catalog.create_database("db", True)
    catalog.create_table("db.a", Schema.from_pyarrow_schema(pa.schema([("id", pa.int64())])), False)
    return catalog.get_table("db.a")


def _consumers(table):
    from pypaimon.consumer.consumer_manager import ConsumerManager
    return ConsumerManager(table.file_io, table.table_path)


def test_recorded_progress_is_what_pypaimon_reads_and_leaves_no_temporary_file(table):
    scan.record_consumer(table, "silver", 3)
    scan.record_consumer(table, "silver", 8)

    assert _consumers(table).consumers() == {"silver": 8}
    assert os.listdir(os.path.join(table.table_path, "consumer")) == ["consumer-silver"]


class Killed(BaseException):
    """Stands in for the process dying between writing the new text and installing it."""


def test_an_update_interrupted_before_it_is_installed_keeps_the_previous_progress_readable(table, monkeypatch):
    scan.record_consumer(table, "silver", 3)

    def die(*_):
        raise Killed()

    monkeypatch.setattr(os, "replace", die)
    with pytest.raises(Killed):
        scan.record_consumer(table, "silver", 8)
    monkeypatch.undo()

    assert _consumers(table).consumers() == {"silver": 3}
    assert os.listdir(os.path.join(table.table_path, "consumer")) == ["consumer-silver"]
