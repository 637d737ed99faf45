"""The test side of `tests.cluster.driver`: start it, send it scenarios, get their results."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path

from .cluster import Cluster


class ScenarioError(Exception):
    """A scenario raised in the driver: `str()` is "Type: message", then the driver's traceback."""

    def __init__(self, reply: dict):
        self.type, self.message = reply["type"], reply["message"]
        super().__init__(f"{self.type}: {self.message}\n--- in the cluster driver ---\n{reply['traceback']}")


class DriverDied(AssertionError):
    pass


class RemoteDriver:
    def __init__(self, cluster: Cluster, workdir: Path, start_timeout: float = 240.0):
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.log = self.workdir / "driver.log"
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self._reply = None
        self._buffer = b""
        self.waiting = False

    def launch(self) -> RemoteDriver:
        """Start the driver process (its session registers with the master once that is up)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [self.cluster.python, "-m", "tests.cluster.driver", self.cluster.master_url, str(write_fd)],
                cwd=self.workdir, env=self.cluster.driver_env(), stdin=subprocess.PIPE, stdout=log,
                stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True)
        os.close(write_fd)
        self.cluster.track(self.process.pid)
        self._reply = read_fd
        self.waiting = True
        return self

    def wait_ready(self) -> RemoteDriver:
        if self.waiting:
            self.started = self.result(self.start_timeout)
        return self

    def start(self) -> RemoteDriver:
        return self.launch().wait_ready()

    def submit(self, scenario: str, **args) -> None:
        """Start a scenario; `result()` waits for it (one at a time)."""
        assert not self.waiting, "the previous scenario's result was not read"
        self.process.stdin.write(json.dumps({"scenario": scenario, "args": args}).encode() + b"\n")
        self.process.stdin.flush()
        self.waiting = True

    def result(self, timeout: float = 300.0):
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DriverDied(f"no answer from the cluster driver in {timeout:.0f} s; log {self.log}:\n"
                                 + self.tail())
            ready, _, _ = select.select([self._reply], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._reply, 1 << 16)
                if not chunk:
                    raise DriverDied(f"the cluster driver exited ({self.process.poll()}); log {self.log}:\n"
                                     + self.tail())
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        self.waiting = False
        reply = json.loads(line)
        if not reply["ok"]:
            raise ScenarioError(reply)
        return reply["result"]

    def run(self, scenario: str, timeout: float = 300.0, **args):
        self.submit(scenario, **args)
        return self.result(timeout)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # the driver stops its session and exits
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self._reply is not None:
            os.close(self._reply)
            self._reply = None

