"""What a test needs from the machine (PostgreSQL, Java, paimon-rust): skipped or failed when missing.

Locally a missing piece skips the test with its reason (`./dev test` shows it: `-rs`). With
`CI=true` in the environment it fails the test instead: CI must prove every tier, and a
skip there would pass the run without it.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def unavailable(reason: str) -> NoReturn:
    """Skip with `reason`; with CI=true, fail with it."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: what the default run needs must be there)", pytrace=False)
    pytest.skip(reason)
