"""Versioned JSON documents: every durable state file lakesink writes, one way.

Each kind of document is a `DocumentKind`: a format name and a version number, both
stored in the document itself beside its fields:

    {"format": "lakesink.<kind>", "version": 1, <the kind's fields>...}

A reader checks both before using a field: a document of another format, or of a
version this lakesink does not read (one written by a newer lakesink), is a
`CorruptStateError` naming the file, the version found and the version this
lakesink reads, so it is never guessed at. Writes replace the file atomically
(`files.write_atomically`: a temporary name renamed into place locally, one PUT on
object stores), so a reader sees the old document or the new one, never a torn one.

Field names and version numbers are the on-disk contract: existing checkpoints and
tables must keep reading, so a change of a field's meaning is a new version, and the
reader of the new version keeps reading the old one.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CorruptStateError
from .files import write_atomically
from .paths import local_path

if TYPE_CHECKING:
    from pypaimon.common.file_io import FileIO


def lakesink_version() -> str:
    # The package itself: always imported before any of its modules (importing it here would
    # make the storage layer depend on the top-level API).
    return getattr(sys.modules.get("lakesink"), "__version__", "unknown")


@dataclass(frozen=True)
class DocumentKind:
    """One kind of durable document: `format` and `version` as stored, `what` it is (for messages),
    `remedy`: what a user does about one that cannot be read."""

    format: str
    version: int
    what: str
    remedy: str = ""

    def new(self, **fields: Any) -> dict:
        """The document: the envelope first, then `fields`."""
        return {"format": self.format, "version": self.version, **fields}

    def dumps(self, **fields: Any) -> str:
        return json.dumps(self.new(**fields))

    def is_one(self, data: Any) -> bool:
        """Whether `data` claims this format (of any version): a listing skips other files by it."""
        return isinstance(data, dict) and data.get("format") == self.format

    def check(self, data: Any, where: str) -> dict:
        """`data` itself when it is a document of this kind and version; else a `CorruptStateError`."""
        if not self.is_one(data):
            found = (f"format={data.get('format')!r}, version={data.get('version')!r}" if isinstance(data, dict)
                     else f"a JSON {type(data).__name__}")
            raise CorruptStateError(f"{where} has an unknown format ({found}): not a {self.what} "
                                    f"({self.format!r}).{self._remedy()}")
        version = data.get("version")
        if version != self.version:
            newer = isinstance(version, int) and not isinstance(version, bool) and version > self.version
            raise CorruptStateError(
                f"{where} is a {self.what} of version {version!r}; this lakesink ({lakesink_version()}) reads "
                f"version {self.version} of {self.format!r} only."
                + (" It was written by a newer lakesink: use that version (or a newer one) here." if newer else "")
                + self._remedy())
        return data

    def loads(self, text: str | bytes, where: str, skip_other_formats: bool = False) -> dict | None:
        """The document in `text`, checked; None for one of another format if `skip_other_formats`."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise CorruptStateError(f"{where} is not valid JSON ({exc}): not a readable {self.what}."
                                    f"{self._remedy()}") from exc
        if skip_other_formats and not self.is_one(data):
            return None
        return self.check(data, where)

    def write(self, io: FileIO | None, path: str, durable: bool = True, **fields: Any) -> None:
        """Replace the document at `path` atomically (`io` may be None for a local path)."""
        write_atomically(io, path, self.dumps(**fields), durable)

    def read(self, io: FileIO | None, path: str, skip_other_formats: bool = False) -> dict | None:
        """The document at `path`, checked; None when there is none, or (`skip_other_formats`, for a
        listing of a directory others may write into too) when it is of another format. `io` may be
        None for a local path."""
        local = local_path(path)
        try:
            if local is not None:
                with open(local, "rb") as src:
                    text = src.read()
            else:
                text = io.read_file_utf8(path)
        except FileNotFoundError:
            return None
        return self.loads(text, path, skip_other_formats)

    def _remedy(self) -> str:
        return f" {self.remedy}" if self.remedy else ""
