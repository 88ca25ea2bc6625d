"""Transient remote errors are retried with exponential backoff; a save that gives up commits nothing.

Faults are injected two ways: a wrapper filesystem (:mod:`storage_faults`) in
front of memory and S3, and a small HTTP proxy in front of moto that answers
some requests with 500/503 or drops the connection, so that real S3 error
responses travel through botocore and s3fs to cairn's retry loop.
"""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from storage_backends import Backend, MotoS3
from storage_components import Agent, expected_state
from storage_faults import Fault, FaultyFS

import cairn
from cairn.storage import fsspec_storage, writers
from cairn.storage.fsspec_storage import RETRY_ATTEMPTS, RETRY_MAX_DELAY, FsspecStorage, is_transient
from cairn.testing import assert_states_equal
from http_proxy import forward, read_body
from log_helpers import warned

N = 8

TRANSIENT: list[Callable[[], BaseException]] = [
    lambda: TimeoutError("read timed out (injected)"),
    lambda: OSError("503 Service Unavailable (injected)"),
    lambda: ConnectionResetError(104, "Connection reset by peer (injected)"),
    lambda: OSError("An error occurred (SlowDown): Please reduce your request rate (injected)"),
    lambda: OSError("500 InternalError (injected)"),
]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the backoff delays instead of sleeping them (keeps the suite fast)."""
    recorded: list[float] = []
    monkeypatch.setattr(fsspec_storage, "time", types.SimpleNamespace(sleep=recorded.append))
    return recorded


def _agent(step: int) -> Agent:
    agent = Agent(N)
    agent.set_step(step)
    return agent


def test_is_transient() -> None:
    """Timeouts, resets, 5xx and throttling are transient; missing files and permissions are not."""
    for make in TRANSIENT:
        assert is_transient(make())
    for err in (
        FileNotFoundError("x"),
        PermissionError("x"),
        IsADirectoryError("x"),
        ValueError("503"),
        cairn.CheckpointError("timeout"),
    ):
        assert not is_transient(err)


@pytest.mark.parametrize(
    ("code", "status", "message", "transient"),
    [
        ("SlowDown", 503, "Please reduce your request rate.", True),
        ("ServiceUnavailable", 503, "Service is unable to handle request.", True),
        ("InternalError", 500, "We encountered an internal error. Please try again.", True),
        ("RequestTimeout", 400, "Your socket connection to the server was not read from or written to.", True),
        ("AccessDenied", 403, "Access Denied", False),
        ("NoSuchKey", 404, "The specified key does not exist.", False),
        ("InvalidArgument", 400, "Invalid Argument", False),
    ],
)
def test_is_transient_s3fs_errors(code: str, status: int, message: str, transient: bool) -> None:
    """S3 errors as s3fs raises them (translated, e.g. OSError(EBUSY, server message), chained)."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    boto = ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
    )
    assert is_transient(translate_boto_error(boto)) is transient
    assert is_transient(boto) is transient


def test_is_transient_connection_errors() -> None:
    """botocore's connection failures (not OSErrors) are transient."""
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

    assert is_transient(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert is_transient(ConnectionClosedError(endpoint_url="http://127.0.0.1:1"))
    assert is_transient(ReadTimeoutError(endpoint_url="http://127.0.0.1:1"))


def test_transient_faults_everywhere_are_retried(remote_backend: Backend, sleeps: list[float]) -> None:
    """Every kind of call failing twice (writes, reads, listings, copies, deletes): all operations succeed."""
    methods = ["write", "read", "info", "ls", "copy", "rm", "size", "makedirs"]
    faults = [Fault(m, per_path=2, error=TRANSIENT[i % len(TRANSIENT)]) for i, m in enumerate(methods)]
    flaky = FaultyFS(remote_backend.fs, faults=faults)
    root = remote_backend.path("run")

    path = _agent(3).save_to_path(remote_backend.path("ckpt"), filesystem=flaky)
    got = Agent(N)
    got.restore_from_path(remote_backend.path("ckpt"), filesystem=flaky)
    assert_states_equal(expected_state(3, N), got.get_state())
    assert cairn.verify_checkpoint(remote_backend.path("ckpt"), filesystem=flaky) == []
    mgr = cairn.CheckpointManager(root, keep_last=2, filesystem=flaky)
    for step in range(4):
        mgr.save(_agent(step), step)
    assert [i.step for i in mgr.checkpoints()] == [2, 3]
    assert mgr.last_stats is not None and mgr.last_stats.files_linked > 0  # server-side copies, retried
    latest = Agent(N)
    mgr.restore_latest(latest)
    assert_states_equal(expected_state(3, N), latest.get_state())

    kinds = {name for name, _path, _err in flaky.injected}
    assert {"open", "cat_file", "info", "copy", "ls"} <= kinds, kinds
    assert len(flaky.injected) > 50
    assert len(sleeps) == len(flaky.injected)  # one backoff per retried failure
    assert path.endswith(remote_backend.path("ckpt"))


def test_backoff_grows_exponentially(sleeps: list[float], caplog: pytest.LogCaptureFixture) -> None:
    """Delays double from the base delay (with jitter in [0.5, 1.5)), capped, and the call then succeeds;
    each retry is logged as a warning on cairn.storage.fsspec_storage, naming the path and the error."""
    from fsspec.implementations.memory import MemoryFileSystem

    fs = MemoryFileSystem()
    fs.pipe_file("/cairn-backoff/f", b"data")
    fault = Fault("read", "cairn-backoff/f", times=RETRY_ATTEMPTS - 1, error=TRANSIENT[1])
    storage = FsspecStorage(FaultyFS(fs, faults=[fault]), base_delay=0.4)
    assert storage.read_file("/cairn-backoff/f") == b"data"
    assert len(sleeps) == RETRY_ATTEMPTS - 1
    for k, delay in enumerate(sleeps):
        nominal = min(0.4 * 2**k, RETRY_MAX_DELAY)
        assert 0.5 * nominal <= delay < 1.5 * nominal, (k, delay)
    retries = warned(caplog, r"^Reading memory://.*cairn-backoff/f failed with a transient error")
    assert len(retries) == RETRY_ATTEMPTS - 1, caplog.text
    assert f"attempt 2 of {RETRY_ATTEMPTS} in {sleeps[0]:.2f} s" in retries[0]
    assert {r.name for r in caplog.records} == {"cairn.storage.fsspec_storage"}
    fs.rm("/cairn-backoff", recursive=True)


@pytest.mark.parametrize("which", ["group/b/packed.bin", "manifest.json"])
def test_save_gives_up(
    remote_backend: Backend, sleeps: list[float], which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write failing transiently every time: CheckpointError naming the file, nothing committed or left;
    the checkpoint that was at the path stays (the save wrote beside it)."""
    monkeypatch.setattr(writers, "new_write_id", lambda: "0123456789ab")
    uri = remote_backend.uri("ckpt")
    _agent(1).save_to_path(uri)
    staged = f"{writers.tmp_name('ckpt', '0123456789ab')}/{which}"
    fault = Fault("write", staged, times=None, error=TRANSIENT[0])
    with pytest.raises(cairn.CheckpointError) as info:
        _agent(2).save_to_path(remote_backend.path("ckpt"), filesystem=FaultyFS(remote_backend.fs, faults=[fault]))
    msg = str(info.value)
    assert remote_backend.uri(staged) in msg and f"failed {RETRY_ATTEMPTS} times" in msg, msg
    assert fault.fired == RETRY_ATTEMPTS
    assert len(sleeps) == RETRY_ATTEMPTS - 1
    restored = Agent(N)
    restored.restore_from_path(uri)
    assert_states_equal(expected_state(1, N), restored.get_state())
    remote_backend.fs.invalidate_cache()
    assert not remote_backend.fs.exists(remote_backend.path(staged.split("/")[0]))


def test_restore_gives_up(remote_backend: Backend, sleeps: list[float]) -> None:
    """Reads failing every time: CheckpointError naming the file; the object is left as it was."""
    _agent(1).save_to_path(remote_backend.uri("ckpt"))
    fault = Fault("read", "ckpt/stats/packed.bin", times=None, error=TRANSIENT[2])
    target = _agent(7)
    with pytest.raises(cairn.CheckpointError) as info:
        target.restore_from_path(remote_backend.path("ckpt"), filesystem=FaultyFS(remote_backend.fs, faults=[fault]))
    assert remote_backend.uri("ckpt/stats/packed.bin") in str(info.value)
    assert_states_equal(expected_state(7, N), target.get_state())


def test_manager_save_gives_up_keeps_previous(remote_backend: Backend, sleeps: list[float]) -> None:
    """A manager save that gives up leaves the earlier steps committed and latest() unchanged."""
    faulty = FaultyFS(remote_backend.fs)
    mgr = cairn.CheckpointManager(remote_backend.path("run"), keep_last=1, filesystem=faulty)
    mgr.save(_agent(1), 1)
    faulty.faults.append(Fault("write", "step_000000002/policy", times=None, error=TRANSIENT[1]))
    with pytest.raises(cairn.CheckpointError):
        mgr.save(_agent(2), 2)
    assert [i.step for i in mgr.checkpoints()] == [1]
    latest = mgr.latest()
    assert latest is not None and latest.endswith("step_000000001")


# ---------------------------------------------------------------------------- a faulty HTTP proxy


class _Proxy(http.server.ThreadingHTTPServer):
    """A loopback HTTP proxy in front of moto; ``decide`` picks the requests to fail."""

    daemon_threads = True

    def __init__(self, upstream: str, decide: Callable[[str, str], str | None]) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.decide = decide
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _handle(self) -> None:
        body = read_body(self)
        action = self.server.decide(self.command, self.path)
        with self.server.lock:
            self.server.seen[action or "pass"] += 1
        if action == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if action in ("500", "503"):
            # What S3 itself answers (s3fs turns these into OSError(EBUSY / EREMOTEIO, message)).
            code, message = (
                ("SlowDown", "Please reduce your request rate.")
                if action == "503"
                else ("InternalError", "We encountered an internal error. Please try again.")
            )
            payload = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
            self.send_response(int(action))
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        forward(self, self.server.upstream, body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


@pytest.fixture
def proxy_factory(moto_s3: MotoS3) -> Iterator[Callable[[Callable[[str, str], str | None]], _Proxy]]:
    """Start proxies in front of moto; stopped after the test."""
    started: list[_Proxy] = []

    def start(decide: Callable[[str, str], str | None]) -> _Proxy:
        proxy = _Proxy(moto_s3.endpoint_url, decide)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        started.append(proxy)
        return proxy

    yield start
    for p in started:
        p.shutdown()
        p.server_close()


def _fs_through(moto_s3: MotoS3, proxy: _Proxy) -> Any:
    """An s3fs client through the proxy with botocore's and s3fs's own retries off: cairn's loop retries."""
    fs = moto_s3.filesystem(
        client_kwargs={"endpoint_url": proxy.url},
        config_kwargs={
            "retries": {"total_max_attempts": 1, "mode": "standard"},
            "connect_timeout": 5,
            "read_timeout": 5,
        },
    )
    fs.retries = 1  # s3fs's own retry loop (a class attribute)
    return fs


def test_http_faults_through_s3fs_are_retried(
    moto_s3: MotoS3, proxy_factory: Any, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """Real 500/503 responses and dropped connections from the S3 endpoint: save and restore succeed,
    and each retry is logged."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def decide(method: str, path: str) -> str | None:
        if "/flaky/" not in path:
            return None
        key = f"{method} {path.split('?')[0]}"
        with lock:
            counts[key] += 1
            n = counts[key]
        if n == 1:
            return {"PUT": "503", "GET": "500", "HEAD": None}.get(method)
        if n == 2 and method == "GET":
            return "drop"
        return None

    proxy = proxy_factory(decide)
    fs = _fs_through(moto_s3, proxy)
    base = f"{moto_s3.bucket}/flaky/ckpt"
    _agent(4).save_to_path(base, filesystem=fs)
    got = Agent(N)
    got.restore_from_path(base, filesystem=fs)
    assert_states_equal(expected_state(4, N), got.get_state())
    assert proxy.seen["503"] >= 10 and proxy.seen["500"] >= 5 and proxy.seen["drop"] >= 5, proxy.seen
    assert len(sleeps) >= proxy.seen["503"] + proxy.seen["500"]
    assert len(warned(caplog, r"s3://.*/flaky/ckpt/.* failed with a transient error")) == len(sleeps)
    assert cairn.verify_checkpoint(f"s3://{base}") == []  # through the direct endpoint, too


def test_http_save_gives_up(moto_s3: MotoS3, proxy_factory: Any, sleeps: list[float]) -> None:
    """Every PUT of one object answered 503: CheckpointError naming it, nothing committed, and the
    checkpoint that was at the path loads as it was (the save wrote beside it)."""

    def decide(method: str, path: str) -> str | None:
        return "503" if method == "PUT" and path.split("?")[0].endswith("/stats/packed.bin") else None

    proxy = proxy_factory(decide)
    fs = _fs_through(moto_s3, proxy)
    base = f"{moto_s3.bucket}/doomed/ckpt"
    _agent(1).save_to_path(f"s3://{base}")
    with pytest.raises(cairn.CheckpointError) as info:
        _agent(2).save_to_path(base, filesystem=fs)
    assert f"s3://{moto_s3.bucket}/doomed/.ckpt{writers.TMP_MARK}" in str(info.value)
    assert "/stats/packed.bin" in str(info.value)
    assert proxy.seen["503"] == RETRY_ATTEMPTS
    restored = Agent(N)
    restored.restore_from_path(f"s3://{base}")
    assert_states_equal(expected_state(1, N), restored.get_state())
    assert moto_s3.filesystem().ls(f"{moto_s3.bucket}/doomed", detail=False) == [base]
