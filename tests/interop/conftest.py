"""Fixtures of the interop tier: independent readers, each skipped with its reason when unavailable."""

from __future__ import annotations

import pytest

from tests.requirements import unavailable

from .oracle import RustPaimon, Unavailable



@pytest.fixture(scope="session")
def rust_paimon():
    try:
        return RustPaimon()
    except Unavailable as exc:
        unavailable(f"paimon-rust reader unavailable: {exc}")
