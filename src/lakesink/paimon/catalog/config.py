"""A catalog's options, checked once, and the connection pypaimon opens with them.

`CatalogConfig` is hashable and picklable: Spark's tasks and commit processes carry it, and
`catalog.open_catalog` keeps one open catalog per config and process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import options as registry
from ... import storage
from ...errors import ConfigurationError, DatabaseConnectionError
from ..table import catalog_lock
from ..table.catalog_lock import first_line

if TYPE_CHECKING:
    from .names import TableName

JDBC_SCHEMES = ("jdbc:sqlite:", "jdbc:postgresql:", "jdbc:mysql:")
# Options of the JDBC catalog lock besides lock.enabled (table/catalog_lock.py).
LOCK_KEYS = ("lock-acquire-timeout", "lock-check-max-sleep", "lock-key-max-length")


@dataclass(frozen=True)
class CatalogConfig:
    """Checked catalog options (hashable, picklable: tasks and commit processes carry it)."""

    items: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> CatalogConfig:
        opts = registry.catalog_options(raw)
        if not opts.get("warehouse"):
            raise ConfigurationError("Catalog option 'warehouse' is required: the root of the catalog's tables, "
                                     "e.g. {'warehouse': '/data/wh'}.", option="warehouse")
        metastore = opts.get("metastore", "filesystem")
        jdbc_keys = sorted(k for k in opts if k == "uri" or k.startswith(registry.CATALOG_FAMILY_PREFIX)
                           or k in ("catalog-key", "sync-all-properties") + LOCK_KEYS
                           or (k == "lock.enabled" and opts[k] == "true"))
        if metastore == "filesystem" and jdbc_keys:
            raise ConfigurationError(
                f"Catalog option(s) {', '.join(jdbc_keys)} belong to a JDBC catalog, but metastore is "
                "'filesystem': add 'metastore': 'jdbc'.", option=jdbc_keys[0])
        if metastore == "jdbc":
            uri = opts.get("uri")
            if not uri:
                raise ConfigurationError("A JDBC catalog needs option 'uri', e.g. 'jdbc:sqlite:/data/wh/catalog.db' "
                                         "or 'jdbc:postgresql://host:5432/db'.", option="uri")
            if not uri.startswith(JDBC_SCHEMES):
                raise ConfigurationError(f"Catalog option 'uri' has invalid value {uri!r}: expected a "
                                         f"{', '.join(s + '...' for s in JDBC_SCHEMES)} URI.", option="uri")
        opts["warehouse"] = storage.normalize(opts["warehouse"])
        return cls(tuple(sorted(opts.items())))

    @property
    def options(self) -> dict[str, str]:
        return dict(self.items)

    @property
    def metastore(self) -> str:
        return self.options.get("metastore", "filesystem")

    @property
    def name(self) -> str:
        return self.options.get("name", registry.option("name").default)

    @property
    def warehouse(self) -> str:
        return self.options["warehouse"]

    @property
    def fs_options(self) -> dict[str, str]:
        """The storage options among the catalog's: how to reach the warehouse's files."""
        return {k: v for k, v in self.items if registry.is_storage_option(k)}

    @property
    def lock_enabled(self) -> bool:
        """Whether commits of tables resolved by name take the JDBC catalog lock: `lock.enabled`, or
        unset, Paimon's default (on for a warehouse on an object store)."""
        if self.metastore != "jdbc":
            return False
        value = self.options.get("lock.enabled")
        return catalog_lock.default_enabled(self.warehouse) if value is None else value == "true"

    def lock(self, name: TableName) -> catalog_lock.CatalogLock | None:
        """The catalog lock of table `name`, if this catalog guards commits."""
        if not self.lock_enabled:
            return None
        opts = self.options
        typed = {key: registry.table_value(opts, key) for key in LOCK_KEYS}
        connection = tuple(sorted((k, v) for k, v in self.items
                                  if k == "uri" or k.startswith(registry.CATALOG_FAMILY_PREFIX)))
        return catalog_lock.CatalogLock(
            connection, opts.get("catalog-key", registry.option("catalog-key").default), name.database,
            name.table, typed["lock-acquire-timeout"], typed["lock-check-max-sleep"],
            typed["lock-key-max-length"])

    def fs_options_of(self, name: TableName) -> dict[str, str]:
        """How to reach table `name`: the storage options, and its catalog lock when there is one
        (it travels with them to every process that commits the table)."""
        lock = self.lock(name)
        return self.fs_options if lock is None else {**self.fs_options, catalog_lock.OPTION: lock.to_option()}

    def pypaimon_options(self) -> dict[str, str]:
        return {k: v for k, v in self.items if k != "name"}

    def describe(self) -> str:
        """For messages: never the password."""
        where = self.options.get("uri") if self.metastore == "jdbc" else None
        return f"{self.metastore} catalog {self.name!r}" + (f" ({where})" if where else "") + \
            f", warehouse {self.warehouse}"


def connect(config: CatalogConfig):
    """A new pypaimon catalog (for a JDBC catalog: a connection of its own). Unreachable → a
    `DatabaseConnectionError` naming the database, never its password."""
    from pypaimon import CatalogFactory
    try:
        return CatalogFactory.create(config.pypaimon_options())
    except ImportError as exc:
        raise ConfigurationError(f"{config.describe()}: {exc} (pip install 'lakesink[postgres]' for "
                                 "PostgreSQL).") from exc
    except Exception as exc:  # noqa: BLE001 - DB-API drivers raise their own error classes
        if config.metastore == "jdbc":
            raise DatabaseConnectionError(f"Cannot reach the catalog database of the {config.describe()}: "
                                          f"{first_line(exc)}. Nothing was changed.") from exc
        raise ConfigurationError(f"Cannot open the {config.describe()}: {first_line(exc)}") from exc

