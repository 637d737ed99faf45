"""A Paimon table on storage: opening, creating and checking it, its schema and how it evolves,
the atomic publication of its files (snapshots, schemas; a JDBC catalog's commit lock), and
pypaimon where lakesink needs more (older manifests, Parquet laid out as Paimon's Java writer)."""
