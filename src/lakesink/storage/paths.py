"""Paths and storage option keys: one normal form every component compares and stores.

A plain path is local and made absolute; `file:` URIs are local too; any other
scheme (`s3://bucket/wh`) is remote.
"""

from __future__ import annotations

import os

# In the name of a CREATE / REPLACE TABLE AS table's staging directory (`.<name><infix><token>`,
# beside the final one): what cleanup and derived metadata recognise such a directory by.
STAGING_INFIX = ".lakesink-staging-"

# Spark hands a Python data source its options with lower-cased keys; pypaimon
# looks these up by their exact (camel-case) spelling.
_CAMEL_CASE_KEYS = {k.lower(): k for k in (
    "fs.s3.accessKeyId", "fs.s3.accessKeySecret", "fs.s3.securityToken",
    "fs.oss.accessKeyId", "fs.oss.accessKeySecret", "fs.oss.securityToken")}

STORAGE_PREFIXES = ("fs.", "s3.", "s3a.")


def canonical_key(key: str) -> str:
    """A storage option's key as pypaimon spells it."""
    return _CAMEL_CASE_KEYS.get(key.lower(), key)


def is_storage_key(key: str) -> bool:
    return key.startswith(STORAGE_PREFIXES)


def normalize(path: str) -> str:
    """The canonical spelling of a path: local paths absolute, no trailing slash."""
    path = str(path)
    if "://" not in path and not path.startswith("file:"):
        path = os.path.abspath(path)
    return path.rstrip("/") or "/"


def local_path(path: str) -> str | None:
    """The local file-system path of `path`, or None for a remote store."""
    path = str(path)
    if path.startswith("file://"):
        return path[len("file://"):]
    if path.startswith("file:"):
        return path[len("file:"):]
    if "://" not in path:
        return path
    return None


def is_local(path: str) -> bool:
    return local_path(path) is not None


def scheme(path: str) -> str:
    return "file" if is_local(path) else str(path).split("://", 1)[0].lower()


def relative(path: str, directory: str) -> str:
    """`path` relative to `directory` (both as `list_dir` spells them)."""
    path, directory = str(path), normalize(directory)
    if not is_local(directory):
        directory = directory.split("://", 1)[1]
        path = path.split("://", 1)[-1]
    return path[len(directory):].lstrip("/")
