"""The request arithmetic of `./dev bench features`: means and medians per kind over rounds, and the
extra requests of a table over its baseline (the figures docs/compatibility.md quotes)."""

from __future__ import annotations

import statistics
from collections import Counter

from bench.bench_features import extra_counts, per_kind


def test_a_kind_missing_from_some_rounds_counts_as_zero_there_and_only_differences_are_extra():
    # Three rounds; COPY happened in one of them only: its median is 0 and its mean a third, not 1.
    rounds = [Counter(GET=7, PUT=3, COPY=1), Counter(GET=9, PUT=3), Counter(GET=11, PUT=3)]
    assert per_kind(rounds, statistics.median) == {"COPY": 0, "GET": 9, "PUT": 3}
    means = per_kind(rounds)
    assert means == {"COPY": 0.3, "GET": 9, "PUT": 3}
    baseline = per_kind([Counter(GET=5, PUT=3, HEAD=2)])
    # PUT is the same (not extra); HEAD only in the baseline is a negative difference.
    assert extra_counts(means, baseline) == {"COPY": 0.3, "GET": 4, "HEAD": -2}
