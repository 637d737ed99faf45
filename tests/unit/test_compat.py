"""What lakesink needs of pypaimon beyond pypaimon 2.1 (lakesink.paimon.table.compat) reaches only
lakesink's own tables: manifests of older Paimon versions are read, and pypaimon itself is left
exactly as it was for any other code in the process."""

from __future__ import annotations

import glob
import os
import pickle
import subprocess
import sys
from pathlib import Path

import fastavro
import pytest

import lakesink
from lakesink.paimon.table import compat, tables
from tests.unit.test_maintenance import Writer, ids_of

ROOT = Path(__file__).parents[2]
# The fields Paimon 1.0's manifests lack (1.1 added _VALUE_STATS_COLS, later releases the others).
NEWER_FIELDS = {"_VALUE_STATS_COLS", "_EXTERNAL_PATH", "_FIRST_ROW_ID", "_WRITE_COLS", "_WRITE_COLS_SEQUENCES"}


def _as_paimon_1_0_wrote_them(table_path: str) -> int:
    """Rewrite every manifest file of the table without the fields Paimon 1.0 did not know."""
    manifests = [p for p in glob.glob(os.path.join(table_path, "manifest", "manifest-*"))
                 if not os.path.basename(p).startswith("manifest-list-")]
    for path in manifests:
        with open(path, "rb") as stream:
            reader = fastavro.reader(stream)
            schema, codec = reader.writer_schema, reader.codec
            records = list(reader)
        file_type = next(f["type"] for f in schema["fields"] if f["name"] == "_FILE")
        file_type["fields"] = [f for f in file_type["fields"] if f["name"] not in NEWER_FIELDS]
        for record in records:
            for name in NEWER_FIELDS:
                record["_FILE"].pop(name, None)
        with open(path, "wb") as out:
            fastavro.writer(out, fastavro.parse_schema(schema), records, codec=codec)
    return len(manifests)


def _lakesink_rows(table_path: str) -> list[int]:
    table = tables.open_table(table_path)
    builder = table.new_read_builder()
    return sorted(builder.new_read().to_arrow(builder.new_scan().plan().splits()).column("id").to_pylist())


def test_manifests_written_before_value_stats_cols_are_read_and_committed_over(table_path):
    writer = Writer(table_path)
    written = writer.commit(3)[0] + writer.commit(2)[0]
    assert _as_paimon_1_0_wrote_them(table_path) >= 2
    # pypaimon alone cannot plan such a table (what compat is for), and lakesink left it so
    from pypaimon.table.file_store_table import FileStoreTable
    with pytest.raises(KeyError, match="_VALUE_STATS_COLS"):
        FileStoreTable.from_path(table_path).new_read_builder().new_scan().plan()
    assert _lakesink_rows(table_path) == sorted(written)
    written += writer.commit(4)[0]  # a commit reads the old manifests (replay check, merging)
    assert _lakesink_rows(table_path) == sorted(written)
    assert lakesink.history(table_path).num_rows == 3


def test_a_tables_file_io_survives_pickling_as_a_task_receives_it(table_path):
    writer = Writer(table_path)
    written = writer.commit(3)[0]
    _as_paimon_1_0_wrote_them(table_path)
    table = pickle.loads(pickle.dumps(tables.open_table(table_path)))
    assert isinstance(table, compat.Table) and compat.reads_older_manifests(table.file_io)
    builder = table.new_read_builder()
    assert sorted(builder.new_read().to_arrow(builder.new_scan().plan().splits()).column("id").to_pylist()) \
        == sorted(written)


def test_copies_of_a_table_keep_tolerating_expired_snapshots(table_path):
    Writer(table_path).commit()
    table = tables.open_table(table_path)
    for copied in (table.copy({"scan.snapshot-id": "1"}), table.copy_without_time_travel({})):
        assert isinstance(copied, compat.Table)
        assert isinstance(copied.snapshot_manager(), compat.TolerantSnapshotManager)
    assert ids_of(table_path) == [0]


def test_lakesink_leaves_pypaimons_functions_as_they_were(tmp_path):
    """In a fresh process, as a user's: pypaimon's originals are taken first, then lakesink writes
    and reads a table (and reads manifests of an older Paimon); every original is still in place."""
    code = f"""
import sys
from pypaimon.manifest import manifest_file_manager
from pypaimon.manifest.manifest_file_manager import ManifestFileManager
from pypaimon.snapshot.snapshot_manager import SnapshotManager
from pypaimon.table.file_store_table import FileStoreTable
from pypaimon.common.file_io import FileIO
from pypaimon.filesystem.local_file_io import LocalFileIO

def originals():
    return {{
        "_read_manifest_records": manifest_file_manager._read_manifest_records,
        "ManifestFileManager.read": ManifestFileManager.read,
        "ManifestFileManager.read_entries_parallel": ManifestFileManager.read_entries_parallel,
        "SnapshotManager.get_snapshot_by_id": SnapshotManager.get_snapshot_by_id,
        "SnapshotManager.try_get_earliest_snapshot": SnapshotManager.try_get_earliest_snapshot,
        "FileStoreTable.snapshot_manager": FileStoreTable.snapshot_manager,
        "FileStoreTable.copy": FileStoreTable.copy,
        "FileIO.get": FileIO.__dict__["get"],
        "LocalFileIO.new_input_stream": LocalFileIO.new_input_stream,
    }}

before = originals()
from tests.unit.test_maintenance import Writer
from tests.unit.test_compat import _as_paimon_1_0_wrote_them, _lakesink_rows
import lakesink
path = {str(tmp_path / "wh" / "db.db" / "t")!r}
writer = Writer(path)
ids = writer.commit(3)[0]
assert _lakesink_rows(path) == ids
_as_paimon_1_0_wrote_them(path)
assert _lakesink_rows(path) == ids
lakesink.history(path)
after = originals()
changed = [name for name in before if after[name] is not before[name]]
assert not changed, changed
assert not hasattr(manifest_file_manager._read_manifest_records, "__wrapped__")
assert type(FileIO.get(path)) is LocalFileIO
print("unchanged")
"""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip().endswith("unchanged"), out.stderr[-3000:]
