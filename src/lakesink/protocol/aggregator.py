"""The committable aggregator: combines small committables before they reach the reader.

Engine- and format-neutral, after FLIP-191's sink topology. An `Aggregator`
sees the committables of one *pre-aggregate key* at a time (default: all of
them together), returns committables holding exactly the same rows (fewer,
larger files; or sorted ones), and may give each result a *post-aggregate key*
to route it to a committer. Users plug in their own by subclassing:

    class SortingAggregator(Aggregator[StagedFile]):
        def pre_aggregate_key(self, f):
            return (f.partition, f.bucket)
        def aggregate(self, files):
            return [rewrite_sorted(files, by="ts")]     # same rows, one sorted file

A committable returned unchanged is *kept* (not rewritten); one that is not in
the input is *new*; inputs missing from the result are *replaced*. The
coordinator commits "replaced → new" as one compaction, and offers kept
committables (and new ones the aggregator `carries`) again at the next
checkpoint, so bins below the size threshold fill up across checkpoints.

`pack_bins` is the size-based binning the Paimon aggregator uses, kept here
because it knows nothing of any format.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import ConfigurationError

C = TypeVar("C")


class Aggregator(ABC, Generic[C]):
    """Turns the committables of one key into committables holding the same rows."""

    # True for an aggregator whose results hold the inputs' rows *merged by key* (a primary-key
    # compaction): retractions may remove rows, so a key may end with no committable at all.
    merges: bool = False

    def inputs(self, committables: list[C]) -> list[C]:
        """What a round works on, given the carried committables (default: those). An aggregator
        that must see the table's own state (a primary-key compaction needs every live file of a
        bucket) returns that instead; what it `carries` of them is offered again next round."""
        return committables

    def pre_aggregate_key(self, committable: C) -> Hashable:
        """Which committables meet in one `aggregate` call (default: all)."""
        return None

    @abstractmethod
    def aggregate(self, committables: list[C]) -> list[C]:
        """Return committables with exactly the rows of `committables`.

        Return an input object itself to keep it as it is; anything else is a
        new committable replacing the inputs not returned.
        """

    def aggregate_all(self, groups: dict[Hashable, list[C]]) -> dict[Hashable, list[C]]:
        """Every key at once (e.g. to rewrite all bins in one distributed job). Default: per key."""
        return {key: self.aggregate(list(group)) for key, group in groups.items()}

    def post_aggregate_key(self, committable: C) -> Hashable:
        """Which committer (or commit) a result goes to (default: one for all)."""
        return None

    def carries(self, committable: C) -> bool:
        """Whether a result is offered again at the next checkpoint (e.g. it is still small)."""
        return True

    def commit_properties(self) -> dict[str, str]:
        """Properties of the commit of the round just aggregated (e.g. marking a full compaction)."""
        return {}

    def flush(self) -> None:
        """Called before a final aggregation (end of a batch job): also combine partial bins."""

    def state(self) -> dict[str, Any]:
        """JSON-able state the aggregator wants kept across restarts (e.g. learned ratios)."""
        return {}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Inverse of `state`."""


@dataclass
class Aggregation(Generic[C]):
    """What one aggregation round decided."""

    replaced: list[C] = field(default_factory=list)   # inputs not returned: to delete
    new: list[C] = field(default_factory=list)        # results that were not inputs: to add
    kept: list[C] = field(default_factory=list)       # inputs returned unchanged

    @property
    def changed(self) -> bool:
        return bool(self.replaced or self.new)

    def by_post_key(self, aggregator: Aggregator[C]) -> dict[Hashable, list[C]]:
        groups: dict[Hashable, list[C]] = {}
        for c in self.new:
            groups.setdefault(aggregator.post_aggregate_key(c), []).append(c)
        return groups


def group_by_key(aggregator: Aggregator[C], committables: Sequence[C]) -> dict[Hashable, list[C]]:
    """Committables per pre-aggregate key, each group in arrival order."""
    groups: dict[Hashable, list[C]] = {}
    for c in committables:
        groups.setdefault(aggregator.pre_aggregate_key(c), []).append(c)
    return groups


def run_aggregator(aggregator: Aggregator[C], committables: Sequence[C],
                   identity: Callable[[C], str]) -> Aggregation[C]:
    """Call `aggregate` once per pre-aggregate key and sort the results into replaced/new/kept."""
    result: Aggregation[C] = Aggregation()
    groups = group_by_key(aggregator, committables)
    results = aggregator.aggregate_all(groups)
    for key, group in groups.items():
        inputs = {identity(c): c for c in group}
        outputs = results.get(key, [])
        seen: set[str] = set()
        new = []
        for c in outputs:
            ident = identity(c)
            if ident in seen:
                raise ConfigurationError(f"aggregator {type(aggregator).__name__} returned {ident} twice "
                                         f"for key {key!r}: every row must stay exactly once.")
            seen.add(ident)
            (result.kept if ident in inputs else new).append(c)
        replaced = [c for ident, c in inputs.items() if ident not in seen]
        if bool(replaced) != bool(new) and not (aggregator.merges and replaced):
            raise ConfigurationError(
                f"aggregator {type(aggregator).__name__} {'dropped' if replaced else 'added'} committables "
                f"of key {key!r} without {'replacing' if replaced else 'removing'} any: "
                "aggregate() must return the same rows.")
        result.replaced.extend(replaced)
        result.new.extend(new)
    return result


def pack_bins(items: Sequence[C], size_of: Callable[[C], float], target: float,
              flush_at_count: int | None = None,
              max_count: int | None = None) -> tuple[list[list[C]], list[C]]:
    """Pack items (in the order given) into bins that reach `target`; return (bins, rest).

    A bin closes as soon as its size reaches `target`, so each bin makes one
    file of about the target size, or when it holds `max_count` items (one
    rewrite reads at most that many). The rest (less than a target's worth)
    waits for later items, unless it holds `flush_at_count` items or more: then
    it becomes a bin of its own (one still-small file instead of many).
    """
    if target <= 0:
        raise ConfigurationError(f"target size must be positive, got {target}")
    if max_count is not None and max_count < 2:
        raise ConfigurationError(f"a bin must be allowed at least 2 items, got max_count={max_count}")
    bins: list[list[C]] = []
    current: list[C] = []
    size = 0.0
    for item in items:
        current.append(item)
        size += size_of(item)
        if size >= target or (max_count is not None and len(current) >= max_count):
            if len(current) > 1:
                bins.append(current)
            current, size = [], 0.0
    if flush_at_count is not None and len(current) >= max(2, flush_at_count):
        bins.append(current)
        current = []
    return bins, current
