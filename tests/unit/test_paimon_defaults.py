"""lakesink's declared defaults against Paimon's, as docs/paimon-defaults.md lists them."""

from __future__ import annotations

import enum
import re
from pathlib import Path

import pytest

from lakesink.options import REGISTRY
from lakesink.options.page import default_text

PAGE = Path(__file__).parents[2] / "docs" / "paimon-defaults.md"

# Paimon (Java CoreOptions) names the registry reads that pypaimon does not declare itself.
JAVA_ONLY_PAIMON_OPTIONS = {"partition", "primary-key", "consumer-id", "streaming-read-overwrite",
                            "dynamic-partition-overwrite", "read.readChangeLog"}


def _pypaimon_options() -> dict:
    from pypaimon.common.options.config_option import ConfigOption
    from pypaimon.common.options.core_options import CoreOptions

    return {v.key(): v for v in vars(CoreOptions).values() if isinstance(v, ConfigOption)}


def _rows() -> dict[str, tuple[str, str, str]]:
    rows = {}
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0] != "option":
            rows[cells[0].strip("`")] = (cells[1], cells[2], cells[3])
    return rows


def _paimon_value(key: str, cell: str):
    """The default a Paimon cell states, typed as the registry types the option (None: no default)."""
    found = re.match(r"`([^`]*)`", cell)
    if found is None:
        assert cell.startswith("none"), f"{key}: Paimon default {cell!r} is neither `value` nor none"
        return None
    return REGISTRY[key].parse(found.group(1))


def _same(a, b) -> bool:
    empty = (None, [])
    return (a in empty and b in empty) or a == b


def _paimon_options_of_the_registry() -> list[str]:
    declared = set(_pypaimon_options())
    return [key for key, opt in REGISTRY.items()
            if opt.scope == "table" or key in declared or key in JAVA_ONLY_PAIMON_OPTIONS]


def test_every_paimon_option_lakesink_reads_is_on_the_defaults_page():
    rows = _rows()
    assert [key for key in _paimon_options_of_the_registry() if key not in rows] == []
    assert [key for key in rows if key not in REGISTRY] == []


def test_the_lakesink_column_is_what_the_registry_declares():
    wrong = {key: (lakesink, default_text(REGISTRY[key]).strip("`"))
             for key, (_, lakesink, _) in _rows().items() if lakesink.strip("`") != default_text(REGISTRY[key]).strip("`")}
    assert wrong == {}


def test_every_default_that_differs_from_paimons_says_why_and_no_other_does():
    unexplained, needless = [], []
    for key, (paimon, _, why) in _rows().items():
        differs = not _same(_paimon_value(key, paimon), REGISTRY[key].default)
        if differs and not why:
            unexplained.append(key)
        if why and not differs:
            needless.append(key)
    assert unexplained == [] and needless == []


def _typed(value):
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "get_bytes"):
        return value.get_bytes()
    return value


@pytest.mark.parametrize("key", sorted(set(_pypaimon_options()) & set(REGISTRY)))
def test_the_paimon_column_agrees_with_pypaimon_where_it_declares_a_default(key):
    declared = _pypaimon_options()[key].default_value()
    if declared is None:
        pytest.skip(f"pypaimon declares no default for {key}")
    assert _same(_paimon_value(key, _rows()[key][0]), _typed(declared))
