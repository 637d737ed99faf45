"""Atomic snapshot publication: `snapshot-N` is created only if it does not exist.

pypaimon publishes a snapshot by "check absent, write temp, rename". A local
rename replaces a file another process published in between, and on an
object store the check and the copy are separate requests: either way a
commit is silently lost (tests/unit/test_race.py races it). Here publication is one atomic step
of the storage that fails when the target exists:

* local / POSIX: write a temporary file, then `link()` it to the final name
  (fails with EEXIST if another writer got there first);
* S3-compatible stores: a conditional PUT (`If-None-Match: *`), refused with
  412 if the object exists. Checked once per process and bucket by a probe,
  so a store that ignores the header is refused instead of trusted;
* anything else: only with an explicit lock (`commit.lock`), the JDBC catalog
  lock, or an explicit acceptance of possible loss
  (`commit.allow-unsafe-publication`).

A table resolved by name through a JDBC catalog with `lock.enabled` carries
its catalog lock (`commit.catalog-lock`, catalog_lock.py): every publication
then runs under it, as Apache Paimon's writers of that catalog publish, so
they and lakesink exclude each other. Under the lock the storage's atomic step
is still used where there is one (writers by path take no catalog lock);
where there is none the lock alone guards a check-then-write.

A lost race returns False: pypaimon's commit loop then first checks whether
its own (commit user, identifier) landed (a retry after an unknown outcome),
and otherwise rebases on the new latest snapshot and tries again, with
Paimon's conflict checks and bounded, backed-off retries
(`commit.max-retries`, `commit.min-retry-wait`, `commit.max-retry-wait`).

The two options below are storage options: passed with the file-system
options (`fs.s3.*`), or set as table options.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import uuid
from urllib.parse import urlparse

from pypaimon.common.json_util import JSON
from pypaimon.snapshot.renaming_snapshot_commit import RenamingSnapshotCommit
from pypaimon.snapshot.snapshot_commit import SnapshotCommit

from ... import options as registry
from ... import storage
from ...errors import CatalogLockTimeoutError, ConfigurationError, InvalidOptionError, UnsafePublicationError
from .catalog_lock import OPTION as CATALOG_LOCK
from .catalog_lock import CatalogLock

log = logging.getLogger(__name__)

# Storage options (declared in lakesink.options; documented in docs/storage.md).
COMMIT_LOCK = "commit.lock"
ALLOW_UNSAFE = "commit.allow-unsafe-publication"

class _PublishingCommit(SnapshotCommit):
    """Shared part: the LATEST hint after a successful publication."""

    def __init__(self, snapshot_manager):
        self.snapshot_manager = snapshot_manager
        self.file_io = snapshot_manager.file_io

    def _update_latest_hint(self, snapshot_id: int) -> None:
        # LATEST is only a hint: pypaimon checks it against snapshot-(hint+1) and
        # lists the directory when it is stale, so a late or failed update is harmless.
        try:
            storage.write_atomically(self.file_io, self.snapshot_manager.latest_file, str(snapshot_id),
                                  durable=False)
        except Exception as exc:
            log.warning("could not update LATEST hint: %s", exc)

    def close(self):
        pass


class LinkingSnapshotCommit(_PublishingCommit):
    """Publishes with link(2): atomic create-if-absent on local and POSIX file systems."""

    def commit(self, base_snapshot_uuid, snapshot, statistics) -> bool:
        path = self.snapshot_manager.get_snapshot_path(snapshot.id)
        if not _link_create(path, JSON.to_json(snapshot, indent=2)):
            return False
        self._update_latest_hint(snapshot.id)
        return True


class ConditionalPutSnapshotCommit(_PublishingCommit):
    """Publishes with one `PUT If-None-Match: *`: atomic create-if-absent on S3-compatible stores."""

    # 412: the object exists. 409: a concurrent conditional write to the same key is
    # in flight (AWS asks to retry); either way this attempt did not publish.
    LOST_RACE = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}

    def __init__(self, snapshot_manager, client):
        super().__init__(snapshot_manager)
        self.client = client

    def commit(self, base_snapshot_uuid, snapshot, statistics) -> bool:
        # False: possibly our own earlier PUT whose answer was lost: pypaimon's retry
        # checks for our (commit user, identifier) before trying again.
        if not _put_create(self.client, self.snapshot_manager.get_snapshot_path(snapshot.id),
                           JSON.to_json(snapshot, indent=2)):
            return False
        self._update_latest_hint(snapshot.id)
        return True


class LockingSnapshotCommit(_PublishingCommit):
    """Check-then-write while holding an exclusive lock file that every writer of the table takes."""

    def __init__(self, snapshot_manager, lock_file: str):
        super().__init__(snapshot_manager)
        self.lock_file = lock_file

    def commit(self, base_snapshot_uuid, snapshot, statistics) -> bool:
        path = self.snapshot_manager.get_snapshot_path(snapshot.id)
        return _locked_create(self.lock_file, self.file_io, path, JSON.to_json(snapshot, indent=2),
                              then=lambda: self._update_latest_hint(snapshot.id))


class CatalogLockedSnapshotCommit(SnapshotCommit):
    """Another publication, run while holding the table's JDBC catalog lock (Paimon's
    `RenamingSnapshotCommit` with a catalog lock: check, then write, under the lock)."""

    def __init__(self, inner: SnapshotCommit, lock: CatalogLock):
        self.inner = inner
        self.lock = lock
        self._timed_out: CatalogLockTimeoutError | None = None

    def commit(self, base_snapshot_uuid, snapshot, statistics) -> bool:
        # pypaimon retries a publication that raised (up to commit.max-retries): after a full
        # lock-acquire-timeout once, do not wait that long again for each retry.
        if self._timed_out is not None:
            raise self._timed_out
        try:
            return self.lock.run(lambda: self.inner.commit(base_snapshot_uuid, snapshot, statistics))
        except CatalogLockTimeoutError as exc:
            self._timed_out = exc
            raise

    def close(self):
        self.inner.close()


# -- create-if-absent, one per storage kind ------------------------------------

LOST_RACE = ConditionalPutSnapshotCommit.LOST_RACE


def _link_create(path: str, text: str) -> bool:
    """Local / POSIX: a fully written temporary file linked to its name; False if the name exists."""
    final = storage.local_path(path)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = f"{os.path.dirname(final)}/.{os.path.basename(final)}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def _put_create(client, path: str, text: str) -> bool:
    """S3-compatible stores: one conditional PUT; False if the object exists."""
    from botocore.exceptions import ClientError

    bucket, key = s3_location(path)
    try:
        client.put_object(Bucket=bucket, Key=key, IfNoneMatch="*", Body=text.encode("utf-8"),
                          ContentType="application/json")
    except ClientError as exc:
        if _error_code(exc) in LOST_RACE:
            return False
        raise
    return True


def _locked_create(lock_file: str, file_io, path: str, text: str, then=None) -> bool:
    """Check-then-write holding the lock file every writer of the table takes."""
    os.makedirs(os.path.dirname(lock_file) or ".", exist_ok=True)
    with open(lock_file, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if file_io.exists(path):
                return False
            file_io.overwrite_file_utf8(path, text)
            if then is not None:
                then()
            return True
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def create_if_absent(table, path: str, text: str) -> bool:
    """Create the metadata file `path` of `table` (e.g. a schema file) with the same atomic step
    as its snapshots; False if it exists. pypaimon's `try_to_write_atomic` (check, then
    rename) would replace a file another writer created in between on a local disk."""
    options = publication_options(table)
    kind = publication_kind(table.table_path, options)
    lock = catalog_lock(options)

    def create() -> bool:
        if kind == "link":
            return _link_create(path, text)
        if kind == "conditional-put":
            return _put_create(s3_client(options), path, text)
        if kind == "lock":
            return _locked_create(_lock_file(options), table.file_io, path, text)
        if kind == "catalog-lock":  # under the lock: check, then write
            return not table.file_io.exists(path) and table.file_io.try_to_write_atomic(path, text)
        return table.file_io.try_to_write_atomic(path, text)

    return create() if lock is None else lock.run(create)


# -- choosing the publication of a table ------------------------------------

def s3_location(path: str) -> tuple[str, str]:
    parsed = urlparse(path)
    return parsed.netloc, parsed.path.lstrip("/")


def _error_code(exc) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


_clients: dict[tuple, object] = {}
_probed: dict[tuple, bool] = {}
_cache_lock = threading.Lock()


def s3_client(options: dict):
    """A boto3 S3 client for the same endpoint and credentials as the table's pypaimon FileIO."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigurationError(
            "Tables on S3 need boto3 for atomic snapshot publication (a conditional PUT): "
            "pip install 'lakesink[s3]'."
        ) from None
    endpoint = storage.s3_setting(options, "endpoint")
    if endpoint and "://" not in endpoint:
        endpoint = f"https://{endpoint}"  # pyarrow's default scheme for an endpoint override
    path_style = str(storage.s3_setting(options, "path-style-access") or "false").lower() == "true"
    settings = (endpoint, storage.s3_setting(options, "access-key"), storage.s3_setting(options, "secret-key"),
                storage.s3_setting(options, "session-token"), storage.s3_setting(options, "region"), path_style,
                tuple(sorted(storage.s3_client_options(options).items())))
    with _cache_lock:
        client = _clients.get(settings)
        if client is None:
            endpoint, key, secret, token, region, path_style, given = settings
            given = dict(given)
            # The same timeouts and attempts as the table's pyarrow file system when given
            # (storage.py); else botocore's timeouts (60 s each) and 6 attempts (5 retries).
            timeouts = {"connect_timeout": given.get(storage.S3_CONNECT_TIMEOUT),
                        "read_timeout": given.get(storage.S3_REQUEST_TIMEOUT)}
            client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                aws_session_token=token, region_name=region,
                config=Config(s3={"addressing_style": "path" if path_style else "auto"},
                              retries={"total_max_attempts": given.get(storage.S3_ATTEMPTS, 6), "mode": "standard"},
                              **{k: v / 1000 for k, v in timeouts.items() if v is not None}))
            _clients[settings] = client
    return client


def check_conditional_put(client, table_path: str) -> None:
    """Refuse a store that ignores `If-None-Match` (it would overwrite, i.e. lose commits)."""
    from botocore.exceptions import ClientError

    bucket, prefix = s3_location(table_path)
    cache_key = (id(client), bucket)
    if _probed.get(cache_key):
        return
    key = f"{prefix.rstrip('/')}/_lakesink/conditional-put-probe-{uuid.uuid4().hex}"
    client.put_object(Bucket=bucket, Key=key, Body=b"1", IfNoneMatch="*")
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"2", IfNoneMatch="*")
    except ClientError as exc:
        if _error_code(exc) not in ConditionalPutSnapshotCommit.LOST_RACE:
            raise
        _probed[cache_key] = True
        return
    finally:
        client.delete_object(Bucket=bucket, Key=key)
    raise UnsafePublicationError(
        f"The S3 store of {table_path} ignores conditional PUTs (If-None-Match: *): a second "
        "create of the same object succeeded. Snapshots cannot be published atomically there. "
        f"Set {COMMIT_LOCK}=file:/shared/lockfile (every writer the same file) or, for a table "
        f"with a single writer, {ALLOW_UNSAFE}=true."
    )


def _lock_file(options: dict) -> str | None:
    value = options.get(COMMIT_LOCK)
    if value is None or not str(value).strip():
        return None
    value = str(value).strip()
    if not value.startswith("file:"):
        raise InvalidOptionError(COMMIT_LOCK, value, "file:/path/to/lockfile (a lock file all writers share)")
    path = storage.local_path(value)
    if not path or not os.path.isabs(path):
        raise InvalidOptionError(COMMIT_LOCK, value, "an absolute path, e.g. file:/shared/locks/orders.lock")
    return path


def _allow_unsafe(options: dict) -> bool:
    return registry.table_value(options, ALLOW_UNSAFE)


def catalog_lock(options: dict) -> CatalogLock | None:
    """The JDBC catalog lock a table resolved by name carries in its storage options, if any."""
    value = options.get(CATALOG_LOCK)
    return CatalogLock.from_option(str(value)) if value else None


def publication_kind(table_path: str, options: dict | None = None) -> str:
    """How snapshots of the table at `table_path` are published: `link`, `conditional-put`,
    `lock`, `catalog-lock` (check-then-write, guarded by the JDBC catalog lock alone) or
    `unsafe-rename`; with a catalog lock the first three also run under it. Raises
    `UnsafePublicationError` where none is safe and none was chosen: call it before writing
    anything, so a refused job leaves nothing behind."""
    options = dict(options or {})
    lock = _lock_file(options)
    unsafe = _allow_unsafe(options)
    guarded = catalog_lock(options) is not None
    if lock is not None:
        return "lock"
    if storage.local_path(table_path) is not None:
        return "link"
    scheme = urlparse(table_path).scheme.lower()
    if scheme in storage.S3_SCHEMES:
        try:
            check_conditional_put(s3_client(options), table_path)
        except UnsafePublicationError:
            if not guarded:
                raise
            return "catalog-lock"  # the store ignores If-None-Match: the catalog lock guards alone
        return "conditional-put"
    if guarded:
        return "catalog-lock"
    if unsafe:
        return "unsafe-rename"
    raise UnsafePublicationError(
        f"Cannot publish snapshots of {table_path} atomically: lakesink knows no create-if-absent "
        f"step on {scheme}:// storage, and concurrent writers could silently lose commits. Write the "
        f"table by name through a JDBC catalog with lock.enabled=true (its catalog lock guards every "
        f"commit), set {COMMIT_LOCK}=file:/shared/lockfile (every writer of the table the same file), "
        f"or, if the table has exactly one writer at a time, {ALLOW_UNSAFE}=true. See docs/storage.md."
    )


def publication_options(table) -> dict:
    """Storage options of an open table: its table options, overridden by its FileIO's options."""
    options = dict(table.table_schema.options or {})
    properties = getattr(table.file_io, "properties", None)
    if properties is not None:
        options.update(properties.to_map())
    return options


def atomic_snapshot_commit(table) -> SnapshotCommit:
    """The SnapshotCommit every lakesink commit of `table` publishes with."""
    manager = table.snapshot_manager()
    options = publication_options(table)
    kind = publication_kind(table.table_path, options)
    lock = catalog_lock(options)
    if kind == "link":
        inner = LinkingSnapshotCommit(manager)
    elif kind == "conditional-put":
        inner = ConditionalPutSnapshotCommit(manager, s3_client(options))
    elif kind == "lock":
        inner = LockingSnapshotCommit(manager, _lock_file(options))
    else:
        if kind == "unsafe-rename":
            log.warning("%s=true: snapshots of %s are published without an atomic step; concurrent "
                        "writers may lose commits", ALLOW_UNSAFE, table.table_path)
        inner = RenamingSnapshotCommit(manager)  # check, then rename: under the catalog lock if any
    if lock is None:
        return inner
    # Fail here, before pypaimon's commit loop, if the lock stays held: that loop would turn a
    # timeout inside the publication into a retried "uncertain" outcome and a vaguer error.
    lock.wait_until_free()
    return CatalogLockedSnapshotCommit(inner, lock)
