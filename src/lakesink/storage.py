"""The one storage layer: paths, file systems built from options, atomic writes, listings.

Every component (commits, pending state, staging, maintenance, the CLI) reaches
files through here, so the options that give access to a store (`fs.s3.endpoint`,
credentials, path style, ...) reach every call. Files are read and written with
pypaimon's `FileIO` (the storage library of the tables themselves); listings and
small state documents use the `pyarrow.fs` file system that FileIO wraps, built
from the same options.

Paths: a plain path is local and made absolute; `file:` URIs are local too; any
other scheme (`s3://bucket/wh`) is remote. `normalize` is the one spelling every
component compares and stores.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from pyarrow import fs as pafs
from pypaimon.common.file_io import FileIO
from pypaimon.common.options import Options

# Spark hands a Python data source its options with lower-cased keys; pypaimon
# looks these up by their exact (camel-case) spelling.
_CAMEL_CASE_KEYS = {k.lower(): k for k in (
    "fs.s3.accessKeyId", "fs.s3.accessKeySecret", "fs.s3.securityToken",
    "fs.oss.accessKeyId", "fs.oss.accessKeySecret", "fs.oss.securityToken")}

STORAGE_PREFIXES = ("fs.", "s3.", "s3a.")

# How long S3 clients wait and how often they try (declared in lakesink.options), by Hadoop
# S3A's names; pypaimon's spellings of the prefix (`fs.s3.`, `s3.`, `s3a.`, `fs.s3a.`) all count.
S3_CONNECT_TIMEOUT = "fs.s3.connection.establish.timeout"
S3_REQUEST_TIMEOUT = "fs.s3.connection.request.timeout"
S3_ATTEMPTS = "fs.s3.attempts.maximum"
_S3_PREFIXES = ("fs.s3.", "s3.", "s3a.", "fs.s3a.")


def canonical_key(key: str) -> str:
    """A storage option's key as pypaimon spells it."""
    return _CAMEL_CASE_KEYS.get(key.lower(), key)


def is_storage_key(key: str) -> bool:
    return key.startswith(STORAGE_PREFIXES)


def s3_client_options(options: Mapping[str, str]) -> dict[str, int]:
    """The S3 client options given among `options`, typed (timeouts in milliseconds), by their
    `fs.s3.` names. Parsed here, below the options registry that documents them, as it does:
    durations in Paimon's notation, attempts a whole number; 0 is refused (the clients read it
    as "give up at once", not as "never")."""
    from pypaimon.common.time_utils import parse_duration

    from .errors import InvalidOptionError
    out = {}
    for key in (S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT, S3_ATTEMPTS):
        name = key[len("fs.s3."):]
        spelled = next((prefix + name for prefix in _S3_PREFIXES if prefix + name in options), None)
        if spelled is None:
            continue
        text = str(options[spelled]).strip()
        expected = "a whole number above 0" if key == S3_ATTEMPTS else "a duration above 0, such as '5 s'"
        try:
            out[key] = int(text) if key == S3_ATTEMPTS else int(parse_duration(text))
        except (TypeError, ValueError):
            raise InvalidOptionError(spelled, options[spelled], expected) from None
        if out[key] <= 0:
            raise InvalidOptionError(spelled, options[spelled], expected)
    return out


def normalize(path: str) -> str:
    """The canonical spelling of a path: local paths absolute, no trailing slash."""
    path = str(path)
    if "://" not in path and not path.startswith("file:"):
        path = os.path.abspath(path)
    return path.rstrip("/") or "/"


def local_path(path: str) -> str | None:
    """The local file-system path of `path`, or None for a remote store."""
    path = str(path)
    if path.startswith("file://"):
        return path[len("file://"):]
    if path.startswith("file:"):
        return path[len("file:"):]
    if "://" not in path:
        return path
    return None


def is_local(path: str) -> bool:
    return local_path(path) is not None


def scheme(path: str) -> str:
    return "file" if is_local(path) else str(path).split("://", 1)[0].lower()


_io_cache: dict[tuple, FileIO] = {}
_io_lock = threading.Lock()


def file_io(path: str, options: Mapping[str, str] | None = None) -> FileIO:
    """pypaimon's FileIO for `path`, built from the storage options (cached per store)."""
    opts = {canonical_key(str(k)): str(v) for k, v in (options or {}).items()}
    path = normalize(path)
    # One FileIO per store (scheme and bucket) and options: building one opens clients.
    store = "file" if is_local(path) else "/".join(path.split("/", 3)[:3])
    key = (store, tuple(sorted(opts.items())))
    with _io_lock:
        io = _io_cache.get(key)
        if io is None:
            io = FileIO.get(path, Options(opts))
            _with_s3_client_options(io, path, opts)
            _io_cache[key] = io
    return io


def _with_s3_client_options(io: FileIO, path: str, opts: dict[str, str]) -> None:
    """pypaimon builds its S3 file system with fixed timeouts (60 s to connect, 60 s for an
    answer) and retries (10 attempts) in `_create_s3_retry_config`, and reads no option for
    them: with `fs.s3.connection.*.timeout` or `fs.s3.attempts.maximum` given, build it again
    the same way with those (pyarrow takes seconds)."""
    given = s3_client_options(opts)
    if not given or scheme(path) not in ("s3", "s3a", "s3n") or not hasattr(io, "_initialize_s3_fs"):
        return
    kwargs = {}  # pypaimon's defaults stay for what is not given
    if S3_CONNECT_TIMEOUT in given:
        kwargs["connect_timeout"] = given[S3_CONNECT_TIMEOUT] / 1000
    if S3_REQUEST_TIMEOUT in given:
        kwargs["request_timeout"] = given[S3_REQUEST_TIMEOUT] / 1000
    if S3_ATTEMPTS in given:
        kwargs["max_attempts"] = given[S3_ATTEMPTS]
    build = type(io)._create_s3_retry_config
    io._create_s3_retry_config = lambda: build(io, **kwargs)
    try:
        io.filesystem = io._initialize_s3_fs()
    finally:
        del io._create_s3_retry_config  # FileIO pickles its __dict__: leave no lambda on it


def arrow_fs(path: str, options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system for `path` and the path inside it, from the same options as `file_io`."""
    path = normalize(path)
    local = local_path(path)
    if local is not None:
        return pafs.LocalFileSystem(), local
    io = file_io(path, options)
    filesystem = getattr(io, "filesystem", None)
    if filesystem is None:  # a FileIO without a pyarrow file system underneath
        return pafs.FileSystem.from_uri(path)
    return filesystem, io.to_filesystem_path(path)


def new_output(io: FileIO, path: str):
    """An output stream for a new object at `path`. On object stores straight to the store's
    PUT: FileIO first probes the parent "directory" (a HEAD and a LIST) and may write marker
    objects, which object stores do not need."""
    filesystem = getattr(io, "filesystem", None)
    if is_local(path) or filesystem is None:
        return io.new_output_stream(path)
    return filesystem.open_output_stream(io.to_filesystem_path(path))


def write_atomically(io: FileIO, path: str, content: str, durable: bool = True) -> None:
    """Replace `path` with `content` so readers see the old or the new text, never a torn one.

    `durable=False` skips the fsync, for hints a crash may lose (they are re-derived).
    Temporary files are hidden (`.name.<uuid>.tmp`) so no listing mistakes them for data.
    """
    local = local_path(path)
    if local is None:
        io.overwrite_file_utf8(path, content)  # an object-store PUT is whole or nothing
        return
    directory, name = os.path.split(local)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(content)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, local)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class FileEntry:
    path: str          # full path, with the scheme for remote stores
    size: int
    mtime: float       # seconds since the epoch (0 when the store does not say)
    is_dir: bool = False


def list_dir(directory: str, options: Mapping[str, str] | None = None, recursive: bool = False,
             files_only: bool = True) -> list[FileEntry]:
    """Entries under `directory` (none if it does not exist), sorted by path."""
    directory = normalize(directory)
    filesystem, root = arrow_fs(directory, options)
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=recursive, allow_not_found=True))
    except FileNotFoundError:
        return []
    prefix = "" if is_local(directory) else directory.split("://", 1)[0] + "://"
    out = []
    for info in infos:
        is_dir = info.type == pafs.FileType.Directory
        if files_only and info.type != pafs.FileType.File:
            continue
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        out.append(FileEntry(prefix + info.path if prefix and "://" not in info.path else info.path,
                             info.size or 0, mtime, is_dir))
    return sorted(out, key=lambda e: e.path)


def relative(path: str, directory: str) -> str:
    """`path` relative to `directory` (both as `list_dir` spells them)."""
    path, directory = str(path), normalize(directory)
    if not is_local(directory):
        directory = directory.split("://", 1)[1]
        path = path.split("://", 1)[-1]
    return path[len(directory):].lstrip("/")
