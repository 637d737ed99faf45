"""Paimon branches of a table (`lakesink.branch.create`, `list`, `delete`, `fast_forward`).

A branch is Paimon's: `<table>/branch/branch-<name>/` holds its own snapshots, schemas and
tags; data files are shared with main. Write one with `options={"branch": name}` (or
`.option("branch", name)`), read it with `lakesink.read(spark, table, branch=name)`
(docs/branches.md). `table` is a path, or a name in the `catalog` (catalog options), else in
the active Spark session's catalog.

>>> lakesink.branch.create("shop.orders", "audit")                      # doctest: +SKIP
>>> lakesink.branch.fast_forward("shop.orders", "audit")                # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["create", "list", "delete", "fast_forward"]

_list = list


def _table(table: str, catalog: Mapping[str, object] | None, fs_options: Mapping[str, str] | None):
    """(path, storage options) of a path or a table name."""
    from .paimon.catalog.catalog import is_path, open_catalog, resolve
    opened = None
    if not is_path(str(table)):
        if catalog:
            opened = open_catalog(catalog)
        else:  # the active Spark session's catalog, if a session runs (pyspark only then)
            import sys
            if "pyspark" in sys.modules:
                from pyspark.sql import SparkSession
                from .spark.catalog import session_catalog
                spark = SparkSession.getActiveSession()
                opened = session_catalog(spark) if spark is not None else None
    resolved = resolve(table, opened, "locate")
    return resolved.path, resolved.with_fs_options(dict(fs_options) if fs_options else None) or None


def create(table: str, name: str, *, from_tag: str | None = None, from_snapshot: int | None = None,
           empty: bool = False, catalog: Mapping[str, object] | None = None,
           fs_options: Mapping[str, str] | None = None) -> int | None:
    """Create branch `name` of `table`; returns the snapshot id it starts at (None: empty).

    By default the branch starts at main's latest snapshot; `from_tag` (Paimon's way: the tag
    is copied into the branch), `from_snapshot` (an id), or `empty=True` (Paimon's empty
    branch: main's schema, no rows) choose otherwise."""
    from .paimon.maintenance.branches import create_branch
    path, fs = _table(table, catalog, fs_options)
    snapshot = create_branch(path, name, from_tag=from_tag, from_snapshot=from_snapshot, empty=empty,
                             fs_options=fs)
    return snapshot.id if snapshot is not None else None


def list(table: str, *, catalog: Mapping[str, object] | None = None,  # noqa: A001 (the namespace's verb)
         fs_options: Mapping[str, str] | None = None) -> _list[str]:
    """The names of `table`'s branches (main not included), sorted."""
    from .paimon.maintenance.branches import list_branches
    path, fs = _table(table, catalog, fs_options)
    return list_branches(path, fs)


def delete(table: str, name: str, *, catalog: Mapping[str, object] | None = None,
           fs_options: Mapping[str, str] | None = None) -> None:
    """Delete branch `name`; files only it used become orphans (`lakesink remove-orphans`)."""
    from .paimon.maintenance.branches import delete_branch
    path, fs = _table(table, catalog, fs_options)
    delete_branch(path, name, fs)


def fast_forward(table: str, name: str, *, catalog: Mapping[str, object] | None = None,
                 fs_options: Mapping[str, str] | None = None) -> int:
    """Main becomes the branch's state (Paimon's fast-forward): main's snapshots from the
    branch's earliest snapshot on are replaced by the branch's. Returns main's new latest
    snapshot id."""
    from .paimon.maintenance.branches import fast_forward as _fast_forward
    path, fs = _table(table, catalog, fs_options)
    return _fast_forward(path, name, fs).id

