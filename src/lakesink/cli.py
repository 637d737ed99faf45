"""The `lakesink` command: inspect and maintain Paimon tables.

    lakesink history /data/wh/db.db/orders
    lakesink expire /data/wh/db.db/orders --output json
    lakesink remove-orphans /data/wh/db.db/orders --dry-run --older-than 2d
    lakesink verify /data/wh/db.db/orders

Exit codes: 0 ok, 1 failure (including `verify` finding problems), 2 usage.
Errors are one line; `--debug` shows the full trace.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import traceback
from contextlib import contextmanager

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from .paimon import maintenance


class Context:
    def __init__(self, output: str, debug: bool):
        self.output = output
        self.debug = debug
        self.console = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)

    def emit(self, data, text=None) -> None:
        """Print `data` as JSON, or as text via `text(console)` (default: key: value lines)."""
        if self.output == "json":
            click.echo(json.dumps(data, default=str, indent=2))
        elif text is not None:
            text(self.console)
        else:
            for key, value in data.items():
                self.console.print(f"{key}: {value}")

    @contextmanager
    def progress(self):
        """A progress callback for long work; silent for JSON output or a non-terminal."""
        if self.output == "json" or not self.err.is_terminal:
            yield None
            return
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=self.err, transient=True) as bar:
            tasks: dict[str, int] = {}

            def update(step: str, done: int, total: int) -> None:
                if step not in tasks:
                    tasks[step] = bar.add_task(step, total=total)
                bar.update(tasks[step], completed=done, total=total)

            yield update


def _duration(text: str) -> dt.timedelta:
    from pypaimon.common.time_utils import parse_duration
    try:
        return dt.timedelta(milliseconds=parse_duration(text))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration such as '1 d', '12 h', '30 min'") from None


def _arrow_text(table, title: str):
    def render(console: Console) -> None:
        view = Table(title=title)
        for name in table.column_names:
            view.add_column(name)
        for row in table.to_pylist():
            view.add_row(*[_cell(v) for v in row.values()])
        console.print(view)
    return render


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return f"{value:%Y-%m-%d %H:%M:%S}"
    return str(value)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--debug", is_flag=True, help="Show the full trace of an error.")
@click.pass_context
def cli(ctx, output, debug):
    """Inspect and maintain lakesink / Paimon tables."""
    ctx.obj = Context(output, debug)


def _output_option(f):
    # `--output` is accepted after the subcommand too: `lakesink history T --output json`.
    def callback(ctx, _param, value):
        if value is not None:
            ctx.find_object(Context).output = value
        return value
    return click.option("--output", "-o", type=click.Choice(["text", "json"]), default=None,
                        expose_value=False, callback=callback, help="text or json")(f)


@cli.command()
@click.argument("table")
@click.option("--plot", type=click.Path(dir_okay=False), help="Also draw rows, files and commit duration to a PNG.")
@_output_option
@click.pass_obj
def history(obj: Context, table, plot):
    """One row per retained snapshot: kind, user, identifier, time, duration, rows/files/bytes added."""
    with obj.progress() as progress:
        result = maintenance.history(table, progress=progress)
    if plot:
        _plot_history(result, plot)
    shown = result.select(["snapshot_id", "commit_kind", "commit_user", "commit_identifier", "committed_at",
                           "commit_duration_ms", "rows_added", "files_added", "bytes_added"])
    obj.emit(result.to_pylist(), _arrow_text(shown, f"history of {table}"))


def _plot_history(result, path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise click.ClickException("--plot needs matplotlib: pip install 'lakesink[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = result.column("committed_at").to_pylist()
    fig, axes = plt.subplots(3, 1, sharex=True, figsize=(9, 7))
    for ax, column, label in zip(axes, ("rows_added", "files_added", "commit_duration_ms"),
                                 ("rows added", "files added", "commit ms")):
        ax.plot(times, [v or 0 for v in result.column(column).to_pylist()], marker=".", linewidth=0.8)
        ax.set_ylabel(label)
    axes[-1].set_xlabel("committed at (UTC)")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@cli.command()
@click.argument("table")
@click.option("--snapshot", type=int, help="Snapshot id (default: latest).")
@_output_option
@click.pass_obj
def files(obj: Context, table, snapshot):
    """The data files of a snapshot."""
    result = maintenance.files(table, snapshot)
    obj.emit(result.to_pylist(), _arrow_text(result, f"data files of {table}"))


@cli.command()
@click.argument("table")
@click.option("--dry-run", is_flag=True, help="Only show what would be expired.")
@_output_option
@click.pass_obj
def expire(obj: Context, table, dry_run):
    """Run maintenance now: tags, partition and snapshot expiry by the table's options."""
    with obj.progress() as progress:
        if dry_run:
            report = maintenance.expire_snapshots(table, limit=None, dry_run=True, progress=progress)
            data = {"snapshots_to_expire": report.snapshots_expired, "expired_range": report.expired_range,
                    "files_to_delete": report.would_delete}
        else:
            data = maintenance.maintain(table, limit=None)
    obj.emit(data)


@cli.group()
def tag():
    """Create, delete and list tags."""


@tag.command("create")
@click.argument("table")
@click.argument("name")
@click.option("--snapshot", type=int, help="Snapshot id (default: latest).")
@click.option("--time-retained", help="Expire the tag after this long, e.g. '7 d'.")
@_output_option
@click.pass_obj
def tag_create(obj: Context, table, name, snapshot, time_retained):
    tagged = maintenance.create_tag(table, name, snapshot, time_retained)
    obj.emit({"tag": name, "snapshot_id": tagged.id})


@tag.command("delete")
@click.argument("table")
@click.argument("name")
@_output_option
@click.pass_obj
def tag_delete(obj: Context, table, name):
    deleted = maintenance.delete_tag(maintenance.open_table(table), name)
    obj.emit({"deleted_tag": name, "files_deleted": deleted})


@tag.command("list")
@click.argument("table")
@_output_option
@click.pass_obj
def tag_list(obj: Context, table):
    tags = maintenance.list_tags(maintenance.open_table(table))
    rows = [{"tag": n, "snapshot_id": t.id, "committed_at": dt.datetime.fromtimestamp(t.time_millis / 1000,
                                                                                     dt.timezone.utc)}
            for n, t in sorted(tags.items())]

    def text(console):
        for row in rows:
            console.print(f"{row['tag']}\tsnapshot {row['snapshot_id']}\t{row['committed_at']:%Y-%m-%d %H:%M:%S}")
    obj.emit(rows, text)


@cli.command()
@click.argument("table")
@click.argument("target")
@_output_option
@click.pass_obj
def rollback(obj: Context, table, target):
    """Roll back to a snapshot id or a tag name; newer snapshots are removed."""
    snapshot = maintenance.rollback(table, target)
    obj.emit({"rolled_back_to": snapshot.id})


@cli.command("remove-orphans")
@click.argument("table")
@click.option("--older-than", default="1 d", show_default=True, help="Only files older than this.")
@click.option("--dry-run", is_flag=True, help="List them, delete nothing.")
@_output_option
@click.pass_obj
def remove_orphans(obj: Context, table, older_than, dry_run):
    """Delete files no snapshot or tag references (and stale staging directories)."""
    with obj.progress() as progress:
        found = maintenance.remove_orphans(table, _duration(older_than), dry_run=dry_run, progress=progress)
    data = {"dry_run": dry_run, "orphans": found, "count": len(found)}

    def text(console):
        for path in found:
            console.print(path)
        console.print(f"{len(found)} orphan file(s) {'found' if dry_run else 'removed'}")
    obj.emit(data, text)


@cli.command()
@click.argument("table")
@_output_option
@click.pass_obj
def verify(obj: Context, table):
    """Check the latest snapshot: schema and manifests readable, every data file present with its size."""
    with obj.progress() as progress:
        problems = maintenance.verify(table, progress=progress)

    def text(console):
        for problem in problems:
            console.print(problem)
        console.print("ok" if not problems else f"{len(problems)} problem(s)")
    obj.emit({"ok": not problems, "problems": problems}, text)
    if problems:
        raise SystemExit(1)


@cli.command()
@click.argument("table")
@click.option("--partition", "partitions", multiple=True, metavar="KEY=VALUE[,KEY=VALUE]",
              help="Only this partition (repeatable).")
@click.option("--target-size", default=None, help="e.g. '128 mb' (default: the table's target-file-size).")
@click.option("--local", is_flag=True, help="Rewrite in this process instead of on a Spark session.")
@click.option("--full/--triggered", default=True,
              help="Primary-key tables: compact every bucket (default), or only buckets whose sorted runs "
                   "pass num-sorted-run.compaction-trigger.")
@_output_option
@click.pass_obj
def compact(obj: Context, table, partitions, target_size, local, full):
    """Rewrite small files into one COMPACT snapshot; safe beside running writers."""
    from .spark.compact import compact as run_compaction
    specs = [dict(kv.split("=", 1) for kv in p.split(",")) for p in partitions] or None
    spark = None
    if not local:
        from .spark.session import session
        spark = session("lakesink-compact", None, None)
    with obj.progress() as progress:
        report = run_compaction(spark, table, partitions=specs, target_size=target_size, full=full,
                                progress=(lambda done, total: progress("rewriting", done, total)) if progress else False)
    obj.emit({"snapshot_id": report.snapshot_id, "files_removed": report.files_removed,
              "files_added": report.files_added, "rows_rewritten": report.rows_added,
              "bytes_removed": report.bytes_removed, "bytes_added": report.bytes_added,
              "conflicts": report.extra.get("conflicts", 0)})


def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit code (0 ok, 1 failure, 2 usage)."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        result = cli.main(args=argv, prog_name="lakesink", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    except click.UsageError as exc:
        click.echo(f"lakesink: {exc.format_message()}", err=True)
        return 2
    except click.ClickException as exc:
        click.echo(f"lakesink: {exc.format_message()}", err=True)
        return 1
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:
        if debug:
            traceback.print_exc()
        message = " ".join(str(exc).split()) or type(exc).__name__
        click.echo(f"lakesink: error: {message}", err=True)
        return 1


def _entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    _entry()
