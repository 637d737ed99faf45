"""Retention by time: partition expiry, automatic tags and their expiry, consumer expiry."""

from __future__ import annotations

import datetime as dt
import logging

from pypaimon.consumer.consumer_manager import ConsumerManager

from ..commit.file_store import new_file_store_commit
from .metadata import BATCH_IDENTIFIER, MAINTENANCE_USER, MaintenanceOptions, list_tags
from ..commit.live_files import live_entries
from .tags import delete_tag

log = logging.getLogger(__name__)


_JAVA_TO_STRFTIME = [("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S")]


def _partition_time(values: dict, options: MaintenanceOptions) -> dt.datetime | None:
    if options.partition_pattern:
        text = options.partition_pattern
        for key, value in values.items():
            text = text.replace(f"${key}", str(value))
    else:
        text = str(next(iter(values.values())))
    if options.partition_formatter:
        fmt = options.partition_formatter
        for java, py in _JAVA_TO_STRFTIME:
            fmt = fmt.replace(java, py)
        formats = [fmt]
    else:
        formats = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d", "%Y%m%d"]
    for fmt in formats:
        try:
            return dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def expire_partitions(table, now: dt.datetime | None = None) -> list[dict]:
    """Drop partitions whose time (from their values) is older than `partition.expiration-time`."""
    options = MaintenanceOptions.of(table)
    if options.partition_expiration_ms is None or not table.partition_keys:
        return []
    now = now or dt.datetime.now()
    cutoff = now - dt.timedelta(milliseconds=options.partition_expiration_ms)
    expired, seen = [], set()
    for entry in live_entries(table):
        values = tuple(entry.partition.values)
        if values in seen:
            continue
        seen.add(values)
        spec = dict(zip(table.partition_keys, values))
        when = _partition_time(spec, options)
        if when is not None and when < cutoff:
            expired.append(spec)
    if expired:
        commit = new_file_store_commit(table, MAINTENANCE_USER)
        try:
            commit.drop_partitions(expired, BATCH_IDENTIFIER)
        finally:
            commit.close()
        log.info("dropped %d expired partition(s) of %s", len(expired), table.table_path)
    return expired


_PERIODS = {"daily": (dt.timedelta(days=1), "%Y-%m-%d"),
            "hourly": (dt.timedelta(hours=1), "%Y-%m-%d %H"),
            "two-hours": (dt.timedelta(hours=2), "%Y-%m-%d %H")}


def create_automatic_tags(table, now: dt.datetime | None = None) -> list[str]:
    """process-time tags: once a period is over, tag the latest snapshot with its name."""
    options = MaintenanceOptions.of(table)
    created: list[str] = []
    if options.auto_tag != "process-time":
        return created
    latest = table.snapshot_manager().get_latest_snapshot()
    if latest is None:
        return created
    period, fmt = _PERIODS[options.tag_period]
    now = now or dt.datetime.now()
    start = dt.datetime(now.year, now.month, now.day)
    while start + period <= now:
        start += period
    name = (start - period).strftime(fmt)  # the last complete period
    manager = table.tag_manager()
    if not manager.tag_exists(name):
        manager.create_tag(latest, name, ignore_if_exists=True, time_retained=options.tag_time_retained)
        created.append(name)
    if options.tag_num_retained_max is not None:
        auto = sorted(n for n in list_tags(table) if _is_period_name(n, fmt))
        for old in auto[:max(len(auto) - options.tag_num_retained_max, 0)]:
            delete_tag(table, old)
    return created


def _is_period_name(name: str, fmt: str) -> bool:
    try:
        dt.datetime.strptime(name, fmt)
        return True
    except ValueError:
        return False


def expire_tags_by_time(table, now: dt.datetime | None = None) -> list[str]:
    now = now or dt.datetime.now()
    gone = []
    for name, tag in list_tags(table).items():
        created, retained = getattr(tag, "tag_create_time", None), getattr(tag, "tag_time_retained", None)
        if created is not None and retained is not None and created + retained < now:
            delete_tag(table, name)
            gone.append(name)
    return gone


def expire_consumers(table, now: dt.datetime | None = None) -> None:
    options = MaintenanceOptions.of(table)
    if options.consumer_expiration_ms is None:
        return
    now = now or dt.datetime.now()
    ConsumerManager(table.file_io, table.table_path).expire(
        now - dt.timedelta(milliseconds=options.consumer_expiration_ms))
