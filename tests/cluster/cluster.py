"""A Spark standalone cluster from the pip package, for the cluster tier.

One master and workers started with `$SPARK_HOME/bin/spark-class` (SPARK_HOME is
the pyspark package directory), on loopback, each in a session of its own, with
its own work directory. Executors are separate JVMs the workers start; their
Python workers run the project's interpreter. Nothing in the environment of the
cluster or of the drivers carries storage credentials: they reach lakesink only
as options.

Every process started here, and everything they start (executor JVMs, Python
daemons and workers, which put themselves in process groups of their own), is
found again by its session id and killed in `stop()`. A reaper process kills the
same sessions if the test process dies without stopping them.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Drop from the cluster's and drivers' environment: credentials (they must come as options),
# the crash harness's switches, and any Spark set-up of the machine.
DROPPED_ENV = ("AWS_", "LAKESINK_CRASH", "LAKESINK_FAIL", "SPARK_", "PYSPARK_", "HADOOP_")
# Each application (a driver) gets one executor of one core on each worker: two task slots
# per worker let the tier's long-lived driver and a test's own driver run side by side.
WORKER_SLOTS = 2
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"
# Every JVM of the tier lives for minutes and runs tiny jobs: the optimising compiler and
# parallel GC threads would cost more CPU than they save on two cores.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class ClusterError(RuntimeError):
    """The cluster could not be started."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def project_python() -> str:
    """The project's virtual environment's interpreter (the one running the tests otherwise)."""
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def session_id(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces): state ppid pgrp session ...
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[3])  # a zombie is dead, only not yet reaped


def processes_in_sessions(sessions: set[int]) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and session_id(int(entry)) in sessions:
            out.append(int(entry))
    return out


def kill_sessions(sessions: set[int]) -> None:
    """SIGKILL every process of these sessions (a session id is its leader's pid)."""
    for _ in range(3):  # a dying parent may still fork: look again
        found = processes_in_sessions(sessions)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


_REAPER = r"""
import os, signal, sys, time
sessions, commands = set(), []
for line in sys.stdin:          # EOF: the test process is gone, or done with the cluster
    kind, _, value = line.rstrip("\n").partition(" ")
    if kind == "session":
        sessions.add(int(value))
    else:                       # a command line, its arguments joined by NUL as in /proc
        commands.append(value.encode().replace(b"\\0", b"\0") + b"\0")
for _ in range(3):
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[3]) in sessions or any(c in cmdline for c in commands):
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
    time.sleep(0.2)
"""


class Reaper:
    """A process that kills the registered sessions (and processes with the registered command
    lines) when the test process closes its pipe, at the end or because it died: nothing of
    the tier outlives the tests."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-c", _REAPER], stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True, text=True)

    def _send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def watch(self, session: int) -> None:
        self._send(f"session {session}")

    def watch_command(self, args: list[str]) -> None:
        """Also kill processes whose command line holds these arguments in a row (registered
        before they start, so a test process dying while they start leaves none behind)."""
        self._send("command " + "\\0".join(args))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def java_reason() -> str | None:
    """Why Spark cannot run here (None: it can)."""
    try:
        from lakesink._java import ensure_java
        ensure_java()
    except Exception as exc:  # noqa: BLE001 - any failure means: no Java for Spark
        return f"no Java 17+ runtime for Spark: {exc}"
    return None


class Cluster:
    """A standalone master and `workers` workers (two 1-core executor slots, 1 GB each) under `root`."""

    def __init__(self, root: Path, workers: int = 2, start_timeout: float = 180.0):
        import pyspark

        self.root = Path(root)
        self.spark_home = str(Path(pyspark.__file__).parent)
        self.python = project_python()
        self.workers = workers
        self.start_timeout = start_timeout
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.daemon_conf = self.root / "conf-daemons"
        self.driver_conf = self.root / "conf"
        self.logs = self.root / "logs"
        self.sessions: set[int] = set()
        self.processes: dict[str, subprocess.Popen] = {}
        self.reaper: Reaper | None = None

    # -- environment

    def base_env(self) -> dict[str, str]:
        """What every process of the tier starts from: no credentials, this Spark, this Python."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_ENV)}
        env.update(SPARK_HOME=self.spark_home, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=self.python,
                   PYSPARK_DRIVER_PYTHON=self.python, JAVA_HOME=os.environ["JAVA_HOME"],
                   # No credentials from files or the instance metadata service either.
                   AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
                   AWS_EC2_METADATA_DISABLED="true")
        env["PATH"] = f"{os.environ['JAVA_HOME']}/bin{os.pathsep}{env.get('PATH', '')}"
        return env

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver process: the cluster's Spark defaults, the tests importable."""
        env = self.base_env()
        env["SPARK_CONF_DIR"] = str(self.driver_conf)
        env["PYTHONPATH"] = str(REPO)
        return env

    def _write_conf(self) -> None:
        self.daemon_conf.mkdir(parents=True, exist_ok=True)
        self.driver_conf.mkdir(parents=True, exist_ok=True)
        defaults = {
            "spark.master": self.master_url,
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.workers),
            "spark.driver.memory": "1g",
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.ui.enabled": "false",
            # The first job waits for both executors: tests that kill one need two.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        }
        (self.driver_conf / "spark-defaults.conf").write_text(
            "".join(f"{k} {v}\n" for k, v in defaults.items()))
        (self.driver_conf / "log4j2.properties").write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.stdout.ref = console\n"
            "appender.console.type = Console\nappender.console.name = console\n"
            "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
            # the standalone client warns about every executor it loses: expected in these tests
            "logger.client.name = org.apache.spark.deploy.client\nlogger.client.level = error\n")

    # -- life cycle

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        env = self.base_env()
        env.update(SPARK_CONF_DIR=str(self.daemon_conf), SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS)
        log = open(self.logs / f"{name}.log", "wb")
        process = subprocess.Popen([f"{self.spark_home}/bin/spark-class", *args], cwd=self.root, env=env,
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        log.close()
        self.track(process.pid)
        self.processes[name] = process
        return process

    def track(self, session: int) -> None:
        """Kill this session (a process started with start_new_session) with the cluster."""
        self.sessions.add(session)
        if self.reaper is not None:
            self.reaper.watch(session)

    def launch(self) -> Cluster:
        """Start the master and the workers side by side (workers retry until the master is up)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self._write_conf()
        self.reaper = Reaper()
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", "0"])
        for n in range(1, self.workers + 1):
            work = self.root / f"worker-{n}"
            work.mkdir(exist_ok=True)
            self._spawn(f"worker-{n}", ["org.apache.spark.deploy.worker.Worker", self.master_url,
                                        "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                                        "--cores", str(WORKER_SLOTS), "--memory", WORKER_MEMORY,
                                        "--work-dir", str(work)])
        return self

    def wait_ready(self) -> Cluster:
        """Wait until the master is up and every worker has registered with it."""
        try:
            deadline = time.monotonic() + self.start_timeout
            url = self._wait_for("master", r"Starting Spark master at (spark://\S+)", deadline)
            if url != self.master_url:  # the port was taken meanwhile and Spark moved on
                raise ClusterError(f"master started at {url}, not {self.master_url}")
            for n in range(1, self.workers + 1):
                self._wait_for(f"worker-{n}", r"Successfully registered with master", deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def start(self) -> Cluster:
        return self.launch().wait_ready()

    def _wait_for(self, name: str, pattern: str, deadline: float) -> str:
        log = self.logs / f"{name}.log"
        while time.monotonic() < deadline:
            match = re.search(pattern, log.read_text(errors="replace"))
            if match:
                return match.group(match.lastindex or 0)
            if self.processes[name].poll() is not None:
                raise ClusterError(f"{name} exited with {self.processes[name].returncode}; log {log}:\n"
                                   + log.read_text(errors="replace")[-3000:])
            time.sleep(0.2)
        raise ClusterError(f"{name} did not log {pattern!r} within {self.start_timeout:.0f} s; log {log}:\n"
                           + log.read_text(errors="replace")[-3000:])

    def stop(self) -> None:
        kill_sessions(self.sessions)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.reaper is not None:
            self.reaper.close()
            self.reaper = None

    def alive(self) -> list[int]:
        return processes_in_sessions(self.sessions)

    # -- what runs on it

    def executors(self, app_id: str | None = None) -> list[int]:
        """Pids of the executor JVMs running now (of one application, or of all)."""
        workers = {p.pid for name, p in self.processes.items() if name.startswith("worker-")}
        out = []
        for pid in processes_in_sessions(workers):
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args:
                continue
            if app_id is None or app_id.encode() == args[args.index(b"--app-id") + 1]:
                out.append(pid)
        return sorted(out)

    def python_workers(self, executor: int) -> list[int]:
        """Pids of the Python workers an executor JVM runs (forked by its pyspark daemon)."""
        children: dict[int, list[int]] = {}
        for pid in processes_in_sessions(self.sessions):
            try:
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(ppid, []).append(pid)
        return sorted(w for daemon in children.get(executor, []) for w in children.get(daemon, []))
