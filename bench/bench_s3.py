"""Batch writes to an S3-compatible server: `format("paimon")` vs pypaimon vs pyarrow alone.

The local S3 server of the tests (moto on loopback, tests/s3server.py) behind the
counting proxy (tests/s3proxy.py); credentials only as options. Side by side, the
same `rows` rows (4 Spark partitions), interleaved repeats, medians:

* `df.write.format("paimon")` into an append table (the Spark-native path: tasks write
  Parquet straight to the table's buckets, `write.in-place`'s default on object stores; the
  driver commits one snapshot), and the same with `write.in-place=false` (tasks write to the
  table's staging prefix, the commit copies each file into its bucket);
* pypaimon's own batch write of the same rows as one Arrow table, from one process
  (the conversion to Arrow not timed);
* pyarrow alone writing the same rows as 4 Parquet files (no table: the floor).

Also the requests of one `format("paimon")` job by kind (tasks and commit), and those of its
snapshot and manifests alone, both ways. moto keeps objects in memory in one Python process, so
the absolute times say little about a real store; the ratios and request counts do.
"""

from __future__ import annotations

import statistics
import time

from .pypaimon_write import pypaimon_write

BUCKET = "lakesink-bench"


def run(spark, rows: int = 5_000_000, repeats: int = 3) -> dict:
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from tests.s3proxy import S3Proxy
    from tests.s3server import S3Server

    df = spark.range(rows, numPartitions=4).selectExpr(
        "id", "cast(id % 1000 as int) as customer", "cast(id * 7 % 100000 as decimal(12,2)) as amount",
        "concat('order-', cast(id as string)) as note")
    data = df.toArrow()
    times: dict[str, list[float]] = {"format(paimon)": [], "format(paimon) staged": [], "pypaimon": [],
                                     "pyarrow parquet": []}
    variants = {"format(paimon)": {}, "format(paimon) staged": {"write.in-place": "false"}}
    with S3Server() as s3, S3Proxy(s3.endpoint) as proxy:
        s3.create_bucket(BUCKET)
        options = {**s3.fs_options(), "fs.s3.endpoint": proxy.endpoint}
        filesystem = pafs.S3FileSystem(access_key=options["fs.s3.accessKeyId"],
                                       secret_key=options["fs.s3.accessKeySecret"], region=options["fs.s3.region"],
                                       endpoint_override=proxy.endpoint, scheme="http", allow_bucket_creation=False)
        requests: dict = {}
        for i in range(repeats + 1):  # round 0 warms up
            for name, extra in variants.items():
                table = f"s3://{BUCKET}/wh/db.db/{'staged' if extra else 'native'}{i}"
                start = time.perf_counter()
                proxy.reset()
                df.write.format("paimon").options(**options, **extra).mode("append").save(table)
                times[name].append(time.perf_counter() - start)
                if name not in requests:
                    requests[name] = {"job": dict(sorted(proxy.counts().items())),
                                      "snapshot and manifests": dict(sorted(
                                          (proxy.counts("/snapshot/") + proxy.counts("/manifest/")).items()))}

            times["pypaimon"].append(pypaimon_write(f"s3://{BUCKET}/pp{i}", data, options))

            start = time.perf_counter()
            step = -(-data.num_rows // 4)
            for n in range(4):
                pq.write_table(data.slice(n * step, step), f"{BUCKET}/pq{i}/part-{n}.parquet", filesystem=filesystem)
            times["pyarrow parquet"].append(time.perf_counter() - start)
    med = {k: statistics.median(v[1:]) for k, v in times.items()}
    floor = med["pyarrow parquet"]
    print(f"\nbatch write to a local S3 server, {rows:,} rows, median of {repeats}")
    for name, seconds in med.items():
        print(f"  {name:<22} {seconds:7.2f} s   {seconds / floor:5.2f}x pyarrow alone")
    for name, counted in requests.items():
        print(f"  requests of one {name} job: {counted['job']}; of its snapshot and manifests: "
              f"{counted['snapshot and manifests']}")
    return {"rows": rows, "median_s": med, "vs_pyarrow": {k: v / floor for k, v in med.items()},
            "requests_per_job": requests}
