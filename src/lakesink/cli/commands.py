"""The commands of `lakesink`: inspecting tables, maintenance, tags, branches, consumers, compaction."""

from __future__ import annotations

import importlib

import click

from .group import EXIT_CODES, EXIT_FAILURE, cli
from .output import State, arrow_text, cell, from_millis, rows_text
from .params import Duration, Timestamp, common_options, parse_duration_text


class _OnFirstUse:
    """A module imported when a command first uses it: `lakesink --help` loads no pypaimon."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


maintenance = _OnFirstUse("lakesink.paimon.maintenance")


@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@click.option("--plot", type=click.Path(dir_okay=False), help="Also draw rows, files and commit duration to a PNG.")
@common_options()
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
    obj.emit(result.to_pylist(), arrow_text(shown, f"history of {table}"))


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
@common_options()
@click.pass_obj
def files(obj: State, table, snapshot):
    """The data files of a snapshot: partition, bucket, path, rows, bytes, level."""
    path, fs = obj.open(table)
    result = maintenance.files(path, snapshot, fs)
    obj.emit(result.to_pylist(), arrow_text(result, f"data files of {table}"))


@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@common_options()
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
@common_options()
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
@click.option("--older-than", type=Duration(), default="1 d", show_default=True,
              help="Only files older than this.")
@click.option("--dry-run", is_flag=True, help="List them, delete nothing.")
@common_options()
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
@click.option("--older-than", type=Duration(), default=None, show_default="1 h; a table's job staging: 1 d",
              help="Staging changed more recently than this (a CREATE TABLE AS staged table: started) may "
                   "belong to a running job: kept. A CREATE TABLE AS reservation (JDBC catalog on an "
                   "object store) is kept while its job beat more recently than this (it beats every 30 s).")
@click.option("--dry-run", is_flag=True, help="Show what would be removed, remove nothing.")
@click.option("--include-pending", is_flag=True,
              help="Also remove (old) staging a stopped streaming query's checkpoint may still commit; "
                   "that query then fails on restart instead of committing it.")
@common_options()
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
    from ..paimon.catalog import cleanup
    from ..protocol.staging import STAGING_AGE
    # A table's job staging (no owner, no heartbeat) keeps its own longer default, applied by
    # maintenance.clean_staging; CREATE TABLE AS staging has every clean_staging's (an hour).
    ctas_age = STAGING_AGE if older_than is None else older_than
    if table is None:
        if not obj.catalog:
            raise click.UsageError("Give TABLE, or --catalog KEY=VALUE... without TABLE to clean what dead "
                                   "CREATE TABLE AS jobs left in the whole catalog.")
        if include_pending:
            raise click.UsageError("--include-pending is about a table's streaming staging: give TABLE.")
        entries = cleanup.clean_catalog(obj.open_catalog(), ctas_age, dry_run=dry_run)
        title = "staging of the catalog"
    else:
        path, fs = obj.open(table)
        entries = maintenance.clean_staging(path, older_than, dry_run=dry_run, include_pending=include_pending,
                                            fs_options=fs)
        name = obj.resolved.name if obj.resolved is not None else None
        if name is not None:
            entries += cleanup.clean_name(obj.open_catalog(), name.database, name.table, ctas_age,
                                          dry_run=dry_run)
        title = f"staging of {table}"
    removed = [e for e in entries if e.remove]
    rows = [{"path": e.path, "kind": e.kind, "modified_at": e.modified_at,
             "action": ("would remove" if dry_run else "removed") if e.remove else "kept", "reason": e.reason}
            for e in entries]
    data = {"dry_run": dry_run, "removed_count": len(removed), "kept_count": len(entries) - len(removed),
            "entries": rows}

    def text(console):
        rows_text(rows, title, ["action", "kind", "path", "modified_at", "reason"],
                   empty="no staging found")(console)
        verb = "would be removed" if dry_run else "removed"
        console.print(f"{len(removed)} staging director{'y' if len(removed) == 1 else 'ies'} {verb}, "
                      f"{len(entries) - len(removed)} kept")
    obj.emit(data, text)


@cli.command(epilog=EXIT_CODES)
@click.argument("table")
@click.argument("target", required=False)
@click.option("--to-timestamp", "timestamp", type=Timestamp(), metavar="TIME",
              help="Instead of TARGET: the newest snapshot committed at or before TIME "
                   "(ISO 8601, no offset = UTC, or epoch milliseconds).")
@click.option("--dry-run", is_flag=True, help="Show what would change, change nothing.")
@common_options()
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
            "target_committed_at": from_millis(plan.target.time_millis), "latest_snapshot_before": plan.latest_id,
            "snapshots_removed": plan.snapshots_removed, "tags_removed": plan.tags_removed,
            "rows_before": plan.rows_before, "rows_after": plan.rows_after,
            "commit_users_rewound": [{"commit_user": u, "identifiers": ids} for u, ids in plan.commit_users.items()],
            "consumers_ahead": [{"consumer_id": c, "next_snapshot": n} for c, n in plan.consumers_ahead.items()]}

    def text(console):
        verb = "would roll back" if dry_run else "rolled back"
        console.print(f"{verb} {table} to snapshot {plan.target.id} (committed "
                      f"{cell(from_millis(plan.target.time_millis))}"
                      + (f", tag {plan.tag}" if plan.tag else "") + ")")
        removed = plan.snapshots_removed
        console.print(f"snapshots {'to remove' if dry_run else 'removed'}: "
                      + (f"{len(removed)} ({removed[0]}..{removed[-1]})" if removed else "none"))
        console.print(f"tags {'to remove' if dry_run else 'removed'}: {', '.join(plan.tags_removed) or 'none'}")
        console.print(f"rows: {cell(plan.rows_before)} -> {cell(plan.rows_after)}")
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
@common_options()
@click.pass_obj
def tag_create(obj: State, table, name, snapshot, time_retained):
    """Tag a snapshot of TABLE as NAME (the latest unless --snapshot)."""
    if time_retained is not None:
        parse_duration_text(time_retained)
    path, fs = obj.open(table)
    tagged = maintenance.create_tag(path, name, snapshot, time_retained, fs)
    obj.emit({"tag": name, "snapshot_id": tagged.id, "committed_at": from_millis(tagged.time_millis)})


@tag.command("delete", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("name")
@common_options()
@click.pass_obj
def tag_delete(obj: State, table, name):
    """Delete tag NAME of TABLE, and the files only it still kept."""
    path, fs = obj.open(table)
    deleted = maintenance.delete_tag(maintenance.open_table(path, fs), name)
    obj.emit({"deleted_tag": name, "files_deleted": deleted})


@tag.command("list", epilog=EXIT_CODES)
@click.argument("table")
@common_options()
@click.pass_obj
def tag_list(obj: State, table):
    """The tags of TABLE: name, snapshot id, when that snapshot was committed."""
    path, fs = obj.open(table)
    tags = maintenance.list_tags(maintenance.open_table(path, fs))
    rows = [{"tag": n, "snapshot_id": t.id, "committed_at": from_millis(t.time_millis)}
            for n, t in sorted(tags.items())]
    obj.emit(rows, rows_text(rows, f"tags of {table}", ["tag", "snapshot_id", "committed_at"]))


# ---------------------------------------------------------------- branches

@cli.group(epilog=EXIT_CODES)
def branch():
    """Create, list, delete and fast-forward Paimon branches (<table>/branch/branch-<name>/)."""


@branch.command("create", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("name")
@click.option("--from-tag", "from_tag", metavar="TAG", help="Start at this tag (copied into the branch).")
@click.option("--from-snapshot", "from_snapshot", type=click.IntRange(min=1), metavar="ID",
              help="Start at this snapshot of main.")
@click.option("--empty", is_flag=True, help="Paimon's empty branch: main's schema, no rows.")
@common_options()
@click.pass_obj
def branch_create(obj: State, table, name, from_tag, from_snapshot, empty):
    """Create branch NAME of TABLE, at main's latest snapshot unless told otherwise."""
    if sum(x is not None for x in (from_tag, from_snapshot)) + bool(empty) > 1:
        raise click.UsageError("give at most one of --from-tag, --from-snapshot and --empty")
    path, fs = obj.open(table)
    snapshot = maintenance.create_branch(path, name, from_tag=from_tag, from_snapshot=from_snapshot, empty=empty,
                                         fs_options=fs)
    obj.emit({"branch": name, "snapshot_id": snapshot.id if snapshot is not None else None})


@branch.command("list", epilog=EXIT_CODES)
@click.argument("table")
@common_options()
@click.pass_obj
def branch_list(obj: State, table):
    """The branches of TABLE (main not included) and the latest snapshot of each."""
    path, fs = obj.open(table)
    rows = [{"branch": n, "snapshot_id": s} for n, s in maintenance.branch_heads(path, fs)]
    obj.emit(rows, rows_text(rows, f"branches of {table}", ["branch", "snapshot_id"]))


@branch.command("delete", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("name")
@common_options()
@click.pass_obj
def branch_delete(obj: State, table, name):
    """Delete branch NAME of TABLE; files only it used become orphans (`lakesink remove-orphans`)."""
    path, fs = obj.open(table)
    maintenance.delete_branch(path, name, fs)
    obj.emit({"deleted_branch": name})


@branch.command("fast-forward", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("name")
@common_options()
@click.pass_obj
def branch_fast_forward(obj: State, table, name):
    """Make main of TABLE the state of branch NAME (main's snapshots from the branch's earliest on
    are replaced by the branch's)."""
    path, fs = obj.open(table)
    latest = maintenance.fast_forward_branch(path, name, fs)
    obj.emit({"branch": name, "main_snapshot_id": latest.id})


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
@common_options()
@click.pass_obj
def consumer_list(obj: State, table):
    """The consumers of TABLE: id, next snapshot to read, last change."""
    path, fs = obj.open(table)
    rows = [_consumer_row(c) for c in maintenance.list_consumers(path, fs)]
    obj.emit(rows, rows_text(rows, f"consumers of {table}"))


@consumer.command("reset", epilog=EXIT_CODES)
@click.argument("table")
@click.argument("consumer_id")
@click.option("--next-snapshot", type=click.IntRange(min=1), required=True,
              help="The snapshot the consumer reads next (retained, or latest + 1 for only new commits).")
@common_options()
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
@common_options()
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
        rows_text(rows, f"consumers {'to clear' if dry_run else 'cleared'} in {table}")(console)
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
@click.option("--branch", "branch_name", metavar="NAME", help="Compact this Paimon branch (default: main).")
@common_options()
@click.pass_obj
def compact(obj: State, table, partitions, target_size, local, full, branch_name):
    """Rewrite small files into one COMPACT snapshot; safe beside running writers."""
    from ..spark.compact import compact as run_compaction
    path, fs = obj.open(table)
    spark = None
    if not local:
        from ..spark.session import session
        spark = session("lakesink-compact", None, None)
    with obj.progress() as progress:
        report = run_compaction(spark, path, partitions=partitions or None, target_size=target_size, full=full,
                                progress=(lambda done, total: progress("rewriting", done, total)) if progress else False,
                                options={**(fs or {}), **({"branch": branch_name} if branch_name else {})})
    obj.emit({"snapshot_id": report.snapshot_id, "files_removed": report.files_removed,
              "files_added": report.files_added, "rows_rewritten": report.rows_added,
              "bytes_removed": report.bytes_removed, "bytes_added": report.bytes_added,
              "conflicts": report.extra.get("conflicts", 0)})
