"""The `lakesink` group: global options, and the one place every error becomes a message
and an exit code."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Sequence

import click

from ..errors import LakesinkError
from .output import State, to_json
from .params import catalog_option_callback, debug_callback, output_callback, storage_option_callback

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

    from .. import __version__

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
              callback=output_callback, help="text (default) or json; also accepted after the command.")
@click.option("--debug", is_flag=True, expose_value=False, callback=debug_callback,
              help="Show the full trace of an error; also accepted after the command.")
@click.option("--option", "storage_options", multiple=True, metavar="KEY=VALUE", expose_value=False,
              callback=storage_option_callback,
              help="Storage option to reach tables (repeatable), e.g. fs.s3.endpoint=URL; "
                   "also accepted after the command.")
@click.option("--catalog", "catalog_options", multiple=True, metavar="KEY=VALUE", expose_value=False,
              callback=catalog_option_callback,
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


def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit code (0 ok, 1 failure, 2 usage, 130 interrupted)."""
    return cli.main(args=argv, prog_name="lakesink", standalone_mode=False)

