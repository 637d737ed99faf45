"""The Paimon connector over pypaimon: tables, data files, commits, keyed tables, compaction,
reads, writes, catalogs and maintenance, one package each (docs/design.md has the map).

Importing it loads none of them: a Spark task imports only what it uses (`PaimonTarget` and
the rest below are loaded on first access)."""

from importlib import import_module

from .commit import hooks as _hooks

# What a commit calls in the layers above it, imported when a commit first needs it.
_hooks.install("maintenance", "lakesink.paimon.maintenance")
_hooks.install("dynamic_index", "lakesink.paimon.keyed.dynamic")
_hooks.install("iceberg", "lakesink.paimon.iceberg")
_hooks.install("merge_on_write", "lakesink.paimon.compaction.merge_on_write")

_EXPORTS = {"PaimonTarget": ".commit.target", "TableSpec": ".commit.target", "StagedFile": ".files.datafiles",
            "TableLayout": ".files.datafiles", "describe_parquet": ".files.datafiles"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
