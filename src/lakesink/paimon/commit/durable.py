"""The durable form of a Paimon target's committables: what pending state and checkpoints keep.

A committable is kept as pypaimon's own commit message (`commit_message_serializer`), with its
staged path and, while the table does not hold it yet, the schema it was written with.
"""

from __future__ import annotations

import base64

from pypaimon.write.commit_message_serializer import (VERSION as MESSAGE_VERSION,
                                                      deserialize_commit_message)

from ..table import evolution
from ..files.datafiles import StagedFile, encode_message, encoding_key


class DurableForm:
    """`encode` and `decode` of `PaimonTarget`, which this is a base of: they read its table
    (`table()`, else the one `create` plans), `path`, `branch` and `file_io`."""

    def _partition_fields(self):
        table = self.table()
        if table is not None:
            return table.partition_keys_fields
        fields = self._planned_fields()
        return [fields[k] for k in self.create.partition_keys]

    def _key_fields(self):
        """The fields of a key-value file's min/max key (the primary key minus partition
        columns); None for tables without a primary key."""
        table = self.table()
        if table is not None:
            return table.trimmed_primary_keys_fields or None
        if not self.create.primary_keys:
            return None
        fields = self._planned_fields()
        return [fields[k] for k in self.create.primary_keys if k not in self.create.partition_keys]

    def _planned_fields(self) -> dict:
        from pypaimon.schema.data_types import PyarrowFieldParser
        return {f.name: f for f in PyarrowFieldParser.to_paimon_schema(self.create.schema)}

    _ENCODED_KEPT = 4096  # encoded messages remembered: a stream saves the same files' state every batch

    def encode(self, committable: StagedFile) -> dict:
        # pypaimon's own serializer; a changelog file travels as the message's changelog file.
        # A file's description changes only with its level or schema (evolution at commit): one
        # encoding per file, level and schema, kept here and on the file (made by its task).
        key = encoding_key(committable)
        encoded = self.__dict__.setdefault("_encoded", {})
        message = encoded.get(key)
        if message is None:
            carried = committable.encoded
            message = carried[1] if carried is not None and carried[0] == key else \
                encode_message(committable, self._partition_fields())
            if len(encoded) >= self._ENCODED_KEPT:
                encoded.pop(next(iter(encoded)))
            encoded[key] = message
        out = {"paimon_commit_message_v": MESSAGE_VERSION, "message": message,
               "staged_path": committable.staged_path}
        if committable.schema is not None and not self._has_schema(committable.schema):
            # A restore must be able to write it (table/evolution.py); once the table has it, the
            # schema id alone says it (streams keep planning with it for the query's life).
            out["table_schema"] = evolution.schema_to_json(committable.schema)
        return out

    def _has_schema(self, schema) -> bool:
        """Does the table hold `schema` (same id, same columns)? Remembered once true."""
        known = self.__dict__.setdefault("_schemas_in_table", set())
        if schema.id not in known:
            from pypaimon.schema.schema_manager import SchemaManager
            existing = SchemaManager(self.file_io, self.path, self.branch or "main").get_schema(schema.id)
            if existing is None or not evolution.same_columns(existing, schema):
                return False
            known.add(schema.id)
        return True

    def decode(self, data: dict) -> StagedFile:
        message = deserialize_commit_message(base64.b64decode(data["message"]), self._partition_fields(),
                                             self._key_fields(),
                                             version=int(data["paimon_commit_message_v"]))
        schema = data.get("table_schema")
        changelog = not message.new_files and bool(message.changelog_files)
        staged = StagedFile(partition=tuple(message.partition), bucket=message.bucket,
                            meta=(message.changelog_files if changelog else message.new_files)[0],
                            staged_path=data.get("staged_path"),
                            schema=evolution.schema_from_json(schema) if schema else None, changelog=changelog)
        if int(data["paimon_commit_message_v"]) == MESSAGE_VERSION:  # saved again as it came
            staged.encoded = (encoding_key(staged), data["message"])
        return staged
