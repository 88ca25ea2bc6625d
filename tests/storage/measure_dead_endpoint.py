"""How long a save takes to fail against a dead S3 endpoint, with cairn's default settings.

Not a test (it takes a minute and asserts nothing): a measurement for the
docs. Starts a server on 127.0.0.1 that either answers ``503 SlowDown`` to
everything (``slowdown``), accepts and never answers (``silent``), or is not
there at all (``refused``), points S3 at it and times one ``save_to_path``::

    PYTHONPATH=src python tests/storage/measure_dead_endpoint.py silent
"""

from __future__ import annotations

import http.server
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))


def main(kind: str) -> None:
    """Run one measurement and print the time, the request count and the error."""
    count = [0]
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def _handle(self) -> None:
            count[0] += 1
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            if kind == "silent":
                release.wait(300)
                self.close_connection = True
                return
            body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    if kind == "refused":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
    else:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ.update(
        AWS_ACCESS_KEY_ID="x",
        AWS_SECRET_ACCESS_KEY="x",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        NO_PROXY="127.0.0.1",
    )
    from storage_components import Agent

    import cairn

    agent = Agent(8)
    started = time.monotonic()  # the save's own time: from the call to the error
    try:
        agent.save_to_path("s3://bucket/run/ckpt")
    except cairn.CheckpointError as err:
        print(f"{kind}: CheckpointError after {time.monotonic() - started:.1f} s, {count[0]} requests: {err}")
    release.set()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "silent")
