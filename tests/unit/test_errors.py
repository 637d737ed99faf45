"""One exception family: every error a user can see is a LakesinkError of lakesink.errors,
exported from `lakesink`."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import lakesink
from lakesink import errors

SRC = Path(__file__).parents[2] / "src" / "lakesink"
# Exceptions that are no user's business: test machinery, click's own, a signal turned into an unwind.
NOT_USER_ERRORS = {"InjectedFailure", "OptionUsageError", "Terminated"}


def test_every_error_class_is_exported_from_lakesink():
    classes = [name for name, obj in vars(errors).items()
               if inspect.isclass(obj) and issubclass(obj, errors.LakesinkError)]
    assert [name for name in classes if name not in lakesink.__all__] == []
    assert all(getattr(lakesink, name) is getattr(errors, name) for name in classes)


def test_no_exception_class_is_declared_outside_errors_py():
    found = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name not in NOT_USER_ERRORS and any(
                    (isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in vars(errors)))
                    or (isinstance(b, ast.Attribute) and b.attr.endswith(("Error", "Exception")))
                    for b in node.bases):
                found.append(f"{path.relative_to(SRC)}: {node.name}")
    assert found == []


def test_a_stopped_batch_is_a_lakesink_error_and_still_a_runtime_error():
    # Spark recognises a stop by the message's text; the class stays a RuntimeError as it was.
    assert issubclass(errors.StreamStopped, errors.LakesinkError)
    assert issubclass(errors.StreamStopped, RuntimeError)
    assert issubclass(errors.CatalogLockTimeoutError, errors.CommitFailedError)
    # the committer must ask whether the identity landed, so never a CommitFailedError
    assert not issubclass(errors.AlreadyCommittedError, errors.CommitFailedError)


def test_a_missing_table_and_a_directory_that_is_no_table_are_told_apart():
    assert not issubclass(errors.NotAPaimonTableError, errors.TableNotFoundError)
    assert not issubclass(errors.TableNotFoundError, errors.NotAPaimonTableError)
    assert issubclass(errors.DatabaseNotFoundError, errors.TableNotFoundError)
    assert issubclass(errors.DatabaseNotFoundError, errors.CatalogError)
