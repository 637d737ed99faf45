"""delta-rs as an oracle for row-level changes: the same statement on the same rows, run by
`deltalake` in a Python of its own (it needs a newer pyarrow than pypaimon allows), the rows
exchanged as Parquet files.

`LAKESINK_DELTA_PYTHON` names that Python (`./dev test` sets up `.venv-delta` and points it
there); where it is missing the comparisons skip saying why (with CI=true: fail).
"""

from __future__ import annotations

import json
import os
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.requirements import unavailable

PYTHON = os.environ.get("LAKESINK_DELTA_PYTHON",
                        os.path.join(os.path.dirname(__file__), "..", "..", ".venv-delta", "bin", "python"))

_SCRIPT = r'''
import json, os, sys
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

spec = json.load(open(sys.argv[1]))
write_deltalake(spec["table"], pq.read_table(spec["target"]))
dt = DeltaTable(spec["table"])
op = spec["op"]
if op == "delete":
    metrics = dt.delete(spec["where"])
elif op == "update":
    metrics = dt.update(updates=spec["set"], predicate=spec["where"])
else:
    m = dt.merge(source=pq.read_table(spec["source"]), predicate=spec["on"], source_alias="s", target_alias="t")
    for kind, condition, values in spec["clauses"]:
        if kind == "matched_update":
            m = m.when_matched_update(updates=values, predicate=condition)
        elif kind == "matched_update_all":
            m = m.when_matched_update_all(predicate=condition)
        elif kind == "matched_delete":
            m = m.when_matched_delete(predicate=condition)
        elif kind == "insert":
            m = m.when_not_matched_insert(updates=values, predicate=condition)
        elif kind == "insert_all":
            m = m.when_not_matched_insert_all(predicate=condition)
        elif kind == "by_source_update":
            m = m.when_not_matched_by_source_update(updates=values, predicate=condition)
        elif kind == "by_source_delete":
            m = m.when_not_matched_by_source_delete(predicate=condition)
    metrics = m.execute()
pq.write_table(DeltaTable(spec["table"]).to_pyarrow_table(), spec["out"])
with open(spec["metrics"], "w") as out:
    json.dump(metrics, out, default=str)
# delta-rs's runtime sometimes aborts while the interpreter tears it down ("terminate called
# without an active exception"), after the results above are complete: leave without teardown.
os._exit(0)
'''


def available() -> bool:
    return os.path.exists(PYTHON)


def require() -> None:
    if not available():
        unavailable(f"delta-rs oracle not installed: {PYTHON} is missing (./dev test installs it into "
                    ".venv-delta; or set LAKESINK_DELTA_PYTHON to a Python with deltalake)")


def run(tmp_path, op: str, target: pa.Table, source: pa.Table | None = None, **spec) -> tuple[pa.Table, dict]:
    """The table after `op` (delete / update / merge) as delta-rs runs it, and its metrics."""
    require()
    work = tmp_path / "delta-oracle"
    work.mkdir(exist_ok=True)
    pq.write_table(target, work / "target.parquet")
    if source is not None:
        pq.write_table(source, work / "source.parquet")
    spec.update(op=op, table=str(work / "table"), target=str(work / "target.parquet"),
                source=str(work / "source.parquet"), out=str(work / "out.parquet"),
                metrics=str(work / "metrics.json"))
    (work / "spec.json").write_text(json.dumps(spec))
    (work / "run.py").write_text(_SCRIPT)
    done = subprocess.run([PYTHON, str(work / "run.py"), str(work / "spec.json")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return pq.read_table(work / "out.parquet"), json.loads((work / "metrics.json").read_text())
