"""lakesink benchmarks: `./dev bench [write|stream|read|commit|all] [--quick]`. Ratios, medians."""
