"""Child process for catalog CTAS kill tests (no Spark): stage a table by name, then

* `job`: print READY and sleep inside the job (the parent kills it mid-job), or
* `publish`: commit, with LAKESINK_CRASH_AT=catalog-publish killing it after the table moved in
  place and before the catalog's transaction committed.
"""

import json
import os
import sys
import time

from lakesink.paimon.catalog.catalog import open_catalog
from lakesink.paimon.catalog.ctas import stage_table
from lakesink.protocol.staging import run_staged
from tests.catalog.conftest import commit_rows, write_rows


def main(options: dict, name: str, where: str) -> None:
    catalog = open_catalog(options)
    staged = stage_table(catalog.resolve(name, "create"), catalog)

    def job():
        if "://" in staged.staging_path:  # an object store: written in place with pypaimon
            write_rows(staged.staging_path, [1, 2, 3], catalog.config.fs_options)
        else:
            commit_rows(staged.staging_path, [1, 2, 3])
        print("READY", staged.staging_path, flush=True)
        if where == "job":
            time.sleep(600)

    run_staged(staged, job)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3])
    os._exit(0)
