"""pypaimon's own write of one Arrow table, from one process: the peer the benchmarks compare with."""

from __future__ import annotations

import time


def pypaimon_write(warehouse: str, data, options: dict | None = None, primary_keys=None,
                   table_options: dict | None = None) -> float:
    """Create `db.t` in a pypaimon filesystem catalog at `warehouse` and write `data` in one
    batch commit; the seconds of the write and commit (table creation not timed)."""
    from pypaimon.catalog.catalog_factory import CatalogFactory
    from pypaimon.schema.schema import Schema

    catalog = CatalogFactory.create({"warehouse": warehouse, **(options or {})})
    catalog.create_database("db", True)
    catalog.create_table("db.t", Schema.from_pyarrow_schema(data.schema, primary_keys=primary_keys,
                                                            options=table_options), False)
    table = catalog.get_table("db.t")
    start = time.perf_counter()
    builder = table.new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    write.write_arrow(data)
    commit.commit(write.prepare_commit())
    write.close()
    commit.close()
    return time.perf_counter() - start
