"""Data files: a Parquet file's Paimon metadata (`DataFileMeta`) read from its footer, where a
file goes in the table, and the bytes of a row."""
