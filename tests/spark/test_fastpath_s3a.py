"""The fast path on S3 through Hadoop's S3A connector (tests/s3a.py says what this stands for).

Drivers of their own (the connector must be on the JVM's classpath from the start):
`lakesink.write` of an append table and (twice) a primary-key table, and `lakesink.stream` killed
before its second snapshot and restarted, each into tables on the test S3 server
behind the counting proxy, the endpoint and keys given only as the tables' options.
Every table is read back with pypaimon: each row (key) once, no data file outside
the snapshots, no batch committed twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.crash.harness import make_source, source_rows
from tests.interop.oracle import Unavailable
from tests.s3a import s3a_jars, spark_conf
from tests.s3proxy import proxied_s3
from tests.staged import read_back, snapshot_list

from .fastpath_s3_child import APPEND_ROWS, KEYED_ROWS

pytestmark = [pytest.mark.spark, pytest.mark.full]  # the fast path through Hadoop's S3A: ./dev full

REPO = Path(__file__).resolve().parents[2]
BUCKET = "lakesink-s3a"
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


@pytest.fixture(scope="module")
def jars():
    try:
        return s3a_jars()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def s3():
    with proxied_s3(BUCKET) as both:
        yield both


def _fs(s3) -> dict:
    server, proxy = s3
    return proxy.fs_options(server)


def _run(cmd: list[str], crash_at: str | None = None, workdir: Path | None = None) -> subprocess.CompletedProcess:
    # No credentials in the environment: the keys reach Spark's S3A and pyarrow only as options.
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIALS and not k.startswith("LAKESINK_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if crash_at:
        env.update(LAKESINK_CRASH_AT=crash_at, LAKESINK_CRASH_COUNTER=str(workdir / f"counter-{crash_at}"))
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=420)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever a killed driver left (its JVM, workers)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


def _no_file_outside_snapshots(server, prefix: str, path: str, fs: dict) -> None:
    from pypaimon.table.file_store_table import FileStoreTable

    table = FileStoreTable.from_path(path, fs)
    scan = table.new_read_builder().new_scan()
    live = {f.file_name for split in scan.plan().splits() for f in split.files}
    keys = [o["Key"] for page in server.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                                                          Prefix=prefix)
            for o in page.get("Contents", [])]
    stray = sorted(k for k in keys if k.endswith(".parquet") and k.rsplit("/", 1)[-1] not in live)
    assert not stray, f"data files no snapshot references: {stray[:5]}"


def test_lakesink_write_reaches_s3_through_sparks_s3a_connector_with_the_tables_options(jars, s3):
    server, proxy = s3
    fs, base = _fs(s3), f"s3://{BUCKET}/batch/db.db"
    proxy.reset()
    cmd = [sys.executable, "-m", "tests.spark.fastpath_s3_child", "--base", base, "--fs", json.dumps(fs)]
    cmd += [arg for k, v in spark_conf(jars).items() for arg in ("--conf", f"{k}={v}")]
    done = _run(cmd)
    assert done.returncode == 0, done.stdout[-3000:]
    counts = proxy.counts()
    print(f"\nfast path via s3a, 1 append + 2 keyed jobs: requests {dict(sorted(counts.items()))}")

    events = read_back(f"{base}/events", fs).to_pylist()
    assert sorted(r["id"] for r in events) == list(range(APPEND_ROWS))
    assert all(r["v"] == r["id"] * 2 and r["grp"] == str(r["id"] % 4) for r in events)
    assert len(snapshot_list(f"{base}/events", fs)) == 1
    users = {r["id"]: r["name"] for r in read_back(f"{base}/users", fs).to_pylist()}
    assert users == {i: "v1" if i < KEYED_ROWS // 2 else "v2" for i in range(KEYED_ROWS // 2 * 3)}
    for name in ("events", "users"):
        _no_file_outside_snapshots(server, f"batch/db.db/{name}/", f"{base}/{name}", fs)


def test_lakesink_stream_on_s3_killed_before_a_snapshot_lands_every_row_once(jars, s3, tmp_path):
    server, _ = s3
    fs, path = _fs(s3), f"s3://{BUCKET}/stream/db.db/t"
    make_source(tmp_path / "source", files=3, rows_per_file=50)
    cmd = [sys.executable, "-m", "tests.crash.driver", "--path", path, "--checkpoint", str(tmp_path / "chk"),
           "--source", str(tmp_path / "source"), "--mode", "fast", "--commit", "sync"]
    cmd += [arg for k, v in fs.items() for arg in ("--option", f"{k}={v}")]
    cmd += [arg for k, v in spark_conf(jars).items() for arg in ("--conf", f"{k}={v}")]
    killed = _run(cmd, crash_at="before-snapshot@2", workdir=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    assert len(snapshot_list(path, fs)) == 1  # the first batch landed, the second did not
    finished = _run(cmd)
    assert finished.returncode == 0, finished.stdout[-3000:]

    ids = Counter(r["id"] for r in read_back(path, fs).to_pylist())
    wanted = Counter(source_rows(tmp_path / "source").column("id").to_pylist())
    assert ids == wanted, f"duplicates {+(ids - wanted)}, lost {+(wanted - ids)}"
    identifiers = Counter((s.commit_user, s.commit_identifier) for s in snapshot_list(path, fs))
    assert all(n == 1 for n in identifiers.values()), identifiers
    _no_file_outside_snapshots(server, "stream/db.db/t/", path, fs)
