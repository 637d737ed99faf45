"""What each table feature costs per commit: a small write into tables that differ by one feature.

Side by side in one run, interleaved (the order rotates every round; a first round warms up and
is not counted), medians: a write of `rows` rows through `format("paimon")`'s own driver and task
code with a loop in place of Spark (the data source's writer planned, one task writing the rows,
the driver's commit), into

* a plain append table (the baseline),
* `row-tracking.enabled=true`,
* `metadata.iceberg.storage=table-location`, and `hadoop-catalog` (tables at `<wh>/<db>.db/<t>`),
* a branch of a plain append table (`branch`),
* a primary-key table with fixed buckets (an upsert of `rows` existing keys), with and without
  `deletion-vectors.enabled=true` (their baseline is the keyed table without).

Every table has `maintenance.enabled=false`, so no background expiry runs between rounds and
the figures hold the feature alone; primary-key tables compact after their commits as they do
by default (a round every few commits, inside the commit call).

Figures: median milliseconds of the driver's commit call and of the whole write (planning, the
task, the commit) on the local disk, and their ratio to the baseline, also in the first and in
the last quarter of the rounds (does the cost grow with the table's commits? append tables gain
a file and a snapshot per round). Then, on the test S3 server (moto behind the counting proxy of
tests/s3proxy.py), the requests of one write by kind (mean per kind over rounds, compaction
rounds of primary-key tables included; `commit`: the commit call alone) and the extra requests
over the baseline. Full runs then follow one Iceberg table over `iceberg_commits` commits beside
a plain one (`iceberg_growth`). moto keeps objects in memory in one Python process: its times
say little about a real store, its request counts do.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

BASELINE = "append"
KEYED_BASELINE = "primary key"
BRANCH = "bench"
BUCKETS = "4"
COMMON = {"maintenance.enabled": "false"}
ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


@dataclass(frozen=True)
class Variant:
    name: str
    options: dict
    keyed: bool = False
    branch: bool = False  # writes go to branch BRANCH, made after the table's first write


VARIANTS = (
    Variant(BASELINE, {}),
    Variant("row-tracking.enabled", {"row-tracking.enabled": "true"}),
    Variant("iceberg table-location", {"metadata.iceberg.storage": "table-location"}),
    Variant("iceberg hadoop-catalog", {"metadata.iceberg.storage": "hadoop-catalog"}),
    Variant("branch", {}, branch=True),
    Variant(KEYED_BASELINE, {"primary-key": "id", "bucket": BUCKETS}, keyed=True),
    Variant("primary key + deletion-vectors", {"primary-key": "id", "bucket": BUCKETS,
                                               "deletion-vectors.enabled": "true"}, keyed=True),
)


@dataclass
class Timings:
    commit_ms: list = field(default_factory=list)
    write_ms: list = field(default_factory=list)


def rows_for(variant: Variant, round_no: int, rows: int, keys: int) -> pa.Table:
    """Append tables: `rows` new ids. Keyed tables: `rows` existing keys (a window moving over
    the `keys` the table was seeded with), new values: an upsert of updates only."""
    if variant.keyed:
        start = (round_no * rows) % keys
        ids = [(start + i) % keys for i in range(rows)]
    else:
        ids = list(range(keys + round_no * rows, keys + (round_no + 1) * rows))
    return pa.table({"id": ids, "name": [f"n{i}-{round_no}" for i in ids],
                     "amount": [i * 0.5 + round_no for i in ids]}, schema=ARROW_SCHEMA)


def seed(keys: int) -> pa.Table:
    """The first write of every table: ids 0 .. keys-1."""
    return pa.table({"id": list(range(keys)), "name": [f"n{i}" for i in range(keys)],
                     "amount": [i * 0.5 for i in range(keys)]}, schema=ARROW_SCHEMA)


def spark_schema():
    """The DataFrame's schema Spark would hand the data source (no JVM needed to build it)."""
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType
    return StructType([StructField("id", LongType()), StructField("name", StringType()),
                       StructField("amount", DoubleType())])


def write(path: str, options: dict, data: pa.Table, proxy=None) -> tuple[float, float, Counter, Counter]:
    """One `format("paimon")` write of `data` into `path` without Spark: the driver plans (the
    data source's writer), one task writes, the driver commits. Returns (commit ms, write ms,
    requests of the whole write, requests of the commit) (Counters empty without `proxy`)."""
    from lakesink.spark.datasource import PaimonDataSource

    if proxy is not None:
        proxy.reset()
    start = time.perf_counter()
    writer = PaimonDataSource({"path": path, **options}).writer(spark_schema(), False)
    message = writer.write(iter(data.to_batches()))
    before = proxy.counts() if proxy is not None else Counter()
    committed = time.perf_counter()
    writer.commit([message])
    end = time.perf_counter()
    whole = proxy.counts() if proxy is not None else Counter()
    return (end - committed) * 1000, (end - start) * 1000, whole, whole - before


def create(root: str, variant: Variant, keys: int, fs_options: dict) -> tuple[str, dict]:
    """The variant's table under `<root>/wh/db.db/`, with its first write (`keys` rows);
    returns (path, options of each later write)."""
    import lakesink

    path = f"{root}/wh/db.db/{variant.name.replace(' ', '_').replace('+', 'and').replace('.', '_')}"
    options = {**COMMON, **fs_options, **variant.options}
    write(path, options, seed(keys))
    if variant.branch:
        lakesink.branch.create(path, BRANCH, fs_options=fs_options or None)
        options = {**options, "branch": BRANCH}
    return path, options


def _order(round_no: int) -> list[Variant]:
    shift = round_no % len(VARIANTS)
    return list(VARIANTS[shift:] + VARIANTS[:shift])


def run_local(rows: int, keys: int, rounds: int) -> dict[str, Timings]:
    root = tempfile.mkdtemp(prefix="lakesink-bench-features-")
    try:
        tables = {v.name: create(root, v, keys, {}) for v in VARIANTS}
        times = {v.name: Timings() for v in VARIANTS}
        for r in range(rounds + 1):  # round 0 warms up (caches, imports of the commit hooks)
            for variant in _order(r):
                path, options = tables[variant.name]
                commit_ms, write_ms, _, _ = write(path, options, rows_for(variant, r, rows, keys))
                if r == 0:
                    continue
                times[variant.name].commit_ms.append(commit_ms)
                times[variant.name].write_ms.append(write_ms)
        return times
    finally:
        shutil.rmtree(root, ignore_errors=True)


def iceberg_growth(commits: int, rows: int, keys: int, window: int = 50) -> list[dict]:
    """Iceberg metadata's commit as versions pile up: `commits` interleaved writes into a plain
    append table and one with `metadata.iceberg.storage=table-location` (no expiry, as within
    Paimon's default snapshot retention of an hour), median ms per window of `window` commits,
    and the part spent listing the metadata directory (where the versions are)."""
    from lakesink.paimon.iceberg import sync

    root = tempfile.mkdtemp(prefix="lakesink-bench-features-")
    listed = sync._versions
    spent = [0.0]

    def timed_versions(table):
        start = time.perf_counter()
        try:
            return listed(table)
        finally:
            spent[0] += time.perf_counter() - start

    sync._versions = timed_versions
    try:
        base, ice = _variant(BASELINE), _variant("iceberg table-location")
        plain, iceberg = create(root, base, keys, {}), create(root, ice, keys, {})
        samples = []
        for r in range(commits):
            plain_ms, *_ = write(*plain, rows_for(base, r, rows, keys))
            spent[0] = 0.0
            iceberg_ms, *_ = write(*iceberg, rows_for(ice, r, rows, keys))
            samples.append((plain_ms, iceberg_ms, spent[0] * 1000))
        out = []
        for start in range(0, commits, window):
            part = samples[start:start + window]
            out.append({"commits": [start + 1, start + len(part)],
                        "append_ms": statistics.median(p[0] for p in part),
                        "iceberg_ms": statistics.median(p[1] for p in part),
                        "listing_ms": statistics.median(p[2] for p in part)})
        return out
    finally:
        sync._versions = listed
        shutil.rmtree(root, ignore_errors=True)


def per_kind(samples: list[Counter], statistic=statistics.fmean) -> dict[str, float]:
    """Per request kind, `statistic` (the mean, or `statistics.median`) of its counts over `samples`;
    a kind missing from a sample counts 0 there."""
    kinds = sorted({k for s in samples for k in s})
    return {k: round(statistic([s.get(k, 0) for s in samples]), 1) for k in kinds}


def extra_counts(counts: dict[str, float], baseline: dict[str, float]) -> dict[str, float]:
    """`counts` minus `baseline`, per kind of either; kinds with no difference left out."""
    kinds = sorted(set(counts) | set(baseline))
    return {k: round(counts.get(k, 0) - baseline.get(k, 0), 1) for k in kinds
            if counts.get(k, 0) != baseline.get(k, 0)}


def run_s3(rows: int, keys: int, rounds: int) -> dict[str, dict]:
    from tests.s3proxy import proxied_s3

    bucket = "lakesink-bench-features"
    with proxied_s3(bucket) as (server, proxy):
        fs_options = proxy.fs_options(server)
        root = f"s3://{bucket}"
        tables = {v.name: create(root, v, keys, fs_options) for v in VARIANTS}
        whole = {v.name: [] for v in VARIANTS}
        commit = {v.name: [] for v in VARIANTS}
        commit_ms = {v.name: [] for v in VARIANTS}
        for r in range(rounds + 1):  # round 0 warms up
            for variant in _order(r):
                path, options = tables[variant.name]
                ms, _, counted, committed = write(path, options, rows_for(variant, r, rows, keys), proxy)
                if r == 0:
                    continue
                whole[variant.name].append(counted)
                commit[variant.name].append(committed)
                commit_ms[variant.name].append(ms)
    # Means: a primary-key table's commits with a compaction round cost more requests than the
    # others; the mean is what a commit costs on average (the medians are kept beside it).
    return {name: {"write": per_kind(whole[name]), "commit": per_kind(commit[name]),
                   "write_median": per_kind(whole[name], statistics.median),
                   "commit_median": per_kind(commit[name], statistics.median),
                   "commit_ms": statistics.median(commit_ms[name])} for name in whole}


def run(rows: int = 1_000, keys: int = 10_000, rounds: int = 60, s3_rounds: int = 15,
        iceberg_commits: int = 0) -> dict:
    load = os.getloadavg()
    print(f"\n[features] {rows:,}-row writes, {rounds} interleaved rounds on the local disk, {s3_rounds} on the "
          f"test S3 server; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    times = run_local(rows, keys, rounds)
    local = {}
    for name, t in times.items():
        quarter = max(len(t.commit_ms) // 4, 1)
        local[name] = {"commit_ms": statistics.median(t.commit_ms), "write_ms": statistics.median(t.write_ms),
                       "commit_mean_ms": statistics.fmean(t.commit_ms),
                       "first_quarter_ms": statistics.median(t.commit_ms[:quarter]),
                       "last_quarter_ms": statistics.median(t.commit_ms[-quarter:])}
    for name, figures in local.items():
        base = local[KEYED_BASELINE if name != KEYED_BASELINE and _variant(name).keyed else BASELINE]
        figures["commit_ratio"] = figures["commit_ms"] / local[BASELINE]["commit_ms"]
        figures["write_ratio"] = figures["write_ms"] / local[BASELINE]["write_ms"]
        figures["commit_extra_ms"] = figures["commit_ms"] - base["commit_ms"]
        # Does its cost grow with the table's commits? Its ratio to the baseline in the first and in
        # the last quarter of the rounds (ratios of interleaved rounds: the machine's load cancels).
        figures["first_quarter_ratio"] = figures["first_quarter_ms"] / local[BASELINE]["first_quarter_ms"]
        figures["last_quarter_ratio"] = figures["last_quarter_ms"] / local[BASELINE]["last_quarter_ms"]
        figures["vs"] = KEYED_BASELINE if base is not local[BASELINE] else BASELINE
    print(f"  local disk, medians of {rounds} (ratios to '{BASELINE}'; extra ms over the variant's baseline):")
    print(f"  {'table':<32} {'commit ms':>9} {'x':>6} {'extra':>7} {'mean':>7} {'x 1st/last quarter':>18}  "
          f"{'write ms':>8} {'x':>6}")
    for name, f in local.items():
        print(f"  {name:<32} {f['commit_ms']:9.1f} {f['commit_ratio']:6.2f} {f['commit_extra_ms']:+7.1f} "
              f"{f['commit_mean_ms']:7.1f} {f['first_quarter_ratio']:8.2f} -> {f['last_quarter_ratio']:5.2f}  "
              f"{f['write_ms']:8.1f} {f['write_ratio']:6.2f}")
    requests = run_s3(rows, keys, s3_rounds) if s3_rounds else {}
    for name, r in requests.items():
        base = requests[KEYED_BASELINE if name != KEYED_BASELINE and _variant(name).keyed else BASELINE]
        r["extra_write"] = extra_counts(r["write"], base["write"])
        r["extra_commit"] = extra_counts(r["commit"], base["commit"])
    for part in ("commit", "write"):
        if not requests:
            break
        kinds = sorted({k for r in requests.values() for k in r[part]})
        print(f"  S3 requests of the {'commit call' if part == 'commit' else 'whole write'}, mean of {s3_rounds} "
              f"(extra over the variant's baseline in brackets):")
        print(f"  {'table':<32} " + " ".join(f"{k:>11}" for k in kinds)
              + ("   moto commit ms" if part == "commit" else ""))
        for name, r in requests.items():
            cells = [f"{r[part].get(k, 0):g}" + (f" ({r['extra_' + part][k]:+g})" if k in r["extra_" + part] else "")
                     for k in kinds]
            print(f"  {name:<32} " + " ".join(f"{c:>11}" for c in cells)
                  + (f"   {r['commit_ms']:.0f}" if part == "commit" else ""))
    growth = iceberg_growth(iceberg_commits, rows, keys) if iceberg_commits else []
    if growth:
        print(f"  Iceberg metadata as versions pile up (no expiry), local disk, medians per window:")
        for g in growth:
            print(f"  commits {g['commits'][0]:>4}-{g['commits'][1]:<4} append {g['append_ms']:6.1f} ms  iceberg "
                  f"{g['iceberg_ms']:6.1f} ms ({g['iceberg_ms'] / g['append_ms']:.2f}x), of which listing its "
                  f"metadata directory {g['listing_ms']:5.1f} ms")
    return {"rows": rows, "keys": keys, "rounds": rounds, "s3_rounds": s3_rounds, "load": load,
            "local": local, "s3": requests, "iceberg_growth": growth}


def _variant(name: str) -> Variant:
    return next(v for v in VARIANTS if v.name == name)


def _fmt(counts: dict) -> str:
    return " ".join(f"{k}={v:g}" for k, v in counts.items())


if __name__ == "__main__":
    run()
