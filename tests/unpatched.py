"""Read a table back with pypaimon as released: in a process of its own that never imports lakesink.

lakesink patches nothing in pypaimon, but its own table class (`lakesink.paimon.table.compat`)
reads more than pypaimon does, and every test process opens tables through it. A check that
read with lakesink loaded could pass on a table only lakesink can read. `read_unpatched` asks a
reader process started with `python -I` (no PYTHONPATH, no current directory on sys.path), one
per test process and kept for its later reads (its start, importing pyarrow and pypaimon, costs
about a CPU-second); the reader opens the table afresh for every read, fails if lakesink got
imported in it, and hands the rows back as a Parquet file.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading

import pyarrow as pa
import pyarrow.parquet as pq

READER = r"""
import json, sys, traceback
import pyarrow.parquet as pq
from pypaimon.table.file_store_table import FileStoreTable

for line in sys.stdin:
    path, out = json.loads(line)
    try:
        table = FileStoreTable.from_path(path)
        builder = table.new_read_builder()
        rows = builder.new_read().to_arrow(builder.new_scan().plan().splits())
        patched = sorted(m for m in sys.modules if m == "lakesink" or m.startswith("lakesink."))
        if patched:
            raise RuntimeError(f"the unpatched reader imported {patched}")
        pq.write_table(rows, out)
        answer = {"ok": True}
    except BaseException:
        answer = {"ok": False, "error": traceback.format_exc()[-3000:]}
    print(json.dumps(answer), flush=True)
"""


class UnpatchedReadError(AssertionError):
    """pypaimon as released could not read the table."""


_reader: subprocess.Popen | None = None
_lock = threading.Lock()


def _process() -> subprocess.Popen:
    global _reader
    if _reader is None or _reader.poll() is not None:
        _reader = subprocess.Popen([sys.executable, "-I", "-c", READER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return _reader


def _stop() -> None:
    if _reader is not None and _reader.poll() is None:
        _reader.kill()
        _reader.wait()


atexit.register(_stop)


def read_unpatched(path: str, timeout: float = 300.0) -> pa.Table:
    """The table at `path` (latest snapshot) as pypaimon alone reads it, in a process of its own."""
    fd, out = tempfile.mkstemp(suffix=".parquet", prefix="unpatched-")
    os.close(fd)
    try:
        with _lock:
            reader = _process()
            reader.stdin.write(json.dumps([str(path), out]) + "\n")
            reader.stdin.flush()
            ready, _, _ = select.select([reader.stdout], [], [], timeout)
            line = reader.stdout.readline() if ready else ""
            if not line:  # timed out or died: the next read starts a new reader
                reader.kill()
                reader.wait()
                raise UnpatchedReadError(f"pypaimon (unpatched, own process) gave no answer reading {path} "
                                         f"within {timeout} s (exit {reader.returncode})")
        answer = json.loads(line)
        if not answer["ok"]:
            raise UnpatchedReadError(f"pypaimon (unpatched, own process) could not read {path}:\n{answer['error']}")
        return pq.read_table(out)
    finally:
        os.unlink(out)
