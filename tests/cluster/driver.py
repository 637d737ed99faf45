"""A Spark driver on the cluster that runs the tier's scenarios when the tests ask.

    python -m tests.cluster.driver MASTER_URL REPLY_FD

One driver for the whole tier: a session on the cluster costs ~20 s to start,
and the test process cannot hold one itself (it may already run a local
session, and a Python process gets one SparkContext). Requests come on stdin,
one JSON object a line: `{"scenario": NAME, "args": {...}}`; each runs
`tests.cluster.scenarios.NAME(spark, **args)` and answers one JSON line on
REPLY_FD: `{"ok": true, "result": ...}` or `{"ok": false, "type": ..., "message":
..., "traceback": ...}`. Spark's own output goes to stdout/stderr (the log).
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main(argv: list[str]) -> int:
    master, reply_fd = argv[0], int(argv[1])
    reply = os.fdopen(reply_fd, "w", buffering=1)

    def answer(message: dict) -> None:
        reply.write(json.dumps(message, default=str) + "\n")
        reply.flush()

    import lakesink
    from tests.cluster import scenarios

    spark = lakesink.session("lakesink-cluster-tests", master=master)
    spark.sparkContext.setLogLevel("ERROR")
    answer({"ok": True, "result": {"master": spark.sparkContext.master, "app_id": spark.sparkContext.applicationId,
                                   "pid": os.getpid()}})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            result = getattr(scenarios, request["scenario"])(spark, **request.get("args", {}))
            answer({"ok": True, "result": result})
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the test
            answer({"ok": False, "type": type(exc).__name__, "message": str(exc),
                    "traceback": traceback.format_exc()})
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
