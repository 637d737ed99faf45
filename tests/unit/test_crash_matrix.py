"""The default run's crash sampling covers every protocol point on both write paths.

tests/crash/matrix.py holds the chains the default crash tests are parametrized with; these
checks fail when a point is added to `crashpoints.POINTS` without a default chain killing it on
both paths (or a default test elsewhere, with the reason it is not a step of the paths), and
when a chain names a point that does not exist.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lakesink.protocol.crashpoints import POINTS
from tests.crash import matrix

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", ["fast", "native"])
def test_every_protocol_point_is_killed_on_each_write_path_by_default(path):
    killed = matrix.killed_by_default()[path]
    missing = [p for p in POINTS if p not in killed and p not in matrix.ELSEWHERE
               and (path, p) not in matrix.KNOWN_GAPS]
    assert not missing, f"no default crash chain kills {missing} on the {path} path (tests/crash/matrix.py)"


def test_every_chain_names_points_that_exist():
    tables = [matrix.APPEND_CHAINS, matrix.APPEND_SOAK_CHAINS, matrix.KEYED_SUM_CHAINS,
              matrix.KEYED_SUM_SOAK_CHAINS]
    named = {matrix.point_name(p) for table in tables for points in table.values() for p in points}
    assert named <= set(POINTS), named - set(POINTS)
    assert set(matrix.ELSEWHERE) <= set(POINTS) and not set(matrix.ELSEWHERE) & (
        matrix.killed_by_default()["fast"] & matrix.killed_by_default()["native"])


@pytest.mark.parametrize("point", sorted(matrix.ELSEWHERE))
def test_a_point_off_the_write_paths_is_hit_by_a_default_test_elsewhere(point):
    """The named test exists, is not marked soak as a whole, and its file uses the point."""
    file, test, needle, _why = matrix.ELSEWHERE[point]
    text = (REPO / file).read_text()
    [node] = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == test]
    assert not any(ast.unparse(d) == "pytest.mark.soak" for d in node.decorator_list), f"{test} runs only in the soak"
    assert needle in text


def test_the_default_crash_tests_are_parametrized_from_the_matrix():
    """The tables are what the tests run: their modules take their chains from them."""
    for module, names in {"tests/spark/test_crash.py": ("APPEND_CHAINS",),
                          "tests/spark/test_crash_keyed.py": ("KEYED_SUM_CHAINS",)}.items():
        text = (REPO / module).read_text()
        assert all(f"parametrize" in text and name in text for name in names), module


def test_a_known_gap_names_the_soak_case_that_kills_the_point_and_is_not_killed_by_default():
    for (path, point), (file, test, _why) in matrix.KNOWN_GAPS.items():
        [node] = [n for n in ast.walk(ast.parse((REPO / file).read_text()))
                  if isinstance(n, ast.FunctionDef) and n.name == test]
        assert "pytest.mark.soak" in [ast.unparse(d) for d in node.decorator_list]
        assert point not in matrix.killed_by_default()[path], f"{(path, point)} is killed by default now: drop it"
