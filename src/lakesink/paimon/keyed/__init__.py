"""Primary-key tables: the key-value file layout and metadata, which runs of a bucket a compaction
merges (Paimon's universal compaction), and how the versions of one key merge (merge engines)."""
