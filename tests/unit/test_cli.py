"""The `lakesink` command, through click's CliRunner and through `main()`."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import socket
import time

import click
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


def test_branches_are_created_listed_fast_forwarded_and_deleted(table):
    from lakesink.paimon import PaimonTarget
    from lakesink.protocol.committer import Committer

    assert json.loads(invoke("branch", "create", table, "audit", "-o", "json").output) == \
        {"branch": "audit", "snapshot_id": 3}
    assert invoke("branch", "create", table, "old", "--from-snapshot", "1").exit_code == 0
    assert invoke("branch", "create", table, "blank", "--empty").exit_code == 0
    on_branch = Writer(table, user="auditor")  # its commits go to the branch
    on_branch.target = PaimonTarget(table, branch="audit")
    on_branch.committer = Committer(on_branch.target, "auditor")
    on_branch.next_id = 100
    on_branch.commit(rows=2)

    listed = json.loads(invoke("branch", "list", table, "-o", "json").output)
    assert listed == [{"branch": "audit", "snapshot_id": 4}, {"branch": "blank", "snapshot_id": None},
                      {"branch": "old", "snapshot_id": 1}]
    text = invoke("branch", "list", table).output
    assert "audit" in text and "blank" in text
    assert sorted(read_table(table).column("id").to_pylist()) == [0, 1, 2, 3, 4, 5]

    assert json.loads(invoke("branch", "fast-forward", table, "audit", "-o", "json").output) == \
        {"branch": "audit", "main_snapshot_id": 4}
    assert sorted(read_table(table).column("id").to_pylist()) == [0, 1, 2, 3, 4, 5, 100, 101]
    assert invoke("branch", "delete", table, "old").exit_code == 0
    assert [b["branch"] for b in json.loads(invoke("branch", "list", table, "-o", "json").output)] == \
        ["audit", "blank"]

    missing = CliRunner().invoke(cli, ["branch", "delete", table, "nope", "-o", "json"])
    assert missing.exit_code == 1
    error = json.loads(missing.output)["error"]
    assert error["type"] == "BranchNotFoundError" and "lakesink.branch.create" in error["message"]
    both = CliRunner().invoke(cli, ["branch", "create", table, "x", "--empty", "--from-snapshot", "1"])
    assert both.exit_code == 2 and "at most one" in both.output
    assert not os.path.exists(os.path.join(table, "branch", "branch-x"))


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


# -- conventions -----------------------------------------------------------------------

ISO_MS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"
ISO_S = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00"


def run(*args):
    """Through the runner, as a user's shell would: stdout and stderr apart, exit code kept."""
    return CliRunner().invoke(cli, list(args))


def _commands(group, path=()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def test_version_names_lakesink_and_the_libraries_it_runs_on():
    result = run("--version")
    assert result.exit_code == 0
    assert re.match(r"lakesink \d+\.\d+\.\d+ \(pypaimon \S+, pyarrow \S+, pyspark \S+, Python \S+\)$",
                    result.stdout.strip())


@pytest.mark.parametrize("path", [p for p, _ in _commands(cli)], ids=" ".join)
def test_every_command_and_subcommand_has_help_with_the_exit_codes(path):
    command = dict(_commands(cli))[path]
    assert (command.help or "").strip(), f"{' '.join(path)} has no help text"
    result = run(*path, "--help")
    assert result.exit_code == 0
    assert command.help.strip().splitlines()[0][:40] in result.stdout
    assert "Exit codes:" in result.stdout and "2    usage error" in result.stdout


@pytest.mark.parametrize("args, says", [
    (["compact", "T", "--partition", "dt"], "expected KEY=VALUE"),
    (["history", "T", "--option", "fs.s3.endpoint"], "expected KEY=VALUE"),
    (["history", "T", "--option", "snapshot.num-retained.min=3"], "is not a storage option"),
    (["history", "T", "--option", "commit.allow-unsafe-publication=perhaps"], "commit.allow-unsafe-publication"),
    (["rollback", "T"], "either TARGET"),
    (["rollback", "T", "1", "--to-timestamp", "2024-05-01"], "either TARGET"),
    (["rollback", "T", "--to-timestamp", "yesterday"], "is not a time"),
    (["consumer", "clear", "T"], "say which consumers"),
    (["consumer", "reset", "T", "c"], "--next-snapshot"),
    (["tag", "create", "T", "v1", "--time-retained", "a while"], "is not a duration"),
    (["clean-staging", "T", "--older-than", "soon"], "is not a duration"),
    (["files", "T", "--snapshot", "0"], "--snapshot"),
    (["no-such-command"], "No such command"),
])
def test_usage_errors_exit_2_with_a_usage_message_and_no_traceback(args, says):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "Usage: lakesink" in result.stderr and says in result.stderr
    assert "Traceback" not in result.output and result.stdout == ""


def test_usage_errors_as_json_name_the_option(capsys):
    code, out, _ = run_main(capsys, "-o", "json", "history", "T", "--option", "snapshot.num-retained.min=3")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["type"] == "UsageError" and error["exit_code"] == 2
    assert error["option"] == "snapshot.num-retained.min" and "not a storage option" in error["message"]
    code, out, _ = run_main(capsys, "compact", "T", "--partition", "dt", "--output=json")
    assert code == 2 and json.loads(out)["error"]["option"] == "--partition"


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_is_accepted_before_and_after_the_subcommand(table, tmp_path, capsys, where):
    def args(*rest):
        return ["--debug", *rest] if where == "before" else [*rest, "--debug"]
    assert run_main(capsys, *args("history", table))[0] == 0
    code, _, err = run_main(capsys, *args("history", str(tmp_path / "nothing")))
    assert code == 1 and "Traceback" in err and err.strip().splitlines()[-1].startswith("lakesink: ")


@pytest.mark.parametrize("where", ["before", "after"])
def test_errors_with_json_output_are_one_json_object_with_the_errors_fields(table, tmp_path, capsys, where):
    def args(*rest):
        return ["-o", "json", *rest] if where == "before" else [*rest, "--output", "json"]
    code, out, err = run_main(capsys, *args("rollback", table, "99"))
    assert code == 1 and err == ""
    error = json.loads(out)["error"]
    assert error["type"] == "SnapshotNotFoundError" and "Snapshot 99" in error["message"]
    assert error["snapshot"] == 99 and error["table"] == table and error["exit_code"] == 1
    assert set(error) == {"type", "message", "exit_code", "retryable", "table", "option", "snapshot",
                          "commit_user", "identifier"}
    code, out, _ = run_main(capsys, *args("history", str(tmp_path / "nothing")))
    assert code == 1
    assert json.loads(out)["error"] | {} == json.loads(out)["error"]
    assert json.loads(out)["error"]["type"] == "TableNotFoundError"
    assert json.loads(out)["error"]["table"] == str(tmp_path / "nothing")


def test_times_are_iso_8601_with_t_and_offset_in_json_and_in_text(table):
    assert invoke("tag", "create", table, "v1").exit_code == 0
    rows = json.loads(invoke("history", table, "-o", "json").output)
    assert all(re.fullmatch(ISO_MS, r["committed_at"]) for r in rows)
    tags = json.loads(invoke("tag", "list", table, "-o", "json").output)
    assert re.fullmatch(ISO_MS, tags[0]["committed_at"])
    assert len(re.findall(ISO_S, invoke("history", table).output)) == 3
    assert re.search(ISO_S, invoke("tag", "list", table).output)


def test_text_tables_in_a_pipe_are_not_cut_at_80_columns(table):
    paths = [f["file"] for f in json.loads(invoke("files", table, "-o", "json").output)]
    assert min(len(p) for p in paths) > 80
    result = invoke("files", table)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert all(any(p in line for line in lines) for p in paths) and "…" not in result.output


# -- storage options -----------------------------------------------------------------------

def test_storage_options_reach_a_table_on_s3():
    from tests.s3server import S3Server
    from tests.staged import commit, new_target, stage

    with S3Server() as s3:
        s3.create_bucket("lakesink-cli")
        path, fs_options = "s3://lakesink-cli/wh/db.db/t", s3.fs_options()
        target = new_target(path, fs_options)
        commit(target, "writer", 1, stage(target, [1, 2], "a", "writer"))
        given = [arg for key, value in fs_options.items() for arg in ("--option", f"{key}={value}")]
        result = run("history", path, *given, "-o", "json")
        assert result.exit_code == 0, result.output
        assert [(r["snapshot_id"], r["rows_added"]) for r in json.loads(result.stdout)] == [(1, 2)]
        result = run("--option", f"fs.s3.endpoint={s3.endpoint}", "verify", path, *given[2:])
        assert result.exit_code == 0 and result.stdout.strip() == "ok"


# -- rollback ------------------------------------------------------------------------------

def test_rollback_dry_run_shows_what_would_change_and_changes_nothing(table):
    from lakesink.paimon.read.scan import record_consumer
    from lakesink.paimon.maintenance import open_table

    assert invoke("tag", "create", table, "late", "--snapshot", "3").exit_code == 0
    record_consumer(open_table(table), "silver", 4)
    before = sorted(os.listdir(os.path.join(table, "snapshot")))
    result = invoke("rollback", table, "1", "--dry-run", "-o", "json")
    assert result.exit_code == 0
    plan = json.loads(result.output)
    assert plan["dry_run"] is True and plan["rolled_back_to"] == 1 and plan["target_by"] == "snapshot"
    assert plan["snapshots_removed"] == [2, 3] and plan["tags_removed"] == ["late"]
    assert (plan["rows_before"], plan["rows_after"]) == (6, 2)
    assert plan["commit_users_rewound"] == [{"commit_user": "writer", "identifiers": [1, 2]}]
    assert plan["consumers_ahead"] == [{"consumer_id": "silver", "next_snapshot": 4}]
    assert sorted(os.listdir(os.path.join(table, "snapshot"))) == before
    assert [s.id for s in snapshots(table)] == [1, 2, 3] and read_table(table).num_rows == 6
    text = invoke("rollback", table, "late", "--dry-run").output
    assert "would roll back" in text and "snapshot 3" in text and "tag late" in text


def test_rollback_to_a_timestamp_keeps_the_newest_snapshot_committed_at_or_before_it(table):
    second = snapshots(table)[1]
    expected = max(s.id for s in snapshots(table) if s.time_millis <= second.time_millis)
    at = dt.datetime.fromtimestamp(second.time_millis / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    result = invoke("rollback", table, "--to-timestamp", at, "-o", "json")
    assert result.exit_code == 0
    assert json.loads(result.output)["rolled_back_to"] == expected
    assert snapshots(table)[-1].id == expected and read_table(table).num_rows == 2 * expected


def test_rollback_to_a_time_before_every_snapshot_is_an_error_naming_the_earliest(table, capsys):
    code, _, err = run_main(capsys, "rollback", table, "--to-timestamp", "1000")
    assert code == 1 and "SnapshotNotFoundError" in err and "earliest retained snapshot, 1" in err
    assert [s.id for s in snapshots(table)] == [1, 2, 3]


# -- consumers -----------------------------------------------------------------------------

@pytest.fixture()
def consumers(table):
    from lakesink.paimon.maintenance import open_table
    from lakesink.paimon.read.scan import record_consumer

    for name, next_snapshot in (("silver", 2), ("gold", 3), ("audit-1", 4)):
        record_consumer(open_table(table), name, next_snapshot)
    return table


def _consumer_files(table):
    return sorted(os.listdir(os.path.join(table, "consumer")))


def test_consumers_are_listed_reset_and_checked(consumers, capsys):
    listed = json.loads(invoke("consumer", "list", consumers, "-o", "json").output)
    assert [(c["consumer_id"], c["next_snapshot"]) for c in listed] == [("audit-1", 4), ("gold", 3), ("silver", 2)]
    assert all(re.fullmatch(ISO_MS, c["modified_at"]) for c in listed)
    assert invoke("consumer", "reset", consumers, "silver", "--next-snapshot", "3").exit_code == 0
    with open(os.path.join(consumers, "consumer", "consumer-silver")) as src:
        assert json.load(src)["nextSnapshot"] == 3
    code, _, err = run_main(capsys, "consumer", "reset", consumers, "silver", "--next-snapshot", "9")
    assert code == 1 and "SnapshotNotFoundError" in err and "from snapshot 1 to 4" in err
    code, _, err = run_main(capsys, "consumer", "reset", consumers, "bronze", "--next-snapshot", "2")
    assert code == 1 and "ConsumerNotFoundError" in err and "audit-1, gold, silver" in err


def test_consumers_are_cleared_by_name_by_pattern_or_all_and_a_dry_run_clears_none(consumers):
    result = invoke("consumer", "clear", consumers, "--all", "--excluding", "gold", "--dry-run", "-o", "json")
    assert [c["consumer_id"] for c in json.loads(result.output)["cleared"]] == ["audit-1", "silver"]
    assert _consumer_files(consumers) == ["consumer-audit-1", "consumer-gold", "consumer-silver"]
    assert invoke("consumer", "clear", consumers, "--including", "audit-.*").exit_code == 0
    assert _consumer_files(consumers) == ["consumer-gold", "consumer-silver"]
    assert invoke("consumer", "clear", consumers, "silver").exit_code == 0
    assert _consumer_files(consumers) == ["consumer-gold"]
    assert invoke("consumer", "clear", consumers, "--all").exit_code == 0
    assert _consumer_files(consumers) == []
    assert read_table(consumers).num_rows == 6


# -- clean-staging ---------------------------------------------------------------------------

DAY = 86400


def _staging(table, name, age_s):
    directory = os.path.join(table, "_lakesink", "staging", name)
    os.makedirs(directory, exist_ok=True)
    data = os.path.join(directory, "part-0.parquet")
    with open(data, "wb") as out:
        out.write(b"x")
    when = time.time() - age_s
    os.utime(data, (when, when))
    os.utime(directory, (when, when))
    return directory


def _stream_token(user):
    return hashlib.sha256(user.encode()).hexdigest()[:12]


def test_clean_staging_removes_old_batch_job_staging_and_keeps_what_a_running_job_may_use(table):
    old = _staging(table, "a" * 16, 2 * DAY)
    young = _staging(table, "b" * 16, 60)
    result = invoke("clean-staging", table, "--dry-run", "-o", "json")
    assert result.exit_code == 0
    report = json.loads(result.output)
    actions = {e["path"]: e["action"] for e in report["entries"]}
    assert actions == {old: "would remove", young: "kept"}
    assert os.path.exists(old)
    assert invoke("clean-staging", table).exit_code == 0
    assert not os.path.exists(old) and os.path.exists(young)
    assert invoke("clean-staging", table, "--older-than", "30 s").exit_code == 0
    assert not os.path.exists(young)
    assert read_table(table).num_rows == 6


def test_clean_staging_keeps_a_streams_uncommitted_batches_unless_asked(table):
    token = _stream_token("writer")  # the fixture's writer committed identifiers 0, 1, 2
    committed = _staging(table, f"{token}-b1", 60)
    pending = _staging(table, f"{token}-b5", 2 * DAY)
    unknown = _staging(table, "c" * 12 + "-b3", 2 * DAY)
    result = invoke("clean-staging", table, "-o", "json")
    assert result.exit_code == 0
    entries = {e["path"]: e for e in json.loads(result.output)["entries"]}
    assert entries[committed]["action"] == "removed" and "committed up to identifier 2" in entries[committed]["reason"]
    assert entries[pending]["action"] == "kept" and "--include-pending" in entries[pending]["reason"]
    assert entries[unknown]["action"] == "kept"
    assert not os.path.exists(committed) and os.path.exists(pending) and os.path.exists(unknown)
    text = invoke("clean-staging", table, "--include-pending").output
    assert "2 staging directories removed, 0 kept" in text
    assert not os.path.exists(pending) and not os.path.exists(unknown)


def test_clean_staging_removes_a_dead_create_table_as_beside_a_table_that_never_appeared(tmp_path):
    target = str(tmp_path / "db.db" / "daily")
    def staged(token, pid, age_s):
        directory = tmp_path / "db.db" / f".daily.lakesink-staging-{token}"
        directory.mkdir(parents=True)
        (directory / "STAGED.json").write_text(json.dumps({
            "format": "lakesink.staged-table", "version": 1, "target": target, "pid": pid,
            "host": socket.gethostname(), "created_at": time.time() - age_s}))
        return str(directory)
    running = staged("running", os.getpid(), 60)
    old = staged("old", os.getpid(), 2 * DAY)
    result = invoke("clean-staging", target, "-o", "json")
    assert result.exit_code == 0
    entries = {e["path"]: e for e in json.loads(result.output)["entries"]}
    assert entries[old]["action"] == "removed" and entries[old]["kind"] == "staged-table"
    assert entries[running]["action"] == "kept" and "may still run" in entries[running]["reason"]
    assert os.path.exists(running) and not os.path.exists(old)


def test_docs_cli_describes_every_command_and_every_exit_code():
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    headings = [line for line in page.splitlines() if line.startswith("### `")]
    missing = [" ".join(path) for path, command in _commands(cli) if not isinstance(command, click.Group)
               and not any(f"`{' '.join(path)} " in h or f"`{' '.join(path)}`" in h for h in headings)]
    assert missing == []
    assert all(re.search(rf"^\| {code} \|", page, re.M) for code in (0, 1, 2, 130))


def test_a_table_named_through_the_catalog_is_the_same_table_as_its_path(table, table_path):
    warehouse = os.path.dirname(os.path.dirname(table_path))  # <warehouse>/db.db/t
    by_path = json.loads(invoke("-o", "json", "history", table).output)
    by_name = json.loads(invoke("-o", "json", "history", "db.t", "--catalog", f"warehouse={warehouse}").output)
    assert by_name == by_path and len(by_name) == 3
    before = json.loads(invoke("--catalog", f"warehouse={warehouse}", "-o", "json", "files", "db.t").output)
    assert before == json.loads(invoke("-o", "json", "files", table).output)


def test_a_name_without_a_catalog_is_a_clear_error_not_a_directory(table):
    result = CliRunner().invoke(cli, ["-o", "json", "history", "db.t"])
    error = json.loads(result.output)["error"]
    assert result.exit_code == 1 and "catalog" in error["message"].lower()
    result = CliRunner().invoke(cli, ["history", "db.t", "--catalog", "warehouse"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
