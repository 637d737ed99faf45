"""The `lakesink` command, through click's CliRunner and through `main()`."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from lakesink.cli import cli, main
from tests.helpers import read_table, snapshots
from tests.unit.test_maintenance import Writer


@pytest.fixture()
def table(table_path):
    writer = Writer(table_path)
    for _ in range(3):
        writer.commit(rows=2)
    return table_path


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_main(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_history_as_json_has_one_row_per_snapshot(table):
    result = invoke("history", table, "--output", "json")
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [r["snapshot_id"] for r in rows] == [1, 2, 3]
    assert all(r["rows_added"] == 2 and r["commit_user"] == "writer" for r in rows)


def test_history_as_text_shows_a_table(table):
    result = invoke("history", table)
    assert result.exit_code == 0
    assert "APPEND" in result.output and "writer" in result.output


def test_history_plot_without_matplotlib_says_how_to_install_it(table, tmp_path, capsys):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        code, _, err = run_main(capsys, "history", table, "--plot", str(tmp_path / "h.png"))
        assert code == 1
        assert "pip install 'lakesink[plot]'" in err
    else:
        code, _, _ = run_main(capsys, "history", table, "--plot", str(tmp_path / "h.png"))
        assert code == 0 and os.path.getsize(tmp_path / "h.png") > 0


def test_files_lists_the_data_files_of_the_latest_snapshot(table):
    result = invoke("-o", "json", "files", table)
    assert result.exit_code == 0
    files = json.loads(result.output)
    assert len(files) == 3 and all(os.path.exists(f["file"]) and f["rows"] == 2 for f in files)


def test_verify_exits_0_on_a_sound_table_and_1_when_a_data_file_is_missing(table, capsys):
    assert run_main(capsys, "verify", table)[0] == 0
    victim = json.loads(invoke("-o", "json", "files", table).output)[0]["file"]
    os.remove(victim)
    code, out, _ = run_main(capsys, "verify", table, "--output", "json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and victim in report["problems"][0]


def test_expire_uses_the_tables_retention_options(table_path):
    writer = Writer(table_path, {"snapshot.num-retained.min": "2", "snapshot.num-retained.max": "2"})
    for _ in range(5):
        writer.commit()
    result = invoke("expire", table_path, "-o", "json")
    assert result.exit_code == 0
    assert json.loads(result.output)["snapshots_expired"] == 3
    assert [s.id for s in snapshots(table_path)] == [4, 5]
    assert read_table(table_path).num_rows == 5


def test_tags_can_be_created_listed_and_deleted(table):
    assert invoke("tag", "create", table, "v1", "--snapshot", "2").exit_code == 0
    listed = json.loads(invoke("tag", "list", table, "-o", "json").output)
    assert [(t["tag"], t["snapshot_id"]) for t in listed] == [("v1", 2)]
    assert invoke("tag", "delete", table, "v1").exit_code == 0
    assert json.loads(invoke("tag", "list", table, "-o", "json").output) == []


def test_rollback_to_a_snapshot_removes_the_newer_ones(table):
    assert invoke("rollback", table, "1").exit_code == 0
    assert [s.id for s in snapshots(table)] == [1]
    assert read_table(table).num_rows == 2


def test_remove_orphans_dry_run_lists_and_keeps_them(table):
    orphan = os.path.join(table, "manifest", "manifest-orphan-0")
    with open(orphan, "wb") as out:
        out.write(b"x")
    os.utime(orphan, (1, 1))
    result = invoke("remove-orphans", table, "--dry-run", "--older-than", "1 h", "-o", "json")
    assert result.exit_code == 0
    assert json.loads(result.output)["orphans"] == [orphan]
    assert os.path.exists(orphan)
    assert invoke("remove-orphans", table, "--older-than", "1 h").exit_code == 0
    assert not os.path.exists(orphan)
    assert read_table(table).num_rows == 6


def test_a_failure_is_one_line_with_exit_code_1_and_the_trace_only_with_debug(tmp_path, capsys):
    code, _, err = run_main(capsys, "history", str(tmp_path / "nothing"))
    assert code == 1
    assert err.count("\n") == 1 and "No Paimon table" in err
    code, _, err = run_main(capsys, "--debug", "history", str(tmp_path / "nothing"))
    assert code == 1 and "Traceback" in err


def test_usage_errors_exit_with_2(table, capsys):
    assert run_main(capsys, "no-such-command")[0] == 2
    assert run_main(capsys, "remove-orphans", table, "--older-than", "soon")[0] == 2
    assert run_main(capsys, "history")[0] == 2
