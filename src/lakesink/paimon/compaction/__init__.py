"""Compaction: the aggregators that pick work (small files of append tables, sorted runs of
primary-key buckets), the tasks that rewrite files (`rewrite`, `lsm`), where their outputs go,
the COMPACT commit (`target`), and the wiring into the sinks (`wiring`)."""
