"""Tables by name: the catalogs (filesystem, JDBC), names and paths, catalog options, the rows
lakesink writes in a JDBC catalog, and CREATE / REPLACE TABLE AS (staged tables, in-place writes
with name reservations, cleanup of interrupted ones)."""
