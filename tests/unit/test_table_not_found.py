"""A missing table is one error, `TableNotFoundError`, on every entry point that needs one: the
Python API, the CLI's commands, by path and by catalog name (Spark's entry points are in
tests/spark/test_bad_input.py)."""

from __future__ import annotations

import json

import pytest

import lakesink
from lakesink.cli import main
from lakesink.errors import NotAPaimonTableError, TableNotFoundError

CLI = {
    "history": ["history", "{t}"],
    "files": ["files", "{t}"],
    "verify": ["verify", "{t}"],
    "expire": ["expire", "{t}"],
    "remove-orphans": ["remove-orphans", "{t}", "--dry-run"],
    "rollback": ["rollback", "{t}", "1"],
    "tag create": ["tag", "create", "{t}", "v1"],
    "tag delete": ["tag", "delete", "{t}", "v1"],
    "tag list": ["tag", "list", "{t}"],
    "consumer list": ["consumer", "list", "{t}"],
    "consumer reset": ["consumer", "reset", "{t}", "c1", "--next-snapshot", "1"],
    "consumer clear": ["consumer", "clear", "{t}", "--all"],
    "compact --local": ["compact", "{t}", "--local"],
}


@pytest.fixture(params=["path", "name"])
def missing(request, tmp_path):
    """(table as given, catalog options or None): a path where nothing is, or a name a catalog lacks."""
    warehouse = tmp_path / "wh"
    (warehouse / "db.db").mkdir(parents=True)
    if request.param == "path":
        return str(warehouse / "db.db" / "nothing"), None
    return "db.nothing", {"warehouse": str(warehouse)}


@pytest.mark.parametrize("command", list(CLI))
def test_every_cli_command_reports_a_missing_table_as_table_not_found(command, missing, capsys):
    table, catalog = missing
    args = [a.format(t=table) for a in CLI[command]]
    options = [f"--catalog=warehouse={catalog['warehouse']}"] if catalog else []
    code = main(["-o", "json", *options, *args])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 1 and error["type"] == "TableNotFoundError", error
    assert "nothing" in error["message"]


API = {
    "lakesink.history": lambda table, catalog: lakesink.history(table, catalog=catalog),
    "lakesink.compact (spark=None)": lambda table, catalog: lakesink.compact(
        None, lakesink.resolve_table(table, catalog).path, progress=False),
    "catalog.open": lambda table, catalog: lakesink.catalog(catalog).open(table),
}


@pytest.mark.parametrize("entry", list(API))
def test_every_python_entry_point_raises_table_not_found_for_a_missing_table(entry, missing):
    table, catalog = missing
    if entry == "catalog.open" and catalog is None:
        pytest.skip("a catalog opens names")
    with pytest.raises(TableNotFoundError, match="nothing"):
        API[entry](table, catalog)


def test_a_directory_holding_something_else_is_not_a_paimon_table_rather_than_missing(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "data.csv").write_text("a,b\n")
    with pytest.raises(NotAPaimonTableError):
        lakesink.history(str(tmp_path / "t"))
