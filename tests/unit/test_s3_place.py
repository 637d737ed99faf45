"""Placing staged files on S3 is idempotent: a commit restored after a driver died between
moving its files and publishing its snapshot finds them already moved and lands once.

pyarrow's S3 file system reports a missing copy source as a plain OSError (NO_SUCH_KEY),
not FileNotFoundError: this is what the restore meets.
"""

from __future__ import annotations

import pytest

from lakesink.paimon.files.datafiles import place
from tests.s3server import s3_bucket
from tests.staged import commit, new_target, read_back, snapshot_list, stage

BUCKET = "lakesink-place"


@pytest.fixture(scope="module")
def s3():
    with s3_bucket(BUCKET) as server:
        yield server


def test_a_commit_whose_files_were_already_moved_lands_once(s3, request):
    path, options = f"s3://{BUCKET}/{request.node.name}/db.db/t", s3.fs_options()
    target = new_target(path, options)
    commit(target, "setup", 1, stage(target, [0], "a", "setup"))
    files = [f for i in (1, 2, 3) for f in stage(target, [i], "b", "w")]
    place(target.table(), files)  # the dead driver's commit got this far
    commit(target, "w", 1, files)  # the restored commit
    assert sorted(r["id"] for r in read_back(path, options).to_pylist()) == [0, 1, 2, 3]
    assert len(snapshot_list(path, options)) == 2


def test_a_staged_file_that_is_gone_and_was_never_placed_fails_the_commit_and_changes_nothing(s3, request):
    path, options = f"s3://{BUCKET}/{request.node.name}/db.db/t", s3.fs_options()
    target = new_target(path, options)
    commit(target, "setup", 1, stage(target, [0], "a", "setup"))
    files = stage(target, [1], "b", "w") + stage(target, [2], "b", "w")
    target.file_io.delete_quietly(files[1].staged_path)  # lost from the store
    with pytest.raises(Exception, match="NO_SUCH_KEY|does not exist|No such"):
        commit(target, "w", 1, files)
    assert [r["id"] for r in read_back(path, options).to_pylist()] == [0]
    assert len(snapshot_list(path, options)) == 1
