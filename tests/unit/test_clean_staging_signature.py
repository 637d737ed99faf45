"""Every public `clean_staging` takes one `older_than`: a timedelta, or seconds as before; an hour by
default; `older_than_s`, the former keyword, still read with a DeprecationWarning. Checked on the
staged tables of CREATE TABLE AS jobs under a database directory and in a filesystem catalog."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import os
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import lakesink
import lakesink.jdbc
from lakesink.cli import cli
from lakesink.errors import ConfigurationError
from lakesink.paimon.catalog.catalog import Catalog, open_catalog
from lakesink.protocol.staging import STAGING_AGE, staging_age
from lakesink.spark import jdbc as spark_jdbc

HOUR = dt.timedelta(hours=1)


def _staged(database_dir: Path, table: str, age_s: float) -> str:
    """A staged table a job on another host started `age_s` ago (only its age tells it is over)."""
    directory = database_dir / f".{table}.lakesink-staging-0123456789ab"
    directory.mkdir(parents=True)
    (directory / "STAGED.json").write_text(json.dumps({
        "format": "lakesink.staged-table", "version": 1, "target": str(database_dir / table), "pid": 1,
        "host": f"not-{socket.gethostname()}", "created_at": time.time() - age_s}))
    return str(directory)


@pytest.mark.parametrize("entry", [lakesink.clean_staging, Catalog.clean_staging, lakesink.jdbc.clean_staging,
                                   spark_jdbc.clean_staging])
def test_every_public_clean_staging_takes_older_than_an_hour_by_default(entry):
    parameters = inspect.signature(entry).parameters
    assert parameters["older_than"].default == HOUR == STAGING_AGE
    assert list(parameters).index("dry_run") == list(parameters).index("older_than") + 1
    if entry is not spark_jdbc.clean_staging:
        assert parameters["older_than_s"].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters["older_than_s"].default is None


def test_older_than_is_a_timedelta_or_seconds_and_anything_else_is_refused():
    assert staging_age() == HOUR
    assert staging_age(dt.timedelta(minutes=5)) == dt.timedelta(minutes=5)
    assert staging_age(90) == staging_age(90.0) == dt.timedelta(seconds=90)
    assert staging_age(0) == dt.timedelta(0)
    for wrong in ("1 h", True, None, -1, dt.timedelta(seconds=-1)):
        with pytest.raises(ConfigurationError, match="older_than"):
            staging_age(wrong)
    with pytest.warns(DeprecationWarning, match="older_than_s is deprecated"):
        assert staging_age(older_than_s=30) == dt.timedelta(seconds=30)
    with pytest.raises(ConfigurationError, match="not both"):
        staging_age(60, older_than_s=30)


def test_a_database_directorys_staged_table_goes_after_an_hour_or_the_age_given(tmp_path):
    db = tmp_path / "db.db"
    young = _staged(db, "young", 30 * 60)
    old = _staged(db, "old", 2 * 3600)
    assert lakesink.clean_staging(str(db), dry_run=True) == [old]
    assert lakesink.clean_staging(str(db), 20 * 60, dry_run=True) == [old, young]  # seconds, as before
    assert lakesink.clean_staging(str(db), dt.timedelta(minutes=20), dry_run=True) == [old, young]
    with pytest.warns(DeprecationWarning):
        assert lakesink.clean_staging(str(db), older_than_s=20 * 60, dry_run=True) == [old, young]
    assert os.path.isdir(old) and os.path.isdir(young)
    assert lakesink.clean_staging(str(db)) == [old]
    assert not os.path.exists(old) and os.path.isdir(young)


def test_a_catalogs_staged_tables_go_after_an_hour_through_the_api_and_the_command_alike(tmp_path):
    warehouse = tmp_path / "wh"
    catalog = open_catalog({"metastore": "filesystem", "warehouse": str(warehouse)})
    catalog.create_database("db")
    db = Path(catalog.database_path("db"))
    young = _staged(db, "young", 30 * 60)
    old = _staged(db, "old", 2 * 3600)
    assert catalog.clean_staging(dry_run=True) == [old]
    assert catalog.clean_staging(dt.timedelta(minutes=20), dry_run=True) == [old, young]
    assert catalog.clean_staging(20 * 60, dry_run=True) == [old, young]

    def command(*extra):
        result = CliRunner().invoke(cli, ["clean-staging", "--catalog", f"warehouse={warehouse}", "--dry-run",
                                          "-o", "json", *extra])
        assert result.exit_code == 0, result.output
        return sorted(e["path"] for e in json.loads(result.output)["entries"] if e["action"] == "would remove")

    assert command() == [old]
    assert command("--older-than", "20 min") == [old, young]
    assert catalog.clean_staging() == [old]
    assert not os.path.exists(old) and os.path.isdir(young)
