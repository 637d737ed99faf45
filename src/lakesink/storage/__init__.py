"""The one storage layer: paths, file systems built from options, atomic writes, listings.

Every component (commits, pending state, staging, maintenance, the CLI) reaches
files through here, so the options that give access to a store (`fs.s3.endpoint`,
credentials, path style, ...) reach every call. Files are read and written with
pypaimon's `FileIO` (the storage library of the tables themselves); listings and
small state documents use the `pyarrow.fs` file system that FileIO wraps, built
from the same options.

`paths` (one normal form: `normalize`), `files` (atomic writes, listings), `documents`
(the versioned JSON documents of lakesink's durable state), `s3`
(S3 keys in every spelling, S3 schemes, the S3 client options) need neither pypaimon nor pyarrow to import; `fileio`
(pypaimon's FileIO) is loaded on first use of `storage.file_io`, so the layers
that only handle paths and local state (the commit protocol) stay light.
"""

from __future__ import annotations

from .documents import DocumentKind
from .files import FileEntry, arrow_fs, list_dir, list_names, new_output, replace_file, write_atomically
from .paths import STORAGE_PREFIXES, canonical_key, is_local, is_storage_key, local_path, normalize, relative, scheme
from .s3 import (S3_ATTEMPTS, S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT, S3_SCHEMES, S3_SETTINGS, s3_client_options,
                 s3_setting, s3a_options)

_LAZY = {"file_io": "fileio"}  # name -> submodule, imported on first use (it imports pypaimon)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["DocumentKind", "FileEntry", "STORAGE_PREFIXES", "S3_ATTEMPTS", "S3_CONNECT_TIMEOUT", "S3_REQUEST_TIMEOUT", "S3_SCHEMES",
           "S3_SETTINGS", "arrow_fs", "canonical_key", "file_io", "is_local", "is_storage_key", "list_dir",
           "list_names", "local_path", "new_output", "normalize", "relative", "replace_file", "s3_client_options",
           "s3_setting", "s3a_options", "scheme", "write_atomically"]
