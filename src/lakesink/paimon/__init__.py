"""The Paimon connector: thin adapters from the commit protocol to pypaimon."""

from .datafiles import StagedFile, TableLayout, describe_parquet
from .target import PaimonTarget, TableSpec

__all__ = ["PaimonTarget", "TableSpec", "StagedFile", "TableLayout", "describe_parquet"]
