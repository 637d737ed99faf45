"""pypaimon's `FileIO` for a path, built from the storage options (cached per store).

The one module of `storage` that imports pypaimon: the package loads it on first
use of `storage.file_io`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from pypaimon.common.file_io import FileIO
from pypaimon.common.options import Options

from .paths import canonical_key, is_local, normalize, scheme
from .s3 import S3_ATTEMPTS, S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT, S3_SCHEMES, s3_client_options

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
    if not given or scheme(path) not in S3_SCHEMES or not hasattr(io, "_initialize_s3_fs"):
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
