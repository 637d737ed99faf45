"""Hadoop's S3A connector for Spark, as a cluster with `hadoop-aws` on its classpath has it.

The pip pyspark ships no S3 connector, and Maven Central is out of reach here; the
`sagemaker_pyspark` source package on the package index carries `hadoop-aws` 3.3.1 and
the AWS SDK bundle it was built against. Fetched once into the interop cache
(`LAKESINK_INTEROP_CACHE`, default ~/.cache/lakesink-interop); an unreachable index
skips the tests that need it, with the reason.

What this proves and what not: Spark's own Parquet writer (the fast path) writes
through a real S3A file system to the test S3 server, with the endpoint and keys
reaching Hadoop only as the table's options. The connector is 3.3.1 on pyspark's
newer Hadoop client: `HADOOP_3_3_DEFAULTS` below papers over duration defaults
("60s") the older connector cannot parse; a cluster's matching hadoop-aws needs
none of it. Throughput and S3A's own committers (magic, staging) are not tested.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.interop.oracle import Unavailable, cache_dir

SDIST = "sagemaker_pyspark==1.4.5"
JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")
# Hadoop 3.4+ writes these defaults as durations; hadoop-aws 3.3.1 reads them as numbers.
HADOOP_3_3_DEFAULTS = {
    "fs.s3a.connection.establish.timeout": "30000", "fs.s3a.connection.timeout": "200000",
    "fs.s3a.threads.keepalivetime": "60", "fs.s3a.multipart.purge.age": "86400",
    "fs.s3a.connection.ttl": "300000", "fs.s3a.connection.idle.time": "60000",
    "fs.s3a.connection.acquisition.timeout": "60000", "fs.s3a.connection.request.timeout": "0",
    "fs.s3a.retry.interval": "500", "fs.s3a.retry.throttle.interval": "100",
    "fs.s3a.assumed.role.session.duration": "1800",
}


def s3a_jars() -> list[str]:
    """Paths of the connector's jars, fetched and unpacked once; Unavailable says why not."""
    target = cache_dir() / "s3a"
    jars = [target / name for name in JARS]
    if all(j.exists() for j in jars):
        return [str(j) for j in jars]
    downloads = cache_dir() / "sdist"
    found = glob.glob(str(downloads / "sagemaker_pyspark-1.4.5.tar.gz"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", SDIST,
                               "-d", str(downloads)], capture_output=True, text=True, timeout=900)
        found = glob.glob(str(downloads / "sagemaker_pyspark-1.4.5.tar.gz"))
        if not found:
            raise Unavailable(f"cannot fetch {SDIST} (hadoop-aws) from the package index: "
                              f"{proc.stderr.strip()[-400:]}")
    tmp = cache_dir() / f".s3a-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    with tarfile.open(found[0]) as sdist:
        for member in sdist.getmembers():
            if Path(member.name).name in JARS:
                with sdist.extractfile(member) as src, open(tmp / Path(member.name).name, "wb") as out:
                    shutil.copyfileobj(src, out)
    try:
        os.replace(tmp, target)  # whole or absent, also for a concurrent session
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return [str(j) for j in jars]


def spark_conf(jars: list[str]) -> dict[str, str]:
    """A session's conf with the connector on its classpath; no endpoint, no credentials."""
    conf = {"spark.jars": ",".join(jars)}
    conf.update({f"spark.hadoop.{k}": v for k, v in HADOOP_3_3_DEFAULTS.items()})
    return conf
