"""A local S3-compatible server for tests: `moto` in server mode on loopback.

Started in a subprocess on a free port, stopped by its process id. Buckets
and objects live in that process's memory, so each server starts empty.

    with S3Server() as s3:
        s3.create_bucket("lakesink")   # S3 bucket names have 3-63 characters
        path, fs_options = "s3://lakesink/wh/db.db/t", s3.fs_options()
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Server:
    def __init__(self, start_timeout: float = 30.0):
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None

    def start(self) -> S3Server:
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_DEFAULT_REGION=REGION,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited with code {self.process.returncode} at start")
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not answer on {self.endpoint} within {self.start_timeout} s")

    def command(self) -> list[str]:
        """The server's command line: moto's server, run by this module's `__main__`."""
        return [sys.executable, "-m", "tests.s3server", "-H", "127.0.0.1", "-p", str(self.port)]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def fs_options(self) -> dict[str, str]:
        """pypaimon's FileIO options for this server (also what lakesink's S3 publication reads)."""
        return {"fs.s3.endpoint": self.endpoint, "fs.s3.accessKeyId": ACCESS_KEY,
                "fs.s3.accessKeySecret": SECRET_KEY, "fs.s3.region": REGION,
                "s3.path-style-access": "true"}

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION,
                            config=Config(s3={"addressing_style": "path"}))

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)


@contextmanager
def s3_bucket(name: str):
    """A fresh test S3 server holding bucket `name`: yields the server."""
    with S3Server() as server:
        server.create_bucket(name)
        yield server


if __name__ == "__main__":
    # moto's server answers headers and body in separate writes; with Nagle's algorithm on, each
    # answer waits for the client's delayed ACK (a PUT took ~30 ms instead of ~8).
    from moto.server import main as moto_main
    from werkzeug.serving import WSGIRequestHandler

    WSGIRequestHandler.disable_nagle_algorithm = True
    sys.exit(moto_main(sys.argv[1:]))
