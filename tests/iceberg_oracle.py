"""pyiceberg as the reader of lakesink's Iceberg metadata (`metadata.iceberg.storage`), run in a
Python of its own (it needs a newer pyarrow than pypaimon allows); rows come back as Parquet,
the rest as JSON. DuckDB's Iceberg reader (`iceberg_scan`) reads the same metadata there too
and must return the same rows (local tables read whole; on S3 pyiceberg alone).

`LAKESINK_ICEBERG_PYTHON` names that Python (`./dev test` sets up `.venv-iceberg` and points it
there); where it is missing the tests skip saying why (with CI=true: fail).
"""

from __future__ import annotations

import json
import os
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq

from tests.requirements import in_ci, unavailable

PYTHON = os.environ.get("LAKESINK_ICEBERG_PYTHON",
                        os.path.join(os.path.dirname(__file__), "..", ".venv-iceberg", "bin", "python"))

_SCRIPT = r'''
import json, sys
import pyarrow.parquet as pq
from pyiceberg.table import StaticTable

metadata, out, properties, row_filter = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
table = StaticTable.from_metadata(metadata, properties)
scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
files = len(list(scan.plan_files()))
rows = scan.to_arrow()
pq.write_table(rows, out)
snapshot = table.current_snapshot()
duckdb = None
if not row_filter and not properties:  # DuckDB reads local tables whole here (S3 needs its httpfs)
    try:
        import duckdb as _duckdb, duckdb_extensions
    except ImportError:
        duckdb = "not installed"
    else:
        con = _duckdb.connect()
        for extension in ("avro", "iceberg"):
            duckdb_extensions.import_extension(extension, con=con)
        read = con.execute("SELECT * FROM iceberg_scan(?)", [metadata]).fetch_arrow_table()
        key = lambda r: json.dumps(r, default=str, sort_keys=True)
        same = sorted(map(key, read.cast(rows.schema).to_pylist())) == sorted(map(key, rows.to_pylist()))
        duckdb = "same rows" if same else f"different rows: {read.num_rows} against pyiceberg's {rows.num_rows}"
print(json.dumps({
    "duckdb": duckdb,
    "snapshot_id": snapshot.snapshot_id if snapshot else None,
    "operation": snapshot.summary.operation.value if snapshot else None,
    "summary": dict(snapshot.summary.additional_properties) if snapshot else {},
    "schema": [[f.field_id, f.name, str(f.field_type)] for f in table.schema().fields],
    "partition_spec": [[f.name, str(f.transform), f.source_id] for f in table.spec().fields],
    "table_uuid": str(table.metadata.table_uuid),
    "files": files,
}))
'''


def available() -> bool:
    if not os.path.exists(PYTHON):
        return False
    done = subprocess.run([PYTHON, "-c", "import pyiceberg"], capture_output=True)
    return done.returncode == 0


def require() -> None:
    if not available():
        unavailable(f"pyiceberg not installed: {PYTHON} is missing or lacks pyiceberg (./dev test installs it "
                    "into .venv-iceberg; or set LAKESINK_ICEBERG_PYTHON to a Python with pyiceberg)")


def latest_metadata(table: str) -> str:
    """The metadata file `version-hint.text` names, as Hadoop-catalog readers find it."""
    directory = os.path.join(table, "metadata")
    with open(os.path.join(directory, "version-hint.text")) as hint:
        version = int(hint.read().strip())
    return os.path.join(directory, f"v{version}.metadata.json")


def read(tmp_path, table: str, metadata: str | None = None, properties: dict | None = None,
         row_filter: str = "") -> tuple[pa.Table, dict]:
    """The table's rows as pyiceberg reads them from its latest Iceberg metadata (or `metadata`), and
    what it says of the current snapshot (`files`: the data files its scan planned, pruned by
    `row_filter`, pyiceberg's filter syntax). `properties`: pyiceberg's file IO properties (S3)."""
    work = tmp_path / "iceberg-oracle"
    work.mkdir(exist_ok=True)
    script = work / "read.py"
    script.write_text(_SCRIPT)
    out = work / "rows.parquet"
    done = subprocess.run([PYTHON, str(script), metadata or latest_metadata(table), str(out),
                           json.dumps(properties or {}), row_filter], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads(done.stdout.strip().splitlines()[-1])
    # DuckDB's Iceberg reader (installed beside pyiceberg) reads the same metadata to the same rows
    if info["duckdb"] == "not installed" and in_ci():
        unavailable(f"DuckDB's Iceberg reader not installed in {PYTHON} (./dev test installs it)")
    assert info["duckdb"] in (None, "not installed", "same rows"), f"DuckDB's iceberg_scan: {info['duckdb']}"
    return pq.read_table(out), info


def highest_level_rows(table: str, columns: list[str]) -> list[tuple]:
    """Paimon's rule for what its Iceberg metadata of a primary-key table lists, applied to the
    table's latest snapshot without lakesink: the live data files at the highest LSM level
    (`num-levels` - 1; Paimon's default `num-sorted-run.compaction-trigger` + 1), read as stored
    (pypaimon's manifests, pyarrow's Parquet reader), deletion vectors not applied: its rows, sorted."""
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager
    from pypaimon.manifest.manifest_list_manager import ManifestListManager
    from pypaimon.manifest.schema.file_entry import FileEntry
    from pypaimon.table.file_store_table import FileStoreTable
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path

    paimon = FileStoreTable.from_path(str(table))
    options = paimon.table_schema.options
    top = int(options.get("num-levels", int(options.get("num-sorted-run.compaction-trigger", 5)) + 1)) - 1
    snapshot = paimon.snapshot_manager().get_latest_snapshot()
    entries = FileEntry.merge_entries(ManifestFileManager(paimon).read_entries_parallel(
        ManifestListManager(paimon).read_all(snapshot))) if snapshot is not None else []
    rows = []
    for e in entries:
        if e.kind == 0 and e.file.level == top:
            path = canonical_data_file_path(paimon, tuple(e.partition.values), e.bucket, e.file.file_name)
            stored = pq.ParquetFile(path).read(columns=columns)  # the file alone: no partition discovery
            rows += zip(*[stored.column(c).to_pylist() for c in columns])
    return sorted(rows)
