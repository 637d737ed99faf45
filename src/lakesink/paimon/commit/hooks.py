"""What a commit calls in the layers above it, without importing them.

Maintenance, the dynamic-bucket hash index, Iceberg metadata and the merge on write of
deletion-vector tables all use commits; a commit only needs to reach them after (or inside)
one snapshot. `lakesink.paimon`, imported before any of its modules, puts each here; a hook
left None (a commit module imported on its own, in a unit test) is skipped.
"""

from __future__ import annotations

maintenance = None     # paimon.maintenance: background expiry, tags, retention after each commit
dynamic_index = None   # paimon.keyed.dynamic: the hash index of dynamic-bucket tables, and its conflict check
iceberg = None         # paimon.iceberg: Iceberg metadata of tables with metadata.iceberg.storage
merge_on_write = None  # paimon.compaction.merge_on_write: deletion-vector tables leave level 0 at each commit


def check_derived(table, branch: str | None = None) -> None:
    """Before anything moves: refuse a table whose derived metadata (Iceberg) cannot follow it."""
    if iceberg is not None and branch is None:
        iceberg.check(table, history=False)  # the write's planning checked the older schemas


def refresh_derived(table, branch: str | None = None) -> None:
    """After a snapshot of main landed: its derived metadata (Iceberg) follows. Never raises: the
    snapshot is committed, and the next commit or maintenance repairs what fails here."""
    if iceberg is not None and branch is None:
        iceberg.after_commit(table)
