"""Streaming consumers: Paimon's `consumer/consumer-<id>` files, listed, moved and removed.

A consumer file (`{"nextSnapshot": n}`) records how far a streaming reader with
that `consumer-id` has read; a new query with the same id starts at `n`, and
snapshot expiry keeps every snapshot from the smallest `n` on. As Paimon's
`reset_consumer` / `clear_consumers` procedures: reset moves one consumer,
clear removes consumers so expiry no longer waits for them.

A query that is still running writes its consumer file again after each
micro-batch: stop it first, or the change is undone.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass

from pypaimon.consumer.consumer import Consumer
from pypaimon.consumer.consumer_manager import ConsumerManager

from ...errors import ConfigurationError, ConsumerNotFoundError, SnapshotNotFoundError
from ..read.scan import consumer_file, record_consumer
from .metadata import table_of


@dataclass(frozen=True)
class ConsumerInfo:
    consumer_id: str
    next_snapshot: int
    modified_at: dt.datetime | None  # UTC; None where the store does not say


def _manager(table) -> ConsumerManager:
    return ConsumerManager(table.file_io, table.table_path)


def list_consumers(table_or_path, fs_options: dict | None = None) -> list[ConsumerInfo]:
    """The table's consumers, by id."""
    table = table_of(table_or_path, fs_options)
    directory = f"{str(table.table_path).rstrip('/')}/consumer"
    if not table.file_io.exists(directory):
        return []
    out = []
    for status in table.file_io.list_status(directory):
        name = str(status.base_name)
        if not name.startswith(ConsumerManager.CONSUMER_PREFIX):
            continue
        consumer_id = name[len(ConsumerManager.CONSUMER_PREFIX):]
        consumer = Consumer.from_path(table.file_io, f"{directory}/{name}")
        if consumer is None:
            continue
        seconds = mtime_seconds(status)
        out.append(ConsumerInfo(consumer_id, consumer.next_snapshot,
                                dt.datetime.fromtimestamp(seconds, dt.timezone.utc) if seconds else None))
    return sorted(out, key=lambda c: c.consumer_id)


def mtime_seconds(status) -> float:
    """A file status's modification time in epoch seconds (0 when the store does not say)."""
    mtime = getattr(status, "mtime", None)
    if mtime is None:
        return 0.0
    if isinstance(mtime, dt.datetime):
        return mtime.timestamp()
    return float(mtime)


def _valid_id(consumer_id: str) -> str:
    try:
        ConsumerManager._validate_consumer_id(consumer_id)
    except ValueError as exc:
        raise ConfigurationError(f"Consumer id {consumer_id!r}: {exc}.") from None
    return consumer_id


def reset_consumer(table_or_path, consumer_id: str, next_snapshot: int,
                   fs_options: dict | None = None) -> ConsumerInfo:
    """Make `consumer_id` read next from snapshot `next_snapshot`.

    `next_snapshot` must be retained (earliest..latest) or latest + 1 (only what
    is committed from now on); the consumer must exist (a query creates it).
    """
    table = table_of(table_or_path, fs_options)
    _valid_id(consumer_id)
    existing = {c.consumer_id: c for c in list_consumers(table)}
    if consumer_id not in existing:
        raise ConsumerNotFoundError(
            f"Consumer {consumer_id!r} does not exist in {table.table_path}; consumers: "
            f"{', '.join(sorted(existing)) or 'none'}. A streaming query with this consumer-id creates it.",
            table=str(table.table_path))
    manager = table.snapshot_manager()
    latest = manager.get_latest_snapshot()
    earliest = manager.try_get_earliest_snapshot() if latest is not None else None
    low, high = (earliest.id if earliest else 1), (latest.id + 1 if latest else 1)
    if not low <= next_snapshot <= high:
        raise SnapshotNotFoundError(
            f"Snapshot {next_snapshot} is not retained in {table.table_path}: a consumer can read next from "
            f"snapshot {low} to {high} ({high}: only what is committed from now on).",
            table=str(table.table_path), snapshot=next_snapshot)
    record_consumer(table, consumer_id, next_snapshot)
    return ConsumerInfo(consumer_id, next_snapshot, dt.datetime.now(dt.timezone.utc))


def clear_consumers(table_or_path, consumer_ids: Iterable[str] = (), including: str | None = None,
                    excluding: str | None = None, everything: bool = False, dry_run: bool = False,
                    fs_options: dict | None = None) -> list[ConsumerInfo]:
    """Remove consumers: those named, those whose id matches `including` (a regular expression,
    whole id) and not `excluding`, or with `everything` all of them. Returns those removed
    (or, with `dry_run`, that would be). Naming a consumer that does not exist is an error."""
    table = table_of(table_or_path, fs_options)
    named = [_valid_id(c) for c in consumer_ids]
    if not (named or including or everything):
        raise ConfigurationError("Say which consumers to clear: their ids, an `including` pattern, or all.")
    existing = {c.consumer_id: c for c in list_consumers(table)}
    missing = [c for c in named if c not in existing]
    if missing:
        raise ConsumerNotFoundError(
            f"Consumer(s) {', '.join(repr(c) for c in missing)} do not exist in {table.table_path}; "
            f"consumers: {', '.join(sorted(existing)) or 'none'}.", table=str(table.table_path))
    include = _pattern(including, "including")
    exclude = _pattern(excluding, "excluding")
    chosen = []
    for consumer_id, info in sorted(existing.items()):
        wanted = everything or consumer_id in named or (include is not None and include.fullmatch(consumer_id))
        if wanted and not (exclude is not None and exclude.fullmatch(consumer_id)):
            chosen.append(info)
    if not dry_run:
        for info in chosen:
            table.file_io.delete_quietly(consumer_file(table, info.consumer_id))
    return chosen


def _pattern(text: str | None, name: str):
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise ConfigurationError(f"{name} pattern {text!r} is not a regular expression: {exc}.") from None
