"""What a commit calls in the layers above it, without importing them.

Maintenance, the dynamic-bucket hash index, Iceberg metadata and the merge on write of
deletion-vector tables all use commits; a commit only needs to reach them after (or inside)
one snapshot. `lakesink.paimon`, imported before any of its modules, names the module of each
(`install`); it is imported on first use, so a process that never commits (a Spark task, a
reader) never loads them. A hook nobody installed (a commit module imported on its own, in a
unit test) is None and skipped.
"""

from __future__ import annotations

import importlib

HOOKS = {
    "maintenance": "background expiry, tags, retention after each commit",
    "dynamic_index": "the hash index of dynamic-bucket tables, and its conflict check",
    "iceberg": "Iceberg metadata of tables with metadata.iceberg.storage",
    "merge_on_write": "deletion-vector tables leave level 0 at each commit",
}
_modules: dict[str, str] = {}


def install(name: str, module: str) -> None:
    """Hook `name` is the module named `module`, imported when a commit first reaches it."""
    if name not in HOOKS:
        raise ValueError(f"no commit hook {name!r}; hooks: {sorted(HOOKS)}")
    _modules[name] = module
    globals().pop(name, None)


def _hook(name: str):
    module = globals().get(name)
    if module is None and name in _modules:
        module = globals()[name] = importlib.import_module(_modules[name])
    return module


def __getattr__(name: str):
    if name in HOOKS:
        return _hook(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_derived(table, branch: str | None = None) -> None:
    """Before anything moves: refuse a table whose derived metadata (Iceberg) cannot follow it."""
    iceberg = _hook("iceberg")
    if iceberg is not None and branch is None:
        iceberg.check(table, history=False)  # the write's planning checked the older schemas


def refresh_derived(table, branch: str | None = None) -> None:
    """After a snapshot of main landed: its derived metadata (Iceberg) follows. Never raises: the
    snapshot is committed, and the next commit or maintenance repairs what fails here."""
    iceberg = _hook("iceberg")
    if iceberg is not None and branch is None:
        iceberg.after_commit(table)
