"""Reading tables: planning scans (snapshots, time travel, pruning) and the changelog streaming
reads follow."""
