"""Opening a table while another process creates it.

pypaimon creates a table by writing `schema/.schema-0.<uuid>.tmp` and renaming it
to `schema/schema-0` (on S3 a copy and a delete), so for a moment `schema/`
exists without a schema file. A pipelined stream's committer process creating
the table while the next micro-batch is accepted on the driver hits that moment
(seen on the cluster tier, tests/cluster): opening the table must wait for the
creation, not call the table "not a Paimon table".
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from pypaimon.common.file_io import create_temp_path
from pypaimon.schema.schema import Schema
from pypaimon.schema.table_schema import TableSchema
from pypaimon.common.json_util import JSON

from lakesink import storage
from lakesink.errors import NotAPaimonTableError
from lakesink.paimon.table import tables

from ..s3server import S3Server

SCHEMA = pa.schema([("id", pa.int64())])


def _create_slowly(path: str, fs_options: dict | None, pause: float) -> threading.Thread:
    """Create the table as pypaimon does, with `pause` seconds between the temporary schema file
    and its rename; returns once the temporary file is there."""
    io = storage.file_io(path, fs_options)
    final = f"{path}/schema/schema-0"
    temp = create_temp_path(final)
    io.write_file(temp, JSON.to_json(TableSchema.from_schema(0, Schema.from_pyarrow_schema(SCHEMA)), indent=2))

    def finish():
        time.sleep(pause)
        io.rename(temp, final)

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        server.create_bucket("lakesink-open")
        yield server


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_table_being_created_by_another_process_opens_once_its_schema_is_there(tmp_path, where, request):
    if where == "s3":
        server = request.getfixturevalue("s3")
        path, options = "s3://lakesink-open/wh/db.db/t", server.fs_options()
    else:
        path, options = str(tmp_path / "wh" / "db.db" / "t"), None
    creator = _create_slowly(path, options, pause=1.0)
    try:
        table = tables.open_table(path, options)
    finally:
        creator.join()
    assert table is not None and table.table_schema.id == 0
    assert [f.name for f in table.fields] == ["id"]


def test_a_schema_directory_that_never_gets_a_schema_file_is_still_no_table(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "CREATION_WAIT_S", 0.3)
    path = tmp_path / "t"
    (path / "schema").mkdir(parents=True)
    with pytest.raises(NotAPaimonTableError, match="holds no schema file"):
        tables.open_table(str(path))


def test_a_table_created_between_the_schema_check_and_the_listing_opens(tmp_path, monkeypatch):
    """The creator lands between "is there a schema/?" and the listing of the table directory
    (a pipelined stream's next batch accepted while the committer creates the table, written
    in place, so the directory already holds the batch's data directories): the listing shows
    schema/, so the table opens instead of being called "not a Paimon table"."""
    path = str(tmp_path / "wh" / "db.db" / "t")
    (tmp_path / "wh" / "db.db" / "t" / "_lakesink").mkdir(parents=True)
    (tmp_path / "wh" / "db.db" / "t" / "bucket-0").mkdir()
    real = storage.file_io

    class CreatedRightAfterTheCheck:
        def __init__(self, inner):
            self._inner = inner
            self.created = False

        def exists(self, p):
            if p.endswith("/schema") and not self.created:
                self.created = True
                tables.create_table(path, SCHEMA, [], [], {})  # lands just after this answer
                return False
            return self._inner.exists(p)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    wrapped = CreatedRightAfterTheCheck(real(path))
    monkeypatch.setattr(storage, "file_io", lambda *args, **kwargs: wrapped)
    table = tables.open_table(path)
    assert wrapped.created and table is not None and [f.name for f in table.fields] == ["id"]


def test_a_table_dropped_and_created_again_at_its_path_opens_with_its_new_schema(tmp_path):
    """Parsed schema files are kept (a driver opens its table several times a micro-batch), by
    path, size and time: a table created again at the same path, or given a new schema, opens
    with that schema, never the one kept."""
    import shutil

    from pypaimon.schema.schema_change import SchemaChange
    from pypaimon.schema.data_types import AtomicType

    path = str(tmp_path / "db.db" / "t")
    tables.create_table(path, SCHEMA, [], [], {})
    assert [f.name for f in tables.open_table(path).table_schema.fields] == ["id"]
    assert tables.open_table(path).table_schema is tables.open_table(path).table_schema  # kept
    shutil.rmtree(path)
    tables.create_table(path, pa.schema([("id", pa.int64()), ("name", pa.string())]), [], [], {"bucket": "-1"})
    table = tables.open_table(path)
    assert [f.name for f in table.table_schema.fields] == ["id", "name"]
    table.schema_manager.commit_changes([SchemaChange.add_column("extra", AtomicType("INT"))])
    assert [f.name for f in tables.open_table(path).table_schema.fields] == ["id", "name", "extra"]
    assert tables.open_table(path).table_schema.id == 1
