"""Atomic writes, new objects and listings.

Local files need nothing but the standard library; remote stores are reached
through the `pyarrow.fs` file system under pypaimon's `FileIO` (`fileio`),
loaded only when a remote path is used.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .paths import is_local, local_path, normalize

if TYPE_CHECKING:
    from pyarrow import fs as pafs
    from pypaimon.common.file_io import FileIO


def arrow_fs(path: str, options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system for `path` and the path inside it, from the same options as `file_io`."""
    from pyarrow import fs as pafs

    path = normalize(path)
    local = local_path(path)
    if local is not None:
        return pafs.LocalFileSystem(), local
    from .fileio import file_io
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
    `io` is used only for remote paths (None will do for a local one).
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


def replace_file(filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
    """`write_atomically` through a `pyarrow.fs` file system (`path` inside it): written to a hidden
    temporary name beside `path`, fsynced on a local disk, then moved over `path`."""
    from pyarrow import fs as pafs

    directory, name = path.rsplit("/", 1) if "/" in path else ("", path)
    if directory:
        filesystem.create_dir(directory, recursive=True)
    tmp = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp" if directory else f".{name}.{uuid.uuid4().hex}.tmp"
    with filesystem.open_output_stream(tmp) as out:
        out.write(data)
    if isinstance(filesystem, pafs.LocalFileSystem):
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    filesystem.move(tmp, path)


def list_names(io: FileIO, directory: str) -> list[str]:
    """The names of the entries directly in `directory` (none if it does not exist), sorted, from one
    listing without a status of each entry where the store allows: a local directory's names alone
    (FileIO's local listing stats every entry, three times), an object store's one LIST (names and
    sizes come together)."""
    local = local_path(directory)
    if local is not None:
        try:
            return sorted(os.listdir(local))
        except (FileNotFoundError, NotADirectoryError):
            return []
    try:
        return sorted(s.base_name for s in io.list_status(directory))
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class FileEntry:
    path: str          # full path, with the scheme for remote stores
    size: int
    mtime: float       # seconds since the epoch (0 when the store does not say)
    is_dir: bool = False


def list_dir(directory: str, options: Mapping[str, str] | None = None, recursive: bool = False,
             files_only: bool = True) -> list[FileEntry]:
    """Entries under `directory` (none if it does not exist), sorted by path."""
    from pyarrow import fs as pafs

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
