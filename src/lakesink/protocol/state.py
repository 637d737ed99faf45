"""Durable committer state: committables accepted but not yet committed.

Like Flink's committer state, it lets a restarted driver finish what the dead
one accepted. Each pending checkpoint is one JSON document (format below),
written to a temporary name and renamed into place, so a reader sees either
the whole document or none of it.

    {"format": "lakesink.pending-commit", "version": 1,
     "commit_user": "...", "identifier": 7, "overwrite": null | {...},
     "properties": {...}, "committables": [<target.encode(c)>, ...],
     "acknowledged": false, "check_from": 12}

`acknowledged` (optional, default false) is true once the committer told the
engine the checkpoint is safe (pipelined commits): the engine may have
recorded it and will not replay it, so a failed commit must keep the files
and this document for a retry instead of discarding them.

`check_from` (optional, absent for targets without it) is the table version
the committables were planned on (Paimon: the snapshot a keyed write's
sequence numbers continue above); the commit treats another writer's change
to the same buckets after it as a conflict (`CommitTarget.check_from`). A
restored checkpoint keeps that check; a document without the field commits
without it.

The same store also keeps small named JSON documents (the sink's binding to a
table, the coordinator's state) with the same write discipline; each is a
versioned document (`storage.documents`), checked when read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import storage
from ..errors import CorruptStateError
from .target import Overwrite

PENDING = storage.DocumentKind("lakesink.pending-commit", 1, "lakesink pending-commit document",
                                "Restore it from a backup or delete the checkpoint to start over.")


@dataclass
class PendingCheckpoint:
    commit_user: str
    identifier: int
    committables: list[dict]  # encoded by the target
    overwrite: Overwrite | None = None
    properties: dict[str, str] = field(default_factory=dict)
    acknowledged: bool = False
    check_from: int | None = None

    def to_json(self) -> dict:
        document = PENDING.new(commit_user=self.commit_user, identifier=self.identifier,
                               overwrite=self.overwrite.to_json() if self.overwrite else None,
                               properties=self.properties, committables=self.committables,
                               acknowledged=self.acknowledged)
        if self.check_from is not None:
            document["check_from"] = self.check_from
        return document

    @classmethod
    def from_json(cls, data: dict, where: str) -> PendingCheckpoint:
        PENDING.check(data, where)
        return cls(commit_user=data["commit_user"], identifier=int(data["identifier"]),
                   committables=list(data["committables"]),
                   overwrite=Overwrite.from_json(data.get("overwrite")),
                   properties=dict(data.get("properties") or {}),
                   acknowledged=bool(data.get("acknowledged", False)),
                   check_from=int(data["check_from"]) if data.get("check_from") is not None else None)


class StateStore:
    """A directory of small JSON documents, each replaced atomically."""

    def __init__(self, directory: str, options: Mapping[str, str] | None = None):
        self.directory = directory
        self._fs, self._root = storage.arrow_fs(directory, options)

    def _path(self, name: str) -> str:
        return f"{self._root.rstrip('/')}/{name}"

    def write_json(self, name: str, document: Any) -> None:
        storage.replace_file(self._fs, self._path(name), json.dumps(document, indent=1, sort_keys=True).encode())

    def write_document(self, name: str, kind: storage.DocumentKind, **fields: Any) -> None:
        """The document `name` of `kind` (its envelope and `fields`), replaced atomically."""
        self.write_json(name, kind.new(**fields))

    def read_document(self, name: str, kind: storage.DocumentKind) -> dict | None:
        """The document `name`, checked to be of `kind` and its version; None when there is none."""
        data = self.read_json(name)
        return None if data is None else kind.check(data, f"{self.directory}/{name}")

    def read_json(self, name: str) -> Any | None:
        path = self._path(name)
        try:
            with self._fs.open_input_stream(path) as src:
                raw = src.read()
        except FileNotFoundError:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise CorruptStateError(f"{path} is not valid JSON ({exc}). "
                                    "Restore it from a backup or delete the checkpoint to start over.") from exc

    def delete(self, name: str) -> None:
        try:
            self._fs.delete_file(self._path(name))
        except FileNotFoundError:
            pass

    def names(self, prefix: str) -> list[str]:
        from pyarrow import fs as pafs

        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._root, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(i.base_name for i in infos
                      if i.type == pafs.FileType.File and i.base_name.startswith(prefix))


class PendingStore:
    """Pending checkpoints of one committer, in identifier order."""

    PREFIX = "pending-"

    def __init__(self, store: StateStore):
        self.store = store

    @staticmethod
    def _name(identifier: int) -> str:
        return f"{PendingStore.PREFIX}{identifier:020d}.json"

    def put(self, pending: PendingCheckpoint) -> None:
        self.store.write_json(self._name(pending.identifier), pending.to_json())

    def remove(self, identifier: int) -> None:
        self.store.delete(self._name(identifier))

    def get(self, identifier: int) -> PendingCheckpoint | None:
        data = self.store.read_json(self._name(identifier))
        if data is None:
            return None
        return PendingCheckpoint.from_json(data, f"{self.store.directory}/{self._name(identifier)}")

    def all(self) -> list[PendingCheckpoint]:
        out = []
        for name in self.store.names(self.PREFIX):
            if not name.endswith(".json"):
                continue
            data = self.store.read_json(name)
            if data is not None:
                out.append(PendingCheckpoint.from_json(data, f"{self.store.directory}/{name}"))
        return sorted(out, key=lambda p: p.identifier)

    def identifiers(self) -> Sequence[int]:
        return [p.identifier for p in self.all()]
