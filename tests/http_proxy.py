"""Pieces of the loopback HTTP servers that stand between the tests and moto's S3 (failing it, or counting)."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections import Counter
from typing import Any

__all__ = ["CountingProxy", "forward", "read_body"]


def read_body(h: http.server.BaseHTTPRequestHandler) -> bytes:
    """The request body, plain or chunked (botocore sends both)."""
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int(h.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                h.rfile.readline()
                return out
            out += h.rfile.read(size)
            h.rfile.readline()
    n = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(n) if n else b""


def forward(h: http.server.BaseHTTPRequestHandler, upstream: tuple[str, int], body: bytes) -> int:
    """Send the request to ``upstream`` (moto) and its answer back to the client, unchanged; the answer's bytes."""
    headers = {k: v for k, v in h.headers.items() if k.lower() not in ("transfer-encoding", "content-length")}
    conn = http.client.HTTPConnection(*upstream, timeout=30)
    try:
        conn.request(h.command, h.path, body=body, headers={**headers, "Content-Length": str(len(body))})
        resp = conn.getresponse()
        data = resp.read()
        h.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                h.send_header(k, v)
        # A HEAD's answer has no body: its Content-Length is the object's size, passed on as is.
        length = resp.getheader("Content-Length", "0") if h.command == "HEAD" else str(len(data))
        h.send_header("Content-Length", length)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
        return len(data)
    finally:
        conn.close()


class CountingProxy(http.server.ThreadingHTTPServer):
    """A proxy on 127.0.0.1 to an S3 endpoint that counts the GET requests of each object path (query left out),
    and the bytes they answered.

    Use as a context manager; :attr:`url` is the endpoint to give a client.
    """

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.gets: Counter[str] = Counter()
        self.got_bytes: Counter[str] = Counter()
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server: CountingProxy

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def _handle(self) -> None:
                body = read_body(self)
                sent = forward(self, self.server.upstream, body)
                if self.command == "GET":
                    with self.server.lock:
                        self.server.gets[self.path.split("?")[0]] += 1
                        self.server.got_bytes[self.path.split("?")[0]] += sent

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        """The proxy's endpoint URL."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> CountingProxy:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
