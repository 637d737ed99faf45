"""The `lakesink` command: inspect and maintain Paimon tables.

    lakesink history /data/wh/db.db/orders
    lakesink expire /data/wh/db.db/orders --output json
    lakesink remove-orphans /data/wh/db.db/orders --dry-run --older-than 2d
    lakesink verify s3://bucket/wh/db.db/orders --option fs.s3.endpoint=http://minio:9000

Exit codes: 0 ok, 1 failure (including `verify` finding problems), 2 usage,
130 interrupted. Errors are one line on stderr (`--debug` shows the full trace);
with `--output json` they are a JSON object on stdout. docs/cli.md has it all.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import traceback
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from . import options as registry
from .errors import ConfigurationError, LakesinkError
from .paimon import maintenance

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

EXIT_CODES = """\b
Exit codes:
  0    success
  1    the command failed (one line on stderr; --debug shows the trace),
       or `verify` found problems
  2    usage error: unknown command or option, missing or malformed value
  130  interrupted (Ctrl-C)

\b
With --output json, results and errors are JSON on stdout; an error is
{"error": {"type", "message", "exit_code", "retryable", "table", "option",
"snapshot", "commit_user", "identifier"}}. Times are ISO 8601 with offset.
Docs: docs/cli.md"""

_ERROR_FIELDS = ("table", "option", "snapshot", "commit_user", "identifier")


# ---------------------------------------------------------------- state and output

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
        return _console(stderr=False)

    @property
    def err(self) -> Console:
        return _console(stderr=True)

    def emit(self, data, text: Callable[[Console], None] | None = None) -> None:
        """Print `data` as JSON, or as text via `text(console)` (default: key: value lines)."""
        if self.output == "json":
            click.echo(to_json(data))
        elif text is not None:
            text(self.console)
        else:
            for key, value in data.items():
                self.console.print(f"{key}: {_cell(value)}")

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

    def open(self, table: str) -> tuple[str, dict | None]:
        """Note the table a command works on (for error reports); its path and storage options.

        A name (no `/`) resolves through `--catalog` as everywhere in lakesink (docs/catalogs.md)."""
        self.table = table
        from . import resolve_table
        resolved = self.resolved = resolve_table(table, self.catalog or None)
        fs = {**(resolved.fs_options or {}), **self.fs_options}
        return resolved.path, (fs or None)

    def open_catalog(self):
        """The catalog of `--catalog` (with `--option`'s storage options over its own)."""
        from .paimon.catalog import open_catalog
        return open_catalog({**self.catalog, **self.fs_options})


def _console(stderr: bool) -> Console:
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


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.isoformat(timespec="seconds")
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def _millis(millis: int | None) -> dt.datetime | None:
    return None if millis is None else dt.datetime.fromtimestamp(millis / 1000, dt.timezone.utc)


def _rows_text(rows: list[dict], title: str, columns: Sequence[str] | None = None, empty: str = "none"):
    def render(console: Console) -> None:
        if not rows:
            console.print(f"{title}: {empty}")
            return
        view = Table(title=title)
        names = list(columns or rows[0].keys())
        for name in names:
            view.add_column(name)
        for row in rows:
            view.add_row(*[_cell(row.get(n)) for n in names])
        console.print(view)
    return render


def _arrow_text(table, title: str):
    return _rows_text(table.to_pylist(), title, table.column_names)


# ---------------------------------------------------------------- parameters

def _duration(text: str) -> dt.timedelta:
    from pypaimon.common.time_utils import parse_duration
    try:
        return dt.timedelta(milliseconds=parse_duration(text))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration such as '1 d', '12 h', '30 min'") from None


class _Duration(click.ParamType):
    name = "DURATION"

    def convert(self, value, param, ctx):
        if isinstance(value, dt.timedelta):
            return value
        return _duration(str(value))


class _Timestamp(click.ParamType):
    """ISO 8601 (no offset: UTC) or epoch milliseconds, to epoch milliseconds."""

    name = "TIME"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return registry.option("scan.timestamp-millis").parse(value, param.opts[0] if param else "time")
        except ConfigurationError:
            self.fail(f"{value!r} is not a time: give ISO 8601 such as 2024-05-01T12:00:00+00:00 "
                      "(no offset: UTC) or epoch milliseconds", param, ctx)


class OptionUsageError(click.BadParameter):
    """A malformed `--option`: a usage error that names the option."""

    def __init__(self, message: str, option: str | None, param=None):
        super().__init__(message, param=param)
        self.option_key = option


def _storage_option_callback(ctx, param, values):
    if not values:
        return values
    raw = {}
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise OptionUsageError(f"{text!r}: expected KEY=VALUE, e.g. fs.s3.endpoint=http://minio:9000",
                                   None, param)
        raw[key.strip()] = value
    try:
        parsed = registry.parse_storage(raw)
    except ConfigurationError as exc:
        raise OptionUsageError(str(exc), exc.option, param) from None
    ctx.find_object(State).fs_options.update(parsed)
    return values


def _catalog_option_callback(ctx, param, values):
    for text in values or ():
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise OptionUsageError(f"{text!r}: expected KEY=VALUE, e.g. warehouse=/data/wh or "
                                   "metastore=jdbc", None, param)
        ctx.find_object(State).catalog[key.strip()] = value
    return values


def _output_callback(ctx, _param, value):
    if value is not None:
        ctx.find_object(State).output = value
    return value


def _debug_callback(ctx, _param, value):
    if value:
        ctx.find_object(State).debug = True
    return value


def _common(opens_table: bool = True):
    """`--output`, `--debug` and (for commands that open a table) `--option`, accepted after
    the subcommand as well as before it."""
    def decorate(f):
        f = click.option("--debug", is_flag=True, expose_value=False, callback=_debug_callback,
                         help="Show the full trace of an error.")(f)
        f = click.option("--output", "-o", type=click.Choice(["text", "json"]), default=None, expose_value=False,
                         callback=_output_callback, help="text (default) or json.")(f)
        if opens_table:
            f = click.option("--option", "storage_options", multiple=True, metavar="KEY=VALUE",
                             expose_value=False, callback=_storage_option_callback,
                             help="Storage option to reach the table, e.g. fs.s3.endpoint=URL, "
                                  "fs.s3.accessKeyId=ID (repeatable).")(f)
            f = click.option("--catalog", "catalog_options", multiple=True, metavar="KEY=VALUE",
                             expose_value=False, callback=_catalog_option_callback,
                             help="Catalog option, to name TABLE as db.table: warehouse=/data/wh, "
                                  "metastore=jdbc, uri=jdbc:sqlite:/data/wh/catalog.db (repeatable; "
                                  "docs/catalogs.md).")(f)
        return f
    return decorate


# ---------------------------------------------------------------- the group

def _wants_json(argv: Sequence[str]) -> bool:
    wanted = False
    for i, token in enumerate(argv):
        if token in ("-o", "--output") and i + 1 < len(argv):
            wanted = argv[i + 1] == "json"
        elif token.startswith("--output="):
            wanted = token.split("=", 1)[1] == "json"
        elif token.startswith("-o") and len(token) > 2 and not token.startswith("--"):
            wanted = token[2:] == "json"
    return wanted


class LakesinkGroup(click.Group):
    """Runs a command and turns every exception into one message and one exit code (here only)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(args) if args is not None else sys.argv[1:]
        state = State("json" if _wants_json(argv) else "text", "--debug" in argv)
        extra.setdefault("obj", state)
        code = _run(lambda: super(LakesinkGroup, self).main(argv, prog_name or "lakesink", complete_var,
                                                            standalone_mode=False, **extra), state)
        if standalone_mode:
            sys.exit(code)
        return code


def _run(invoke: Callable[[], object], state: State) -> int:
    try:
        result = invoke()
        return result if isinstance(result, int) and not isinstance(result, bool) else EXIT_OK
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        _report(state, "Interrupted", "interrupted", EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except click.UsageError as exc:
        if state.output == "json":
            option = getattr(exc, "option_key", None)
            param = getattr(exc, "param", None)
            if option is None and param is not None and getattr(param, "opts", None):
                option = param.opts[0]
            _report(state, "UsageError", exc.format_message(), EXIT_USAGE, option=option)
        else:
            exc.show()
        return EXIT_USAGE
    except click.ClickException as exc:
        _report(state, "Error", exc.format_message(), exc.exit_code or EXIT_FAILURE)
        return exc.exit_code or EXIT_FAILURE
    except BrokenPipeError:
        return EXIT_FAILURE  # the reader went away (`lakesink history T | head`)
    except Exception as exc:  # noqa: BLE001 - the one place errors become an exit code
        if state.debug:
            traceback.print_exc()
        fields = {f: getattr(exc, f, None) for f in _ERROR_FIELDS} if isinstance(exc, LakesinkError) else {}
        fields["table"] = fields.get("table") or state.table
        _report(state, type(exc).__name__, " ".join(str(exc).split()), EXIT_FAILURE,
                retryable=bool(getattr(exc, "retryable", False)), **fields)
        return EXIT_FAILURE


def _report(state: State, kind: str, message: str, code: int, retryable: bool = False, **fields) -> None:
    if state.output == "json":
        error = {"type": kind, "message": message, "exit_code": code, "retryable": retryable}
        error.update({f: fields.get(f) for f in _ERROR_FIELDS})
        click.echo(to_json({"error": error}))
    else:
        click.echo(f"lakesink: {kind}: {message or kind}", err=True)


def _version(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    from . import __version__

    def of(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"
    click.echo(f"lakesink {__version__} (pypaimon {of('pypaimon')}, pyarrow {of('pyarrow')}, "
               f"pyspark {of('pyspark')}, Python {sys.version.split()[0]})")
    ctx.exit(EXIT_OK)


@click.group("lakesink", cls=LakesinkGroup, epilog=EXIT_CODES,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show lakesink's version (and pypaimon's, pyarrow's, pyspark's) and exit.")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default=None, expose_value=False,
              callback=_output_callback, help="text (default) or json; also accepted after the command.")
@click.option("--debug", is_flag=True, expose_value=False, callback=_debug_callback,
              help="Show the full trace of an error; also accepted after the command.")
@click.option("--option", "storage_options", multiple=True, metavar="KEY=VALUE", expose_value=False,
              callback=_storage_option_callback,
              help="Storage option to reach tables (repeatable), e.g. fs.s3.endpoint=URL; "
                   "also accepted after the command.")
@click.option("--catalog", "catalog_options", multiple=True, metavar="KEY=VALUE", expose_value=False,
              callback=_catalog_option_callback,
              help="Catalog option (repeatable), to name tables as db.table, e.g. warehouse=/data/wh; "
                   "also accepted after the command.")
@click.pass_context
def cli(ctx):
    """Inspect and maintain lakesink / Paimon tables.

    TABLE is a table directory (a path holding `/`: /data/wh/db.db/t, ./t, file:/..., or
    s3://bucket/... with --option for the endpoint and credentials), or a name `db.table`
    in the catalog given with --catalog (docs/catalogs.md).
    """
    if not isinstance(ctx.obj, State):  # invoked without LakesinkGroup.main (e.g. as a sub-group)
        ctx.obj = State()


# ---------------------------------------------------------------- inspecting

@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@click.option("--plot", type=click.Path(dir_okay=False), help="Also draw rows, files and commit duration to a PNG.")
@_common()
@click.pass_obj
def history(obj: State, table, plot):
    """One row per retained snapshot: kind, user, identifier, time, duration, rows/files/bytes added."""
    path, fs = obj.open(table)
    with obj.progress() as progress:
        result = maintenance.history(path, fs, progress=progress)
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


@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@click.option("--snapshot", type=click.IntRange(min=1), help="Snapshot id (default: latest).")
@_common()
@click.pass_obj
def files(obj: State, table, snapshot):
    """The data files of a snapshot: partition, bucket, path, rows, bytes, level."""
    path, fs = obj.open(table)
    result = maintenance.files(path, snapshot, fs)
    obj.emit(result.to_pylist(), _arrow_text(result, f"data files of {table}"))


@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@_common()
@click.pass_obj
def verify(obj: State, table):
    """Check the latest snapshot: schema and manifests readable, every data file present with its size.

    Exits with 1 when it finds a problem.
    """
    path, fs = obj.open(table)
    with obj.progress() as progress:
        problems = maintenance.verify(path, fs, progress=progress)

    def text(console):
        for problem in problems:
            console.print(problem)
        console.print("ok" if not problems else f"{len(problems)} problem(s)")
    obj.emit({"ok": not problems, "problems": problems}, text)
    if problems:
        raise click.exceptions.Exit(EXIT_FAILURE)


# ---------------------------------------------------------------- maintenance

@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@click.option("--dry-run", is_flag=True, help="Only show what would be expired.")
@_common()
@click.pass_obj
def expire(obj: State, table, dry_run):
    """Run maintenance now: tags, partition and snapshot expiry by the table's options."""
    path, fs = obj.open(table)
    with obj.progress() as progress:
        if dry_run:
            report = maintenance.expire_snapshots(path, limit=None, dry_run=True, progress=progress, fs_options=fs)
            data = {"dry_run": True, "snapshots_to_expire": report.snapshots_expired,
                    "expired_range": report.expired_range, "files_to_delete": report.would_delete}
        else:
            data = {"dry_run": False, **maintenance.maintain(path, limit=None, fs_options=fs)}
    obj.emit(data)


@cli.command("remove-orphans", epilog=EXIT_CODES)
@click.argument("table")
@click.option("--older-than", type=_Duration(), default="1 d", show_default=True,
              help="Only files older than this.")
@click.option("--dry-run", is_flag=True, help="List them, delete nothing.")
@_common()
@click.pass_obj
def remove_orphans(obj: State, table, older_than, dry_run):
    """Delete files no snapshot or tag references (and stale staging directories)."""
    path, fs = obj.open(table)
    with obj.progress() as progress:
        found = maintenance.remove_orphans(path, older_than, dry_run=dry_run, fs_options=fs, progress=progress)
    data = {"dry_run": dry_run, "orphans": found, "count": len(found)}

    def text(console):
        for orphan in found:
            console.print(orphan)
        console.print(f"{len(found)} orphan file(s) {'found' if dry_run else 'removed'}")
    obj.emit(data, text)


@cli.command("clean-staging", epilog=EXIT_CODES)
@click.argument("table", required=False)
@click.option("--older-than", type=_Duration(), default=None, show_default="1 d; a reservation: 1 h",
              help="Staging changed more recently than this may belong to a running job: kept. A CREATE "
                   "TABLE AS reservation (JDBC catalog on an object store) is kept while its job beat "
                   "more recently than this.")
@click.option("--dry-run", is_flag=True, help="Show what would be removed, remove nothing.")
@click.option("--include-pending", is_flag=True,
              help="Also remove (old) staging a stopped streaming query's checkpoint may still commit; "
                   "that query then fails on restart instead of committing it.")
@_common()
@click.pass_obj
def clean_staging(obj: State, table, older_than, dry_run, include_pending):
    """Remove staging that failed or killed jobs left in (and beside) TABLE, or in the whole catalog.

    Covers batch jobs' and streams' staging in TABLE/_lakesink/staging and the staged tables of
    CREATE TABLE AS jobs beside TABLE (TABLE may not exist yet; a database directory cleans the
    staged tables in it; a name through a JDBC catalog on an object store also its dead CREATE
    TABLE AS reservation). Staging changed within --older-than is kept, as its job may still run
    (make it longer than any write job runs), and so is a stream's uncommitted micro-batch unless
    --include-pending; a stream's committed batches go at once. Without TABLE, with --catalog:
    what dead CREATE TABLE AS jobs left in every database of the catalog. Every directory found
    is listed with the reason.
    """
    from .paimon import reservations
    from .paimon.maintenance import catalog_staging
    # Jobs holding a reservation beat every 30 s, so its default is the sweeps' (1 h); other staging
    # shows only its age.
    beat = older_than or dt.timedelta(seconds=reservations.EXPIRY_S)
    older_than = older_than or dt.timedelta(days=1)
    if table is None:
        if not obj.catalog:
            raise click.UsageError("Give TABLE, or --catalog KEY=VALUE... without TABLE to clean what dead "
                                   "CREATE TABLE AS jobs left in the whole catalog.")
        if include_pending:
            raise click.UsageError("--include-pending is about a table's streaming staging: give TABLE.")
        entries = catalog_staging.clean_catalog(obj.open_catalog(), older_than, dry_run=dry_run, beat=beat)
        title = "staging of the catalog"
    else:
        path, fs = obj.open(table)
        entries = maintenance.clean_staging(path, older_than, dry_run=dry_run, include_pending=include_pending,
                                            fs_options=fs)
        name = obj.resolved.name if obj.resolved is not None else None
        if name is not None:
            entries += catalog_staging.clean_name(obj.open_catalog(), name.database, name.table, beat,
                                                  dry_run=dry_run)
        title = f"staging of {table}"
    removed = [e for e in entries if e.remove]
    rows = [{"path": e.path, "kind": e.kind, "modified_at": e.modified_at,
             "action": ("would remove" if dry_run else "removed") if e.remove else "kept", "reason": e.reason}
            for e in entries]
    data = {"dry_run": dry_run, "removed_count": len(removed), "kept_count": len(entries) - len(removed),
            "entries": rows}

    def text(console):
        _rows_text(rows, title, ["action", "kind", "path", "modified_at", "reason"],
                   empty="no staging found")(console)
        verb = "would be removed" if dry_run else "removed"
        console.print(f"{len(removed)} staging director{'y' if len(removed) == 1 else 'ies'} {verb}, "
                      f"{len(entries) - len(removed)} kept")
    obj.emit(data, text)


@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@click.argument("target", required=False)
@click.option("--to-timestamp", "timestamp", type=_Timestamp(), metavar="TIME",
              help="Instead of TARGET: the newest snapshot committed at or before TIME "
                   "(ISO 8601, no offset = UTC, or epoch milliseconds).")
@click.option("--dry-run", is_flag=True, help="Show what would change, change nothing.")
@_common()
@click.pass_obj
def rollback(obj: State, table, target, timestamp, dry_run):
    """Roll TABLE back to TARGET (a snapshot id or a tag name) or to a time.

    Newer snapshots and the tags on them are removed; their files become orphans
    (remove-orphans deletes them later). Commit identities are rewound, so a
    writer re-commits what the rollback removed. Consumers that read beyond the
    target are listed, not moved (see `consumer reset`). Try --dry-run first.
    """
    if (target is None) == (timestamp is None):
        raise click.UsageError("give either TARGET (a snapshot id or tag name) or --to-timestamp TIME")
    path, fs = obj.open(table)
    if dry_run:
        plan = maintenance.plan_rollback(path, target, timestamp, fs)
    else:
        plan = maintenance.rollback_with_plan(path, target, fs, timestamp)
    data = {"dry_run": dry_run, "rolled_back_to": plan.target.id, "target_by": plan.target_by, "tag": plan.tag,
            "target_committed_at": _millis(plan.target.time_millis), "latest_snapshot_before": plan.latest_id,
            "snapshots_removed": plan.snapshots_removed, "tags_removed": plan.tags_removed,
            "rows_before": plan.rows_before, "rows_after": plan.rows_after,
            "commit_users_rewound": [{"commit_user": u, "identifiers": ids} for u, ids in plan.commit_users.items()],
            "consumers_ahead": [{"consumer_id": c, "next_snapshot": n} for c, n in plan.consumers_ahead.items()]}

    def text(console):
        verb = "would roll back" if dry_run else "rolled back"
        console.print(f"{verb} {table} to snapshot {plan.target.id} (committed "
                      f"{_cell(_millis(plan.target.time_millis))}"
                      + (f", tag {plan.tag}" if plan.tag else "") + ")")
        removed = plan.snapshots_removed
        console.print(f"snapshots {'to remove' if dry_run else 'removed'}: "
                      + (f"{len(removed)} ({removed[0]}..{removed[-1]})" if removed else "none"))
        console.print(f"tags {'to remove' if dry_run else 'removed'}: {', '.join(plan.tags_removed) or 'none'}")
        console.print(f"rows: {_cell(plan.rows_before)} -> {_cell(plan.rows_after)}")
        for user, ids in plan.commit_users.items():
            console.print(f"commit user {user}: identifiers {ids[0]}..{ids[-1]} become committable again")
        for consumer, next_snapshot in plan.consumers_ahead.items():
            console.print(f"consumer {consumer} reads next from snapshot {next_snapshot}, beyond the target: "
                          f"`lakesink consumer reset {table} {consumer} --next-snapshot {plan.target.id + 1}` "
                          "to read the new history")
    obj.emit(data, text)


# ---------------------------------------------------------------- tags

@cli.group(epilog=EXIT_CODES)
def tag():
    """Create, delete and list tags (named snapshots that expiry keeps)."""


@tag.command("create", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("name")
@click.option("--snapshot", type=click.IntRange(min=1), help="Snapshot id (default: latest).")
@click.option("--time-retained", help="Expire the tag after this long, e.g. '7 d' (default: the table's "
                                      "tag.default-time-retained, else never).")
@_common()
@click.pass_obj
def tag_create(obj: State, table, name, snapshot, time_retained):
    """Tag a snapshot of TABLE as NAME (the latest unless --snapshot)."""
    if time_retained is not None:
        _duration(time_retained)
    path, fs = obj.open(table)
    tagged = maintenance.create_tag(path, name, snapshot, time_retained, fs)
    obj.emit({"tag": name, "snapshot_id": tagged.id, "committed_at": _millis(tagged.time_millis)})


@tag.command("delete", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("name")
@_common()
@click.pass_obj
def tag_delete(obj: State, table, name):
    """Delete tag NAME of TABLE, and the files only it still kept."""
    path, fs = obj.open(table)
    deleted = maintenance.delete_tag(maintenance.open_table(path, fs), name)
    obj.emit({"deleted_tag": name, "files_deleted": deleted})


@tag.command("list", epilog=EXIT_CODES)
@click.argument("table")
@_common()
@click.pass_obj
def tag_list(obj: State, table):
    """The tags of TABLE: name, snapshot id, when that snapshot was committed."""
    path, fs = obj.open(table)
    tags = maintenance.list_tags(maintenance.open_table(path, fs))
    rows = [{"tag": n, "snapshot_id": t.id, "committed_at": _millis(t.time_millis)}
            for n, t in sorted(tags.items())]
    obj.emit(rows, _rows_text(rows, f"tags of {table}", ["tag", "snapshot_id", "committed_at"]))


# ---------------------------------------------------------------- consumers

@cli.group(epilog=EXIT_CODES)
def consumer():
    """List, reset and clear streaming consumers (consumer/consumer-<id> files).

    A consumer records where a streaming read with that consumer-id continues, and expiry keeps
    the snapshots it still needs. Stop the query first: a running one writes its consumer again.
    """


def _consumer_row(info) -> dict:
    return {"consumer_id": info.consumer_id, "next_snapshot": info.next_snapshot, "modified_at": info.modified_at}


@consumer.command("list", epilog=EXIT_CODES)
@click.argument("table")
@_common()
@click.pass_obj
def consumer_list(obj: State, table):
    """The consumers of TABLE: id, next snapshot to read, last change."""
    path, fs = obj.open(table)
    rows = [_consumer_row(c) for c in maintenance.list_consumers(path, fs)]
    obj.emit(rows, _rows_text(rows, f"consumers of {table}"))


@consumer.command("reset", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("consumer_id")
@click.option("--next-snapshot", type=click.IntRange(min=1), required=True,
              help="The snapshot the consumer reads next (retained, or latest + 1 for only new commits).")
@_common()
@click.pass_obj
def consumer_reset(obj: State, table, consumer_id, next_snapshot):
    """Make consumer CONSUMER_ID of TABLE read next from --next-snapshot (as Paimon's reset_consumer)."""
    path, fs = obj.open(table)
    info = maintenance.reset_consumer(path, consumer_id, next_snapshot, fs)
    obj.emit(_consumer_row(info))


@consumer.command("clear", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("consumer_ids", nargs=-1, metavar="[CONSUMER_ID]...")
@click.option("--including", metavar="REGEX", help="Clear consumers whose whole id matches.")
@click.option("--excluding", metavar="REGEX", help="Keep consumers whose whole id matches.")
@click.option("--all", "everything", is_flag=True, help="Clear every consumer (less --excluding).")
@click.option("--dry-run", is_flag=True, help="Show which would be cleared, clear nothing.")
@_common()
@click.pass_obj
def consumer_clear(obj: State, table, consumer_ids, including, excluding, everything, dry_run):
    """Remove consumers of TABLE, so expiry no longer keeps snapshots for them (as Paimon's
    clear_consumers). A query restarted with a cleared consumer-id starts as a new one."""
    if not (consumer_ids or including or everything):
        raise click.UsageError("say which consumers to clear: CONSUMER_ID..., --including REGEX or --all")
    path, fs = obj.open(table)
    cleared = maintenance.clear_consumers(path, consumer_ids, including, excluding, everything, dry_run, fs)
    rows = [_consumer_row(c) for c in cleared]

    def text(console):
        _rows_text(rows, f"consumers {'to clear' if dry_run else 'cleared'} in {table}")(console)
    obj.emit({"dry_run": dry_run, "cleared": rows, "count": len(rows)}, text)


# ---------------------------------------------------------------- compaction

def _partitions_callback(ctx, param, values):
    specs = []
    for text in values:
        spec = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise click.BadParameter(f"{text!r}: expected KEY=VALUE[,KEY=VALUE], e.g. dt=2024-05-01",
                                         ctx, param)
            spec[key.strip()] = value
        specs.append(spec)
    return specs


@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@click.option("--partition", "partitions", multiple=True, metavar="KEY=VALUE[,KEY=VALUE]",
              callback=_partitions_callback, help="Only this partition (repeatable).")
@click.option("--target-size", default=None, help="e.g. '128 mb' (default: the table's target-file-size).")
@click.option("--local", is_flag=True, help="Rewrite in this process instead of on a Spark session.")
@click.option("--full/--triggered", default=True,
              help="Primary-key tables: compact every bucket (default), or only buckets whose sorted runs "
                   "pass num-sorted-run.compaction-trigger.")
@_common()
@click.pass_obj
def compact(obj: State, table, partitions, target_size, local, full):
    """Rewrite small files into one COMPACT snapshot; safe beside running writers."""
    from .spark.compact import compact as run_compaction
    path, fs = obj.open(table)
    spark = None
    if not local:
        from .spark.session import session
        spark = session("lakesink-compact", None, None)
    with obj.progress() as progress:
        report = run_compaction(spark, path, partitions=partitions or None, target_size=target_size, full=full,
                                progress=(lambda done, total: progress("rewriting", done, total)) if progress else False,
                                options=fs)
    obj.emit({"snapshot_id": report.snapshot_id, "files_removed": report.files_removed,
              "files_added": report.files_added, "rows_rewritten": report.rows_added,
              "bytes_removed": report.bytes_removed, "bytes_added": report.bytes_added,
              "conflicts": report.extra.get("conflicts", 0)})


# ---------------------------------------------------------------- entry points

def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit code (0 ok, 1 failure, 2 usage, 130 interrupted)."""
    return cli.main(args=argv, prog_name="lakesink", standalone_mode=False)


def _entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    _entry()
