"""The session's Paimon catalog: kept in the Spark conf, handed to the data source at registration.

`lakesink.session(catalog={...})` / `lakesink.register(spark, catalog={...})`
store the catalog options as `spark.lakesink.catalog.<key>` in the session's
runtime conf (so `spark-submit --conf spark.lakesink.catalog.warehouse=...`
works too). The Python API reads them from there. Spark passes no session conf
to a Python data source (Spark 4.3: only the reader's or writer's own options),
so `register` bakes the options into the registered data source class, which
Spark pickles by value into every planner and commit process.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..paimon.catalog.catalog import Catalog, ResolvedTable, open_catalog, resolve
from ..paimon.catalog.config import CatalogConfig
from ..paimon.catalog.names import is_path

CONF_PREFIX = "spark.lakesink.catalog."


def catalog_options(spark) -> dict[str, str]:
    """The catalog options stored on the session (empty: no catalog)."""
    return {k[len(CONF_PREFIX):]: v for k, v in spark.conf.getAll.items() if k.startswith(CONF_PREFIX)}


def session_catalog(spark) -> Catalog | None:
    options = catalog_options(spark)
    return open_catalog(CatalogConfig.parse(options)) if options else None


def set_catalog(spark, options: Mapping[str, object]) -> None:
    """Store `options` as the session's catalog (`{}`: none). The catalog is opened first: bad
    options or an unreachable database fail here and leave the session as it was."""
    config = CatalogConfig.parse(options) if options else None
    if config is not None:
        open_catalog(config)
    new = dict(config.items) if config is not None else {}
    # Set before unsetting: where setting is refused (a Spark Declarative Pipeline's definition
    # files may not call spark.conf.set), the session keeps the catalog it had.
    for key, value in new.items():
        spark.conf.set(CONF_PREFIX + key, value)
    for key in catalog_options(spark):
        if key not in new:
            spark.conf.unset(CONF_PREFIX + key)


def resolve_for(spark, text: str, purpose: str = "read") -> ResolvedTable:
    """The one rule (paimon.catalog.catalog.resolve) with the session's catalog; a path reads no conf."""
    if is_path(str(text)):
        return resolve(text, None, purpose)
    return resolve(text, session_catalog(spark), purpose)


def with_catalog(source_class: type, options: Mapping[str, str] | None) -> type:
    """`source_class` carrying the catalog options as a class attribute.

    The subclass is not importable by its name, so Spark's cloudpickle sends it by value (its
    attributes included) to the Python processes that plan, write and commit.
    """
    if not options:
        return source_class
    return type(source_class.__name__, (source_class,), {
        "catalog_options": dict(options),
        "__module__": source_class.__module__,
        "__qualname__": f"{source_class.__qualname__}.with_catalog",
    })
