"""What Spark keeps in a streaming query's checkpoint that lakesink reads."""

from __future__ import annotations

import json
from collections.abc import Callable

from .. import storage


def query_id_of(checkpoint: str, options: dict | None = None) -> str | None:
    """Spark keeps `{"id": <query id>}` in `<checkpoint>/metadata`, stable across restarts."""
    filesystem, root = storage.arrow_fs(checkpoint, options)
    try:
        with filesystem.open_input_stream(f"{root.rstrip('/')}/metadata") as src:
            first = src.read().decode().splitlines()[0]
        return json.loads(first).get("id")
    except (FileNotFoundError, IndexError, ValueError, OSError):
        return None


def query_id(checkpoint: str | None, options: dict | None = None) -> Callable[[], str | None]:
    """The query id of `checkpoint` when asked (Spark writes it when the query starts)."""
    return lambda: query_id_of(checkpoint, options) if checkpoint else None
