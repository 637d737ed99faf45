"""Option types of the `lakesink` command and the options every command takes."""

from __future__ import annotations

import datetime as dt

import click

from .. import options as registry
from ..errors import ConfigurationError
from .output import State


def parse_duration_text(text: str) -> dt.timedelta:
    from pypaimon.common.time_utils import parse_duration
    try:
        return dt.timedelta(milliseconds=parse_duration(text))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration such as '1 d', '12 h', '30 min'") from None


class Duration(click.ParamType):
    name = "DURATION"

    def convert(self, value, param, ctx):
        if isinstance(value, dt.timedelta):
            return value
        return parse_duration_text(str(value))


class Timestamp(click.ParamType):
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


def storage_option_callback(ctx, param, values):
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


def catalog_option_callback(ctx, param, values):
    for text in values or ():
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise OptionUsageError(f"{text!r}: expected KEY=VALUE, e.g. warehouse=/data/wh or "
                                   "metastore=jdbc", None, param)
        ctx.find_object(State).catalog[key.strip()] = value
    return values


def output_callback(ctx, _param, value):
    if value is not None:
        ctx.find_object(State).output = value
    return value


def debug_callback(ctx, _param, value):
    if value:
        ctx.find_object(State).debug = True
    return value


def common_options(opens_table: bool = True):
    """`--output`, `--debug` and (for commands that open a table) `--option`, accepted after
    the subcommand as well as before it."""
    def decorate(f):
        f = click.option("--debug", is_flag=True, expose_value=False, callback=debug_callback,
                         help="Show the full trace of an error.")(f)
        f = click.option("--output", "-o", type=click.Choice(["text", "json"]), default=None, expose_value=False,
                         callback=output_callback, help="text (default) or json.")(f)
        if opens_table:
            f = click.option("--option", "storage_options", multiple=True, metavar="KEY=VALUE",
                             expose_value=False, callback=storage_option_callback,
                             help="Storage option to reach the table, e.g. fs.s3.endpoint=URL, "
                                  "fs.s3.accessKeyId=ID (repeatable).")(f)
            f = click.option("--catalog", "catalog_options", multiple=True, metavar="KEY=VALUE",
                             expose_value=False, callback=catalog_option_callback,
                             help="Catalog option, to name TABLE as db.table: warehouse=/data/wh, "
                                  "metastore=jdbc, uri=jdbc:sqlite:/data/wh/catalog.db (repeatable; "
                                  "docs/catalogs.md).")(f)
        return f
    return decorate
