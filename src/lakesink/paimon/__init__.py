"""The Paimon connector over pypaimon: tables, data files, commits, keyed tables, compaction,
reads, writes, catalogs and maintenance, one package each (docs/design.md has the map)."""

from .files.datafiles import StagedFile, TableLayout, describe_parquet
from .commit.target import PaimonTarget, TableSpec
from .commit import hooks as _hooks
from . import iceberg as _iceberg
from . import maintenance
from .keyed import dynamic as _dynamic
from .compaction import merge_on_write as _merge_on_write

_hooks.maintenance = maintenance  # every commit runs background maintenance, a layer above it, through this
_hooks.dynamic_index = _dynamic  # dynamic-bucket commits write their hash index through this
_hooks.iceberg = _iceberg  # commits of tables with metadata.iceberg.storage refresh their Iceberg metadata
_hooks.merge_on_write = _merge_on_write  # deletion-vector tables leave level 0 at each commit through this

__all__ = ["PaimonTarget", "TableSpec", "StagedFile", "TableLayout", "describe_parquet"]
