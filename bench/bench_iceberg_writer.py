"""Iceberg metadata writers side by side: lakesink's (fastavro) against pyiceberg's.

The same manifest and manifest list (one identity-partitioned data file per entry, with column
metrics) written by `lakesink.paimon.iceberg.avro_files` in this process and by pyiceberg 0.12's
`write_manifest` / `write_manifest_list` in the Python of `LAKESINK_ICEBERG_PYTHON` (the tests'
pyiceberg venv). Each side reports its import cost (a fresh interpreter: what every committing
process pays once) and the median CPU time of writing both files, per entry count.

    ./dev bench iceberg-writer
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_FASTAVRO = r"""
import json, sys, tempfile, time
t0 = time.process_time()
from lakesink.paimon.iceberg.avro_files import DataFile, Manifest, manifest_bytes, manifest_list_bytes
imported = time.process_time() - t0
partition = [{"name": "dt", "transform": "identity", "source-id": 2, "field-id": 1000, "type": "string"}]
schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": False, "type": "long"},
          {"id": 2, "name": "dt", "required": False, "type": "string"}]}
pairs = lambda d: [{"key": k, "value": v} for k, v in d.items()]
def write(n, d):
    t = time.process_time()
    files = [DataFile(f"{d}/f{i}.parquet", {"dt": f"2024-01-{i % 28 + 1:02d}"}, 100, 1000,
                      {"value_counts": pairs({1: 100, 2: 100}), "null_value_counts": pairs({1: 0, 2: 0}),
                       "lower_bounds": pairs({1: bytes(8)}), "upper_bounds": pairs({1: b"\1" * 8})})
             for i in range(n)]
    data = manifest_bytes(files, 1, partition, schema)
    path = f"{d}/m-{time.time_ns()}.avro"
    open(path, "wb").write(data)
    open(f"{d}/l-{time.time_ns()}.avro", "wb").write(manifest_list_bytes([Manifest(path, len(data), n, 100 * n)], 1, None))
    return time.process_time() - t
"""

_PYICEBERG = r"""
import json, sys, tempfile, time
t0 = time.process_time()
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus,
                                write_manifest, write_manifest_list)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType
imported = time.process_time() - t0
schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "dt", StringType(), required=False))
spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt"))
io = PyArrowFileIO()
def write(n, d):
    t = time.process_time()
    with write_manifest(format_version=2, spec=spec, schema=schema, output_file=io.new_output(f"{d}/m-{time.time_ns()}.avro"),
                        snapshot_id=1, avro_compression="deflate") as writer:
        for i in range(n):
            data_file = DataFile.from_args(
                content=DataFileContent.DATA, file_path=f"{d}/f{i}.parquet", file_format=FileFormat.PARQUET,
                partition=Record(f"2024-01-{i % 28 + 1:02d}"), record_count=100, file_size_in_bytes=1000,
                value_counts={1: 100, 2: 100}, null_value_counts={1: 0, 2: 0},
                lower_bounds={1: bytes(8)}, upper_bounds={1: b"\1" * 8})
            writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=1, data_file=data_file))
    with write_manifest_list(format_version=2, output_file=io.new_output(f"{d}/l-{time.time_ns()}.avro"), snapshot_id=1,
                             parent_snapshot_id=None, sequence_number=1, avro_compression="deflate") as listing:
        listing.add_manifests([writer.to_manifest_file()])
    return time.process_time() - t
"""

_MEASURE = r"""
sizes, repeats = json.loads(sys.argv[1])
d = tempfile.mkdtemp()
out = {"import_s": imported}
for n in sizes:
    out[str(n)] = sorted(write(n, d) for _ in range(repeats))[repeats // 2]
print(json.dumps(out))
"""


def _measure(python: str, writer: str, sizes, repeats: int) -> dict:
    done = subprocess.run([python, "-c", writer + _MEASURE, json.dumps([list(sizes), repeats])],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(sizes=(10, 1_000), repeats: int = 5) -> dict:
    iceberg_python = os.environ.get("LAKESINK_ICEBERG_PYTHON", "")
    ours = _measure(sys.executable, _FASTAVRO, sizes, repeats)
    try:
        theirs = _measure(iceberg_python, _PYICEBERG, sizes, repeats) if iceberg_python else None
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"[iceberg-writer] pyiceberg at {iceberg_python!r} unavailable: {exc}")
        theirs = None
    print("[iceberg-writer] a manifest and its manifest list, CPU time (medians of "
          f"{repeats}); import in a fresh interpreter")
    print(f"  import        lakesink {ours['import_s']:.2f} s" +
          (f"   pyiceberg {theirs['import_s']:.2f} s" if theirs else ""))
    for n in sizes:
        line = f"  {n:>6} files  lakesink {ours[str(n)] * 1000:7.1f} ms"
        if theirs:
            line += f"   pyiceberg {theirs[str(n)] * 1000:7.1f} ms ({theirs[str(n)] / ours[str(n)]:.2f}x)"
        print(line)
    return {"lakesink": ours, "pyiceberg": theirs, "measured_at": time.strftime("%Y-%m-%d")}
