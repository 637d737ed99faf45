"""The `lakesink` command: inspect and maintain Paimon tables.

    lakesink history /data/wh/db.db/orders
    lakesink expire /data/wh/db.db/orders --output json
    lakesink remove-orphans /data/wh/db.db/orders --dry-run --older-than 2d
    lakesink verify s3://bucket/wh/db.db/orders --option fs.s3.endpoint=http://minio:9000

Exit codes: 0 ok, 1 failure (including `verify` finding problems), 2 usage,
130 interrupted. Errors are one line on stderr (`--debug` shows the full trace);
with `--output json` they are a JSON object on stdout. docs/cli.md has it all.

The package: `output` (one run's state and how results print: text or JSON), `params`
(option types and the options every command takes), `group` (the `lakesink` group: every
error becomes one message and one exit code there), `commands` (the commands).
"""

from __future__ import annotations

from . import commands  # noqa: F401 - registers the commands on the group
from .group import cli, main

__all__ = ["cli", "main"]
