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


class UnsupportedStatementError(ConfigurationError):
    """A SQL statement `lakesink.sql` cannot run on a catalog table; the message says what works."""

    def __init__(self, statement: str, table: str, instead: str):
        self.statement = statement
        super().__init__(f"{statement} on {table} is not supported by lakesink.sql: {instead} Nothing was "
                         "changed.", table=table)


class SchemaMismatchError(LakesinkError, ValueError):
    """The data's schema does not fit the table. Nothing was written."""


class NullValueError(SchemaMismatchError, ConfigurationError):
    """A row holds null in a column the table declares NOT NULL (every primary-key column, and
    any the table's creator declared so). Enforced as Delta enforces NOT NULL: a nullable
    DataFrame column is accepted, and the write fails when a null actually arrives, before its
    commit. `column`: the column. Nothing was written."""

    def __init__(self, message: str = "", *, column: str | None = None, table: str | None = None):
        super().__init__(message, table=table)
        self.column = column

    @staticmethod
    def text(column: str, primary_key: bool = False) -> str:
        """The message for `column` (also raised as text inside Spark jobs: `from_text` reads it back)."""
        if primary_key:
            return (f"primary-key column {column!r} is null in some row; primary-key columns must not be null. "
                    "Nothing was written.")
        return (f"NOT NULL column {column!r} is null in some row; the table declares the column NOT NULL. "
                "Filter those rows out or fill the column (e.g. coalesce) before writing. Nothing was written.")

    @classmethod
    def of(cls, column: str, primary_key: bool = False, table: str | None = None) -> NullValueError:
        return cls(cls.text(column, primary_key), column=column, table=table)

    @classmethod
    def from_text(cls, message: str) -> NullValueError | None:
        """The error whose `text` starts `message`, or None."""
        import ast
        import re

        found = re.match(r"(?:primary-key|NOT NULL) column ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") is null in some "
                         r"row", message)
        return cls(message, column=ast.literal_eval(found.group(1))) if found else None


class MultipleMatchError(LakesinkError, ValueError):
    """A MERGE matched one target row with several source rows that a clause would apply to
    (Delta's rule). Nothing was changed."""


class UnsupportedTableError(LakesinkError):
    """The table kind cannot be written by the chosen path (the message names one that can)."""


class NotAPaimonTableError(LakesinkError):
    """The path holds something that is not a Paimon table (files, but no schema/), or a table
    whose schema cannot be read. Not a `TableNotFoundError`: something is there, and lakesink
    never writes over it."""


class TableAlreadyExistsError(LakesinkError):
    """A create found the table already there."""


class AmbiguousTableNameError(ConfigurationError):
    """A table name is also an existing relative path holding a Paimon table. Nothing was read or written."""


class CatalogError(LakesinkError):
    """A catalog (filesystem or JDBC) cannot answer for a table name. Nothing was changed."""


class TableNotFoundError(LakesinkError, ValueError):
    """No table there: a path where nothing is (or nothing but lakesink's own staging), or a
    name the catalog does not know. Every entry point that needs an existing table raises this
    one (a directory holding something else is `NotAPaimonTableError`)."""


class DatabaseNotFoundError(TableNotFoundError, CatalogError):
    """The database of a table name does not exist in the catalog."""


class CatalogInconsistencyError(CatalogError):
    """The catalog and the storage disagree: a table in the catalog without files, or a table's
    files without a catalog entry (e.g. left by an interrupted CREATE TABLE AS)."""


class SnapshotNotFoundError(LakesinkError, ValueError):
    """A snapshot asked for (by id, time or stream position) does not exist or has expired."""


class TagNotFoundError(LakesinkError, ValueError):
    """A tag asked for does not exist."""


class BranchNotFoundError(LakesinkError, ValueError):
    """A branch asked for does not exist. Nothing was read or written."""


class BranchAlreadyExistsError(LakesinkError, ValueError):
    """A branch to create is already there. Nothing was changed."""


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


class KeyRangeConflictError(CommitConflictError):
    """Another writer committed files into a bucket of a primary-key table that this commit writes,
    after the snapshot its sequence numbers were planned on, with keys in the range this commit's
    files hold there: which version of such a key is the later one cannot be told. Nothing of this
    commit is visible. `partition`, `bucket`, `key_range` (the overlap: first and last key, tuples),
    `other_commit_user` and `snapshot` (the other writer's snapshot)."""

    def __init__(self, message: str = "", *, partition: tuple | None = None, bucket: int | None = None,
                 key_range: tuple | None = None, other_commit_user: str | None = None, **fields):
        super().__init__(message, **fields)
        self.partition, self.bucket, self.key_range = partition, bucket, key_range
        self.other_commit_user = other_commit_user


class CatalogLockTimeoutError(CommitFailedError):
    """The catalog lock of the table was not free within `lock-acquire-timeout`; nothing was published."""


class AlreadyCommittedError(LakesinkError):
    """Another commit of this identity landed first; this transaction was rolled back.

    Not a `CommitFailedError`: the committer, asking whether the identity landed, finds it
    did and counts the checkpoint as committed."""


class RestoreError(LakesinkError):
    """Durable state could not be restored (e.g. its data files are gone)."""


class BackgroundCommitError(LakesinkError):
    """A pipelined (background) commit failed; its batch stays pending and is retried on restart."""

    retryable = True


class StreamStopped(LakesinkError, RuntimeError):
    """A micro-batch cut short because its query is stopping (query.stop()); nothing of it was
    committed. Spark recognises a stop by the text of the message (see
    `spark.streaming.stopped_by_interrupt`), which names the interrupted JVM call."""


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
