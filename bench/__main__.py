"""Run lakesink's benchmarks: `./dev bench [write|stream|read|commit|aggregate|keyed|keyed-modes|bootstrap|keyed-stream|lsm|s3|scale|jdbc|merge|features|iceberg-writer|all] [--quick]`.

Every figure is a ratio measured side by side in the same run (medians of
interleaved repeats), because these machines are noisy.
"""

from __future__ import annotations

import argparse
import importlib
import json

SUITES = {
    "write": ("bench.bench_write", {"rows": 10_000_000, "repeats": 3}, {"rows": 500_000, "repeats": 1}),
    "stream": ("bench.bench_stream", {"seconds": 60}, {"seconds": 15}),
    "read": ("bench.bench_read", {"rows": 10_000_000, "repeats": 3}, {"rows": 500_000, "repeats": 1}),
    "commit": ("bench.bench_commit", {"commits": 2000}, {"commits": 300}),
    "aggregate": ("bench.bench_aggregate", {}, {}),
    "keyed": ("bench.bench_keyed", {"rows": 10_000_000, "keys": 1_000_000, "repeats": 3, "pypaimon_rows": 1_000_000},
              {"rows": 500_000, "keys": 50_000, "repeats": 1, "pypaimon_rows": 100_000}),
    "keyed-modes": ("bench.bench_keyed_modes",
                    {"rows": 10_000_000, "keys": 1_000_000, "repeats": 3, "batches": 100, "batch_rows": 20_000},
                    {"rows": 200_000, "keys": 20_000, "repeats": 1, "batches": 5, "batch_rows": 2_000,
                     "scan_repeats": 1}),
    "lsm": ("bench.bench_lsm", {"batches": 1_000, "rows": 2_000, "keys": 100_000, "checkpoints": (100, 500, 1_000),
                                "stage_batches": 50},
            {"batches": 24, "rows": 500, "keys": 10_000, "checkpoints": (12, 24), "scan_repeats": 1,
             "stage_batches": 6}),
    "bootstrap": ("bench.bench_bootstrap", {"keys": 10_000_000, "rows": 1_000, "repeats": 3},
                  {"keys": 200_000, "rows": 1_000, "repeats": 1}),
    "keyed-stream": ("bench.bench_keyed_stream", {"seconds": 20, "rounds": 4}, {"seconds": 20, "rounds": 1}),
    "s3": ("bench.bench_s3", {"rows": 5_000_000, "repeats": 3}, {"rows": 200_000, "repeats": 1}),
    "scale": ("bench.bench_scale", {}, {"task_counts": (1, 4), "files_per_task": 100, "partitions": (10, 1_000)}),
    "merge": ("bench.bench_merge", {"rows": 10_000_000, "changes": 1_000_000, "repeats": 3},
              {"rows": 200_000, "changes": 20_000, "repeats": 1}),
    "features": ("bench.bench_features", {"rows": 1_000, "keys": 10_000, "rounds": 60, "s3_rounds": 10,
                                          "iceberg_commits": 200},
                 {"rows": 1_000, "keys": 10_000, "rounds": 15, "s3_rounds": 3}),
    "iceberg-writer": ("bench.bench_iceberg_writer", {"sizes": (10, 1_000, 10_000), "repeats": 5},
                       {"sizes": (10, 100), "repeats": 1}),
    "jdbc": ("bench.bench_jdbc", {"rows": 1_000_000, "repeats": 3, "batches": 40},
             {"rows": 100_000, "repeats": 1, "batches": 6}),
}
NEEDS_SPARK = {"write", "stream", "read", "keyed", "keyed-modes", "bootstrap", "keyed-stream", "lsm", "s3", "jdbc", "merge"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("suites", nargs="*", default=["all"], help=f"any of {', '.join(SUITES)} or all")
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the benchmarks run")
    parser.add_argument("--json", help="also write all results to this file")
    args = parser.parse_args(argv)
    chosen = list(SUITES) if "all" in args.suites else args.suites
    spark = None
    results = {}
    for name in chosen:
        module_name, full, quick = SUITES[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            print(f"[{name}] not available: {exc}")
            continue
        kwargs = quick if args.quick else full
        if name in NEEDS_SPARK:
            if spark is None:
                import lakesink
                spark = lakesink.session("lakesink-bench")
                spark.sparkContext.setLogLevel("ERROR")
            results[name] = module.run(spark, **kwargs)
        else:
            results[name] = module.run(**kwargs)
    if spark is not None:
        spark.stop()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
