"""Every code block in the README and docs/ runs, or says why it cannot.

A block of code (python, bash, sh, sql) either runs here or is preceded by a
line `<!-- not run: <reason> -->`. Python blocks of one page run in order in
one namespace holding the shared `spark` session and `lakesink`, with their
working directory in a scratch directory, and every path literal under `/data/`
or `/tmp/lakesink-` moved into that scratch directory. Bash blocks run line by
line: each `lakesink ...` command through the CLI's own runner, in the same
scratch directory. Output listings (`text`, `json`, no language) are not code.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = {"python", "bash", "sh", "sql"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")


def blocks(page: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, reason it is not run) for each fenced block of `page`."""
    out, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match or not match.group(1):
            i += 1
            continue
        start, language = i, match.group(1)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        reason = NOT_RUN.search(previous)
        out.append((start + 1, language, "\n".join(lines[start + 1:end]), reason.group(1) if reason else None))
        i = end + 1
    return out


def _sandboxed(code: str, scratch: Path) -> str:
    code = code.replace('"/data/', f'"{scratch}/data/').replace("'/data/", f"'{scratch}/data/")
    return code.replace('"/tmp/lakesink-', f'"{scratch}/tmp-lakesink-')


@contextlib.contextmanager
def _cwd(path: Path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _run_bash(code: str, scratch: Path, where: str) -> None:
    from click.testing import CliRunner

    from lakesink.cli import cli
    for line in code.replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(_sandboxed(line, scratch).replace(" /data/", f" {scratch}/data/"))
        assert words[0] == "lakesink", f"{where}: only lakesink commands run here; mark the block `not run`"
        result = CliRunner().invoke(cli, words[1:], catch_exceptions=False)
        assert result.exit_code == 0, f"{where}: `{line}` exited {result.exit_code}:\n{result.output}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_code_block_of_the_page_runs_or_says_why_not(page, spark, tmp_path):
    import lakesink

    namespace = {"spark": spark, "lakesink": lakesink, "__name__": "__docs__"}
    ran = 0
    for line, language, code, reason in blocks(page):
        if language not in CODE:
            continue
        where = f"{page.relative_to(ROOT)}:{line}"
        if reason is not None:
            continue
        assert language in ("python", "bash", "sh"), f"{where}: a {language} block must be marked `not run`"
        with _cwd(tmp_path):
            if language == "python":
                exec(compile(_sandboxed(code, tmp_path), where, "exec"), namespace)
            else:
                _run_bash(code, tmp_path, where)
        ran += 1
    print(f"{page.name}: {ran} blocks ran")


def test_the_not_run_marker_is_found():
    page = "text\n<!-- not run: needs a cluster -->\n```python\nx = 1\n```\n```python\ny = 2\n```\n"
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"lakesink-docs-probe-{os.getpid()}.md"
    path.write_text(page)
    try:
        assert [(lang, reason) for _, lang, _, reason in blocks(path)] == [("python", "needs a cluster"),
                                                                           ("python", None)]
    finally:
        path.unlink()
