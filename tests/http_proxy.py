"""Pieces of the loopback HTTP servers that stand in for a failing S3 endpoint in the storage tests."""

from __future__ import annotations

import http.client
import http.server

__all__ = ["forward", "read_body"]


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


def forward(h: http.server.BaseHTTPRequestHandler, upstream: tuple[str, int], body: bytes) -> None:
    """Send the request to ``upstream`` (moto) and its answer back to the client, unchanged."""
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
    finally:
        conn.close()
