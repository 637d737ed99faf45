"""What interrupted CREATE TABLE AS jobs leave in a catalog's databases, and its removal."""

from __future__ import annotations

import os
import shutil

from . import reservations
from .names import TableName
from .staged_table import MARKER as STAGED_MARKER
from .staged_table import STAGING_INFIX, abandoned, clean_staging, local_dir, read_marker


def clean_catalog_staging(catalog, older_than_s: float = 3600.0, dry_run: bool = False) -> list[str]:
    """What interrupted CREATE TABLE AS jobs left in the catalog's databases: hidden staged tables
    whose job is gone, and (JDBC) tables moved in place whose row never committed. A marker left in
    a table that did enter the catalog is removed too (it is not listed)."""
    if reservations.applies(catalog.config):  # object store: CREATE TABLE AS reserved names (catalog_inplace)
        return reservations.clean(catalog, older_than_s, dry_run)
    removed = []
    for database in catalog.list_databases():
        directory = local_dir(catalog.database_path(database))
        removed += clean_staging(directory, older_than_s, dry_run)
        if not catalog.is_jdbc or not os.path.isdir(directory):
            continue
        for entry in sorted(os.listdir(directory)):
            full = os.path.join(directory, entry)
            if entry.startswith(".") or STAGING_INFIX in entry or not os.path.isdir(full):
                continue
            marker = read_marker(full)
            if marker is None:
                continue
            if catalog.is_registered(TableName(database, entry)):
                if not dry_run:
                    unlink_quietly(os.path.join(full, STAGED_MARKER))
            elif abandoned(marker, older_than_s)[0]:
                removed.append(full)
                if not dry_run:
                    shutil.rmtree(full, ignore_errors=True)
    return removed


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
