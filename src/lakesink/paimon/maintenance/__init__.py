"""Table maintenance: what Paimon's committer does after each commit, and more on demand.

After each successful commit (see `after_commit`) a background thread, one per
table in this process and one run at a time, does, with Paimon's options:

* automatic tags (`tag.automatic-creation=process-time`, `tag.creation-period`,
  `tag.num-retained-max`, `tag.default-time-retained`);
* partition expiry (`partition.expiration-time`, `partition.timestamp-formatter`,
  `partition.timestamp-pattern`) as an OVERWRITE commit dropping the partitions;
* snapshot expiry (`snapshot.num-retained.min` 10, `snapshot.num-retained.max`
  unlimited, `snapshot.time-retained` 1 h, `snapshot.expire.limit` 50 per run);
* consumer expiry (`consumer.expiration-time`);
* for a table of a JDBC catalog on an object store: that catalog's dead CREATE
  TABLE AS reservations and their files, at most every 10 min per process
  (catalog_sweep.py).

A failure is logged and stored in `_lakesink/maintenance-failure.json`; the next
commit to the table (from any process) raises it as `MaintenanceError`.

How snapshot expiry stays safe:

* It never expires the snapshot a registered consumer reads next
  (`consumer/consumer-<id>`), nor fewer than `snapshot.num-retained.min` (>= 1).
* Deleted: manifest lists and manifests of expired snapshots that neither the
  first retained snapshot nor a tag lists, and data files a DELETE entry in
  (first expired, first retained] removed, unless a tag still holds them. Every
  later snapshot is built from the first retained one, so nothing deleted can be
  needed by a later snapshot. Files of a commit in flight are never candidates:
  a commit's new manifests and data files are in no expired snapshot, and an
  in-flight commit based on an expired snapshot cannot publish (its snapshot id
  is taken) and re-reads the latest one.
* Commit-user markers (`_lakesink/commit-users/`) whose scan would start in the
  expired range first get the highest identifier their user committed there,
  so `identity.last_committed` stays right after the snapshots are gone.
* Crash safety: the plan (range and files) is written to
  `_lakesink/expiry.json` before anything is deleted; then the EARLIEST hint
  moves to the first retained snapshot, snapshot files are deleted oldest
  first, then the planned files, then the plan. The table reads exactly at every
  step, and the next run (or `rollback`) first finishes a plan left behind.
"""

from .background import after_commit, maintain, maintenance_for, raise_failure, record_failure
from .expiry import ExpiryReport, expire_snapshots, finish_pending_expiry
from .inspect import files, history, verify
from .metadata import MaintenanceOptions, Metadata, list_tags, open_table
from ..commit.live_files import live_entries
from .orphans import remove_orphans
from .retention import create_automatic_tags, expire_consumers, expire_partitions, expire_tags_by_time
from .tags import RollbackPlan, create_tag, delete_tag, plan_rollback, rollback, rollback_with_plan
from .consumers import ConsumerInfo, clear_consumers, list_consumers, reset_consumer
from .staging import StagingEntry, clean_staging
from .branches import (branch_heads, create_branch, delete_branch, fast_forward as fast_forward_branch,
                       list_branches)

__all__ = ["after_commit", "maintain", "maintenance_for", "raise_failure", "record_failure", "ExpiryReport",
           "expire_snapshots", "finish_pending_expiry", "files", "history", "verify", "MaintenanceOptions",
           "Metadata", "list_tags", "live_entries", "open_table", "remove_orphans", "create_automatic_tags",
           "expire_consumers", "expire_partitions", "expire_tags_by_time", "create_tag", "delete_tag", "rollback",
           "RollbackPlan", "plan_rollback", "rollback_with_plan", "ConsumerInfo", "list_consumers",
           "reset_consumer", "clear_consumers", "StagingEntry", "clean_staging", "branch_heads", "create_branch",
           "delete_branch", "fast_forward_branch", "list_branches"]
