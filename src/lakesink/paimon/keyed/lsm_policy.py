"""Which sorted runs of a primary-key bucket a compaction merges: Paimon's universal compaction.

`LsmOptions` holds a table's compaction options as Paimon reads them; `pick` applies
Paimon's universal compaction to one bucket's sorted runs (size amplification, size
ratio, `num-sorted-run.compaction-trigger`) and returns a `CompactUnit`: the files to
merge and the level the merged run goes to. The merge itself is `paimon.compaction.lsm`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ... import options as registry
from ...errors import UnsupportedTableError
from ..table import parquet_layout
from ..files.datafiles import StagedFile, TableLayout


@dataclass(frozen=True)
class LsmOptions:
    """A primary-key table's compaction options, as Paimon reads them (picklable)."""

    trigger: int             # num-sorted-run.compaction-trigger
    num_levels: int          # num-levels; Paimon's default: trigger + 1
    target_size: int         # target-file-size (Paimon's default for primary-key tables: 128 MB)
    write_only: bool         # write-only: writers never compact
    ignore_delete: bool      # ignore-delete (and its merge-engine specific aliases)
    merge_engine: str
    compression: str
    max_size_amp: int = 200  # compaction.max-size-amplification-percent
    size_ratio: int = 1      # compaction.size-ratio
    producer: str = "none"   # changelog-producer
    row_deduplicate: bool = False       # changelog-producer.row-deduplicate
    delta_commits: int | None = None    # full-compaction.delta-commits
    deletion_vectors: bool = False      # deletion-vectors.enabled: level 0 leaves at every commit

    @property
    def full_compaction_every(self) -> int | None:
        """Commits between automatic full compactions: `full-compaction.delta-commits`, or every
        commit for `changelog-producer=full-compaction` (Paimon's writers do the same)."""
        if self.delta_commits is not None:
            return self.delta_commits
        return 1 if self.producer == "full-compaction" else None

    @property
    def max_level(self) -> int:
        return self.num_levels - 1

    @classmethod
    def of_table(cls, table) -> LsmOptions:
        raw = registry.table_options_of(table)
        trigger = registry.table_value(raw, "num-sorted-run.compaction-trigger")
        levels = registry.table_value(raw, "num-levels")
        engine = str(raw.get("merge-engine", "deduplicate")).strip().lower()
        return cls(trigger=trigger, num_levels=levels if levels is not None else trigger + 1,
                   target_size=table.options.target_file_size(True),
                   write_only=registry.table_value(raw, "write-only"),
                   ignore_delete=bool(table.options.ignore_delete()), merge_engine=engine,
                   compression=registry.table_value(raw, "file.compression"),
                   max_size_amp=registry.table_value(raw, "compaction.max-size-amplification-percent"),
                   size_ratio=registry.table_value(raw, "compaction.size-ratio"),
                   producer=str(raw.get("changelog-producer", "none")).strip().lower(),
                   row_deduplicate=registry.table_value(raw, "changelog-producer.row-deduplicate"),
                   delta_commits=registry.table_value(raw, "full-compaction.delta-commits"),
                   deletion_vectors=str(raw.get("deletion-vectors.enabled", "false")).strip().lower() == "true")

    def sorted_runs(self, files: Sequence[StagedFile]) -> int:
        """Sorted runs of one bucket: each level-0 file is one, each non-empty level above one."""
        return sum(1 for f in files if f.meta.level == 0) + len({f.meta.level for f in files if f.meta.level > 0})

    def needs_compaction(self, files: Sequence[StagedFile]) -> bool:
        """Whether the automatic policy (`pick`) compacts anything in this bucket."""
        return self.pick(files) is not None

    def pick(self, files: Sequence[StagedFile]) -> CompactUnit | None:
        """What the automatic policy compacts in one bucket: Paimon's universal compaction.

        Sorted runs newest first (level-0 files by sequence range, then levels 1, 2, ...).
        1. size amplification: the runs above the oldest add up to more than
           `compaction.max-size-amplification-percent` of it: all runs (a full compaction);
        2. size ratio: from the newest run, take older runs while the next is at most
           `compaction.size-ratio`% larger than the runs taken;
        3. run count over the trigger: at least the newest runs - trigger + 1, grown by ratio.
        Output goes to the level below the first run left out (never level 0; the highest level
        when every run is taken). First-row tables and aggregation buckets holding retractions
        always compact fully (`needs_compaction`): readers must not see their level-0 files.
        With `changelog-producer=lookup` every level-0 run is compacted after its commit; with
        `deletion-vectors.enabled` at its commit (readers of such a table skip level 0).
        """
        level0 = sum(1 for f in files if f.meta.level == 0)
        if self.deletion_vectors:  # level 0 leaves merged, older versions marked deleted: never read merged
            return self._universal(_runs(files)) if not level0 else self._force_level0(files, level0)
        if self.merge_engine == "first-row" and level0:
            return self.full(files)
        if self.merge_engine == "aggregation" and level0 and (
                self.producer == "lookup" or any(f.meta.level == 0 and f.meta.delete_row_count for f in files)):
            # pypaimon (lakesink's reader) cannot merge an aggregation's retractions, nor the merged
            # values a lookup compaction writes above older ones: such buckets compact fully.
            return self.full(files)
        runs = _runs(files)
        unit = self._universal(runs)
        if self.producer == "lookup" and level0:
            # Paimon's ForceUpLevel0Compaction: with a lookup changelog every level-0 run leaves
            # level 0 in the round after its commit, merged with the runs the size ratio adds.
            return self._force_level0(files, level0, unit)
        return unit

    def _force_level0(self, files, level0: int, unit: CompactUnit | None = None) -> CompactUnit:
        """The universal pick, or, where it leaves a level-0 run, every level-0 run and the runs
        the size ratio adds (Paimon's ForceUpLevel0Compaction)."""
        runs = _runs(files)
        unit = unit if unit is not None else self._universal(runs)
        if unit is None or sum(1 for f in unit.files if f.meta.level == 0) < level0:
            unit = self._by_ratio(runs, level0, force=True)
        return unit

    def _universal(self, runs: list) -> CompactUnit | None:
        if len(runs) < max(self.trigger, 2):
            return None
        newer = sum(_size(r) for r in runs[:-1])
        if newer * 100 > self.max_size_amp * _size(runs[-1]):
            return self.full([f for run in runs for f in run])
        unit = self._by_ratio(runs, 1)
        if unit is None and len(runs) > self.trigger:
            unit = self._by_ratio(runs, len(runs) - self.trigger + 1, force=True)
        return unit

    def full(self, files: Sequence[StagedFile]) -> CompactUnit:
        return CompactUnit(tuple(files), self.max_level, True)

    def _by_ratio(self, runs: list, count: int, force: bool = False) -> CompactUnit | None:
        size = sum(_size(r) for r in runs[:count])
        while count < len(runs) and size * (100.0 + self.size_ratio) / 100.0 >= _size(runs[count]):
            size += _size(runs[count])
            count += 1
        if not force and count <= 1:
            return None
        if count == len(runs):
            return self.full([f for run in runs for f in run])
        output = max(0, _level(runs[count]) - 1)
        if output == 0:  # never write level 0: take runs up to the first one above it
            while count < len(runs):
                level = _level(runs[count])
                count += 1
                if level != 0:
                    output = level
                    break
            if count == len(runs):
                return self.full([f for run in runs for f in run])
        picked = [f for run in runs[:count] for f in run]
        highest = max(_level(r) for r in runs)
        return CompactUnit(tuple(picked), output, output >= highest)

    def fully_compacted(self, files: Sequence[StagedFile]) -> bool:
        """One sorted run at the highest level without retractions: a full compaction changes nothing."""
        return all(f.meta.level == self.max_level and not (f.meta.delete_row_count or 0) for f in files)


@dataclass(frozen=True)
class CompactUnit:
    """Files of one bucket to merge into one sorted run at `output_level`; `drop_deletes` when no
    older version of a key can lie below (the output is the bucket's highest non-empty level)."""

    files: tuple
    output_level: int
    drop_deletes: bool


def _runs(files: Sequence[StagedFile]) -> list[list[StagedFile]]:
    """A bucket's sorted runs, newest first: each level-0 file (by sequence range), then each level."""
    level0 = sorted((f for f in files if f.meta.level == 0),
                    key=lambda f: (f.meta.max_sequence_number, f.meta.min_sequence_number, f.meta.file_name),
                    reverse=True)
    levels = sorted({f.meta.level for f in files if f.meta.level > 0})
    return [[f] for f in level0] + [[f for f in files if f.meta.level == lv] for lv in levels]


def _size(run: list[StagedFile]) -> int:
    return sum(f.file_size for f in run)


def _level(run: list[StagedFile]) -> int:
    return run[0].meta.level


def check_compactable(table) -> None:
    """Refuse primary-key tables lakesink cannot compact, naming the option."""
    from .rules import MERGE_ENGINES, check_keyed_table
    check_keyed_table(table, None)  # Parquet only; options lakesink honours (deletion vectors: where it merges them)
    engine = str(table.table_schema.options.get("merge-engine", "deduplicate")).strip().lower()
    if engine not in MERGE_ENGINES:
        raise UnsupportedTableError(
            f"{table.table_path} has merge-engine={engine}, which lakesink does not compact yet "
            f"(it compacts {' and '.join(MERGE_ENGINES)} tables); compact it with Paimon's own compaction.")
    if not table.options.sequence_field_sort_order_is_ascending():
        raise UnsupportedTableError(
            f"{table.table_path} has sequence.field.sort-order=descending, which lakesink does not "
            "compact yet; compact it with Paimon's own compaction.")
    problem = parquet_layout.nanosecond_layout_problem(TableLayout.of(table).arrow_schema())
    if problem is not None:
        raise UnsupportedTableError(f"{table.table_path}: lakesink cannot compact this table: {problem}.")


def age_order(files: Sequence[StagedFile]) -> list[StagedFile]:
    """Files oldest first: higher levels before lower ones, level 0 last by sequence range."""
    return sorted(files, key=lambda f: (f.meta.level == 0, -f.meta.level, f.meta.max_sequence_number,
                                        f.meta.min_sequence_number, f.meta.file_name))
