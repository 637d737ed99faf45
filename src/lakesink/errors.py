"""One exception family for everything lakesink raises on purpose.

`retryable` tells a caller whether running the same operation again may succeed.
`CommitStateUnknownError` is the one to respect: the snapshot may have landed, so
nothing it wrote may be deleted (the next commit of the same identity resolves it).
"""

from __future__ import annotations

from collections.abc import Iterable


class LakesinkError(Exception):
    """Base of all lakesink errors.

    Structured fields, where they apply (None otherwise): `table` (path or name),
    `option`, `snapshot`, `commit_user`, `identifier`.
    """

    retryable = False

    def __init__(self, message: str = "", *, table: str | None = None, option: str | None = None,
                 snapshot: int | None = None, commit_user: str | None = None, identifier: int | None = None):
        super().__init__(message)
        self.table, self.option, self.snapshot = table, option, snapshot
        self.commit_user, self.identifier = commit_user, identifier


class ConfigurationError(LakesinkError, ValueError):
    """An option, mode or argument is wrong. Nothing was written."""


class UnknownOptionError(ConfigurationError):
    def __init__(self, key: str, known: Iterable[str], kind: str | None = None, valid: str | None = None):
        """`kind` ("catalog") and `valid` (the accepted keys, as text) for options of one family."""
        self.key = key
        close = _suggestions(key, list(known))
        hint = f" Did you mean {', '.join(repr(k) for k in close)}?" if close else ""
        if kind is not None:
            super().__init__(f"Unknown {kind} option {key!r}.{hint} Valid {kind} options: {valid}.", option=key)
            return
        super().__init__(
            f"Unknown option {key!r}.{hint} Lakesink options are listed in docs/options.md; "
            "Paimon table options are passed through by their Paimon names.", option=key
        )


class InvalidOptionError(ConfigurationError):
    def __init__(self, key: str, value: object, expected: str):
        self.key, self.value = key, value
        super().__init__(f"Option {key!r} has invalid value {value!r}: expected {expected}.", option=key)


class UnsupportedOptionError(ConfigurationError):
    """A name known from Spark, Delta or Paimon that lakesink refuses where it was given; the
    message points at lakesink's own option."""

    def __init__(self, key: str, pointer: str):
        self.key = key
        super().__init__(f"Option {key!r} is not supported here. {pointer}", option=key)


class SchemaMismatchError(LakesinkError, ValueError):
    """The data's schema does not fit the table. Nothing was written."""


class MultipleMatchError(LakesinkError, ValueError):
    """A MERGE matched one target row with several source rows that a clause would apply to
    (Delta's rule). Nothing was changed."""


class UnsupportedTableError(LakesinkError):
    """The table kind cannot be written by the chosen path (the message names one that can)."""


class NotAPaimonTableError(LakesinkError):
    """The path holds something that is not a Paimon table."""


class TableAlreadyExistsError(LakesinkError):
    """A create found the table already there."""


class AmbiguousTableNameError(ConfigurationError):
    """A table name is also an existing relative path holding a Paimon table. Nothing was read or written."""


class CatalogError(LakesinkError):
    """A catalog (filesystem or JDBC) cannot answer for a table name. Nothing was changed."""


class TableNotFoundError(CatalogError, ValueError):
    """A name the catalog does not know (or a database it does not hold)."""


class DatabaseNotFoundError(TableNotFoundError):
    """The database of a table name does not exist in the catalog."""


class CatalogInconsistencyError(CatalogError):
    """The catalog and the storage disagree: a table in the catalog without files, or a table's
    files without a catalog entry (e.g. left by an interrupted CREATE TABLE AS)."""


class SnapshotNotFoundError(LakesinkError, ValueError):
    """A snapshot asked for (by id, time or stream position) does not exist or has expired."""


class TagNotFoundError(LakesinkError, ValueError):
    """A tag asked for does not exist."""


class ConsumerNotFoundError(LakesinkError, ValueError):
    """A streaming consumer (`consumer/consumer-<id>`) asked for does not exist."""


class UnsafePublicationError(ConfigurationError):
    """The table's storage has no atomic create and no lock was configured."""


class CommitFailedError(LakesinkError):
    """The commit definitely did not land; its files were removed."""

    retryable = True


class CommitStateUnknownError(LakesinkError):
    """The commit may or may not have landed; no file was deleted."""

    retryable = True


class CommitConflictError(CommitFailedError):
    """Another writer changed what this commit depends on."""


class RestoreError(LakesinkError):
    """Durable state could not be restored (e.g. its data files are gone)."""


class BackgroundCommitError(LakesinkError):
    """A pipelined (background) commit failed; its batch stays pending and is retried on restart."""

    retryable = True


class CheckpointMismatchError(LakesinkError):
    """A checkpoint belongs to another table or another sink."""


class EnvironmentSetupError(LakesinkError):
    """Something lakesink needs on this machine is missing (e.g. a Java runtime for Spark)."""


class JobAbortedError(CommitFailedError):
    """A task found its job's staging gone: the job was aborted; nothing of it is committed."""


class CorruptStateError(LakesinkError):
    """A durable state file is unreadable or of an unknown format version."""


def _suggestions(key: str, known: list[str]) -> list[str]:
    """Known keys the user probably meant: same words with other separators, or a typo away."""
    import difflib

    close = {k for k in known if _similar(k, key)}
    by_lower = {k.lower(): k for k in known}
    close.update(by_lower[m] for m in difflib.get_close_matches(key.lower(), list(by_lower), n=3, cutoff=0.85))
    return sorted(close)


def _similar(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    return a.replace("-", ".").replace("_", ".") == b.replace("-", ".").replace("_", ".") or (
        len(a) > 4 and (a in b or b in a)
    )


class MaintenanceError(LakesinkError):
    """Background table maintenance (expiry, tags, ...) failed after an earlier commit.

    Raised once, by the next commit to the table, so the failure is never silent.
    The table itself is intact: maintenance only deletes what no snapshot needs.
    """

    retryable = True


class DatabaseConnectionError(LakesinkError):
    """A database could not be reached or refused the credentials. Nothing was written."""

    retryable = True


class UnsupportedTypeError(SchemaMismatchError):
    """A column's type has no exact counterpart in the target. Nothing was written."""


class DuplicateKeyError(CommitFailedError):
    """An upsert's rows hold one key twice (or a null key); the commit did not land."""

    retryable = False
