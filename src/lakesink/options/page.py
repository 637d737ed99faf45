"""docs/options.md's tables, generated from the declarations (`python -m lakesink.options`)."""

from __future__ import annotations

from pathlib import Path

from .declarations import (CATALOG_FAMILY_DOC, REFUSED, REGISTRY, SCOPES, STORAGE_FAMILY_DOC,
                           Option)
from .unhonoured import UNHONOURED

BEGIN, END = "<!-- BEGIN GENERATED: python -m lakesink.options -->", "<!-- END GENERATED -->"


def default_text(opt: Option) -> str:
    if opt.default_text is not None:
        return opt.default_text
    if isinstance(opt.default, bool):
        return f"`{str(opt.default).lower()}`"
    if opt.default is None or opt.default == []:
        return "none"
    return f"`{opt.default}`"


def render_markdown() -> str:
    """The option tables of docs/options.md, one per scope."""
    lines = [BEGIN]
    for scope, title in SCOPES.items():
        lines += ["", f"### {title}", "", "| key | default | meaning |", "|---|---|---|"]
        for opt in REGISTRY.values():
            if opt.scope != scope:
                continue
            key = f"`{opt.key}`" + "".join(f" (`{a}`)" for a in opt.aliases)
            lines.append(f"| {key} | {default_text(opt)} | {opt.doc} |")
        if scope == "storage":
            lines.append(f"| `fs.*`, `s3.*` | none | {STORAGE_FAMILY_DOC} |")
        if scope == "catalog":
            lines.append(f"| `jdbc.*` | none | {CATALOG_FAMILY_DOC} |")
    lines += ["", "### Names lakesink refuses", "",
              "Spark's, Delta's or Paimon's names for an idea lakesink has differently: given where "
              "listed, they fail with `UnsupportedOptionError` naming lakesink's option.", "",
              "| key | refused in | use instead |", "|---|---|---|"]
    for refused in REFUSED.values():
        lines.append(f"| `{refused.key}` | {', '.join(f'`{s}`' for s in refused.scopes)} | {refused.reason} |")
    lines += ["", "### Table options lakesink cannot honour yet", "",
              "Refused with the values shown as refused, whether given to a write that creates the table, "
              "to a write into an existing table, or held by an existing table: never accepted and then "
              "ignored.", "", "| key | written | why refused otherwise |", "|---|---|---|"]
    for entry in UNHONOURED.values():
        written = ", ".join([f"`{v}`" for v in entry.honoured] + ([entry.honoured_doc] if entry.honoured_doc else []))
        lines.append(f"| `{entry.key}` | {written} | {entry.reason} |")
    lines += ["", END]
    return "\n".join(lines)


def write_page(page: Path) -> None:
    """Replace the generated part of `page` (docs/options.md) with the tables of today's declarations."""
    text = page.read_text()
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    page.write_text(text[:start] + render_markdown() + text[stop:])

