"""Read a table back with pypaimon as released: in a process of its own that never imports lakesink.

lakesink patches pypaimon in-process when it opens a table (`lakesink.paimon.compat`), and
every test process opens tables. A check that reads with that patched pypaimon could pass
on a table only lakesink's own patches can read. `read_unpatched` runs the reader below in
`python -I` (no PYTHONPATH, no current directory on sys.path), fails if lakesink got
imported there anyway, and hands the rows back as a Parquet file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

READER = r"""
import sys
import pyarrow.parquet as pq
from pypaimon.table.file_store_table import FileStoreTable

path, out = sys.argv[1], sys.argv[2]
table = FileStoreTable.from_path(path)
builder = table.new_read_builder()
rows = builder.new_read().to_arrow(builder.new_scan().plan().splits())
patched = sorted(m for m in sys.modules if m == "lakesink" or m.startswith("lakesink."))
if patched:
    sys.exit(f"the unpatched reader imported {patched}")
pq.write_table(rows, out)
"""


class UnpatchedReadError(AssertionError):
    """pypaimon as released could not read the table."""


def read_unpatched(path: str, timeout: float = 300.0) -> pa.Table:
    """The table at `path` (latest snapshot) as pypaimon alone reads it, in a fresh process."""
    fd, out = tempfile.mkstemp(suffix=".parquet", prefix="unpatched-")
    os.close(fd)
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", READER, str(path), out], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise UnpatchedReadError(f"pypaimon (unpatched, own process) could not read {path}: exit "
                                     f"{proc.returncode}\n{proc.stderr[-3000:]}")
        return pq.read_table(out)
    finally:
        os.unlink(out)
