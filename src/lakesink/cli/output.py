"""One run of the `lakesink` command and how its results print: text tables or JSON."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # rich is imported where output is drawn: `lakesink --help` needs none of it
    from rich.console import Console


class State:
    """One run of the command: output format, debug, storage options, the table it opened."""

    def __init__(self, output: str = "text", debug: bool = False):
        self.output = output
        self.debug = debug
        self.fs_options: dict[str, str] = {}
        self.catalog: dict[str, str] = {}
        self.table: str | None = None
        self.resolved = None  # the ResolvedTable of `table`

    @property
    def console(self) -> Console:
        return console_for(stderr=False)

    @property
    def err(self) -> Console:
        return console_for(stderr=True)

    def emit(self, data, text: Callable[[Console], None] | None = None) -> None:
        """Print `data` as JSON, or as text via `text(console)` (default: key: value lines)."""
        if self.output == "json":
            click.echo(to_json(data))
        elif text is not None:
            text(self.console)
        else:
            for key, value in data.items():
                self.console.print(f"{key}: {cell(value)}")

    @contextmanager
    def progress(self):
        """A progress callback for long work; silent for JSON output or a non-terminal."""
        if self.output == "json" or not self.err.is_terminal:
            yield None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=self.err, transient=True) as bar:
            tasks: dict[str, int] = {}

            def update(step: str, done: int, total: int) -> None:
                if step not in tasks:
                    tasks[step] = bar.add_task(step, total=total)
                bar.update(tasks[step], completed=done, total=total)

            yield update

    def open(self, table: str) -> tuple[str, dict | None]:
        """Note the table a command works on (for error reports); its path and storage options.

        A name (no `/`) resolves through `--catalog` as everywhere in lakesink (docs/catalogs.md)."""
        self.table = table
        from .. import resolve_table
        resolved = self.resolved = resolve_table(table, self.catalog or None)
        fs = {**(resolved.fs_options or {}), **self.fs_options}
        return resolved.path, (fs or None)

    def open_catalog(self):
        """The catalog of `--catalog` (with `--option`'s storage options over its own)."""
        from ..paimon.catalog.catalog import open_catalog
        return open_catalog({**self.catalog, **self.fs_options})


def console_for(stderr: bool) -> Console:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = 100_000  # a pipe or file: never cut or wrap tables at 80 columns
    return console


def iso(value: dt.datetime) -> str:
    """ISO 8601 with `T` and the UTC offset; naive times are UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.isoformat(timespec="milliseconds")


def _json_default(value):
    if isinstance(value, dt.datetime):
        return iso(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def to_json(data) -> str:
    return json.dumps(data, default=_json_default, indent=2)


def cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.isoformat(timespec="seconds")
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value)
    return str(value)


def from_millis(millis: int | None) -> dt.datetime | None:
    return None if millis is None else dt.datetime.fromtimestamp(millis / 1000, dt.timezone.utc)


def rows_text(rows: list[dict], title: str, columns: Sequence[str] | None = None, empty: str = "none"):
    def render(console: Console) -> None:
        if not rows:
            console.print(f"{title}: {empty}")
            return
        from rich.table import Table

        view = Table(title=title)
        names = list(columns or rows[0].keys())
        for name in names:
            view.add_column(name)
        for row in rows:
            view.add_row(*[cell(row.get(n)) for n in names])
        console.print(view)
    return render


def arrow_text(table, title: str):
    return rows_text(table.to_pylist(), title, table.column_names)
