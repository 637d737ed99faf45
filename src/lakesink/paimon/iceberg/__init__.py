"""Iceberg metadata of Paimon tables (`metadata.iceberg.storage` `table-location` or `hadoop-catalog`):
the table's schema as Iceberg types (`schema`), a file's statistics as Iceberg metrics (`metrics`),
Iceberg's Avro manifests (`avro_files`), the table metadata document (`metadata`), and `sync.refresh`,
which makes `<table>/metadata/` (or `<warehouse>/iceberg/<db>/<table>/metadata/`) describe the latest
snapshot (docs/iceberg.md). Commits reach it through
`commit.hooks.iceberg`, set by `lakesink.paimon`."""

from __future__ import annotations

import logging

from .sync import check, check_new, enabled, refresh

log = logging.getLogger(__name__)

__all__ = ["after_commit", "check", "check_new", "enabled", "refresh"]


def after_commit(table) -> None:
    """After a snapshot landed: bring the Iceberg metadata up to it. Derived state: a failure is
    logged, never raised (the snapshot is committed; the next commit or maintenance repairs it)."""
    try:
        if enabled(table):
            refresh(table)
    except Exception:
        log.exception("Iceberg metadata of %s not refreshed (the next commit or `lakesink expire` "
                      "repairs it)", table.table_path)
