"""A counting, fault-injecting HTTP proxy in front of the test S3 server (tests/s3server.py).

Clients are pointed at the proxy's endpoint; every request is forwarded to the S3
server as it came and counted by kind (PUT, COPY, MARKER, GET, LIST, HEAD, DELETE, POST).
Faults, each for the next `times` requests of a kind whose path contains `match`:

* `fail(kind, match, times, status=503, code="SlowDown")`: answer with an S3 error
  instead of forwarding (throttling as S3 sends it);
* `drop_answer(kind, match, times)`: forward the request (the store does it) and close
  the connection without answering: a lost response after a successful PUT;
* `delay(kind, match, seconds, times, answer=True)`: forward the request (the store does
  it), then hold the answer for `seconds` before sending it (`answer=False`: before
  closing the connection instead): a slow store, whose client gives up on a request
  that succeeded once its timeout is shorter than the delay.

    with S3Server() as s3, S3Proxy(s3.endpoint) as proxy:
        options = {**s3.fs_options(), "fs.s3.endpoint": proxy.endpoint}
        proxy.reset(); ...; proxy.counts()   # Counter({"PUT": 4, "GET": 9, ...})
"""

from __future__ import annotations

import http.client
from contextlib import contextmanager
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
               "expect"}  # the proxy answered 100-continue itself and holds the whole body


def request_kind(method: str, path: str, headers) -> str:
    query = urlsplit(path).query
    if method == "PUT" and headers.get("x-amz-copy-source"):
        return "COPY"
    if method == "PUT" and urlsplit(path).path.endswith("/"):
        return "MARKER"  # an empty "directory" object, as pyarrow's S3 file system keeps them
    if method == "GET" and ("list-type" in query or "prefix=" in query or "delimiter=" in query):
        return "LIST"
    return method


@dataclass
class _Fault:
    kind: str
    match: str
    times: int
    action: str
    status: int = 503
    code: str = "SlowDown"
    seconds: float = 0.0   # delay: how long the answer is held
    answer: bool = True    # delay: send it afterwards (False: close the connection)


class S3Proxy:
    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []   # (kind, path) in arrival order
        self._faults: list[_Fault] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: with Nagle's algorithm each answer
            # would wait for the client's delayed ACK (~40 ms a request).
            disable_nagle_algorithm = True

            def log_message(self, *args):  # quiet
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            self.rfile.readline()
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self):
                body = self._body()
                kind = request_kind(self.command, self.path, self.headers)
                fault = proxy._take_fault(kind, self.path)
                with proxy._lock:
                    proxy.requests.append((kind, self.path))
                if fault is not None and fault.action == "fail":
                    payload = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{fault.code}</Code>"
                               f"<Message>injected by the test proxy</Message></Error>").encode()
                    self.send_response(fault.status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower() or body:
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                try:
                    conn.connect()
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as above, upstream
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                if fault is not None and fault.action == "drop":
                    self.close_connection = True  # the store did it; the client never hears
                    return
                if fault is not None and fault.action == "delay":
                    time.sleep(fault.seconds)  # the store did it; the answer comes late, if at all
                    self.close_connection = True  # the client may have given up and closed
                    if not fault.answer:
                        return
                    try:
                        self._answer(answer, data)
                    except OSError:  # it had: nobody reads the answer
                        pass
                    return
                self._answer(answer, data)

            def _answer(self, answer, data: bytes):
                self.send_response(answer.status, answer.reason)
                head = self.command == "HEAD"  # its Content-Length is the object's size, not the body's
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP_BY_HOP and (head or key.lower() != "content-length"):
                        self.send_header(key, value)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> S3Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _take_fault(self, kind: str, path: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.times > 0 and fault.kind == kind and fault.match in path:
                    fault.times -= 1
                    return fault
        return None

    def fail(self, kind: str, match: str = "", times: int = 1, status: int = 503, code: str = "SlowDown") -> None:
        with self._lock:
            self._faults.append(_Fault(kind, match, times, "fail", status, code))

    def drop_answer(self, kind: str, match: str = "", times: int = 1) -> None:
        with self._lock:
            self._faults.append(_Fault(kind, match, times, "drop"))

    def delay(self, kind: str, match: str = "", seconds: float = 3.0, times: int = 1,
              answer: bool = True) -> None:
        with self._lock:
            self._faults.append(_Fault(kind, match, times, "delay", seconds=seconds, answer=answer))

    def faults_left(self) -> int:
        with self._lock:
            return sum(f.times for f in self._faults)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._faults.clear()

    def counts(self, match: str = "") -> Counter:
        with self._lock:
            return Counter(kind for kind, path in self.requests if match in path)

    def fs_options(self, server) -> dict[str, str]:
        """`server`'s storage options with the endpoint pointed at this proxy."""
        return {**server.fs_options(), "fs.s3.endpoint": self.endpoint}


@contextmanager
def proxied_s3(bucket: str):
    """A fresh test S3 server holding `bucket`, behind a proxy: yields (server, proxy)."""
    from tests.s3server import s3_bucket

    with s3_bucket(bucket) as server:
        with S3Proxy(server.endpoint) as proxy:
            yield server, proxy
