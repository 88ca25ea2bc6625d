"""Fixtures of the storage tests: a real S3 server on loopback, and one backend fixture for all.

``moto_s3`` starts moto's server mode on 127.0.0.1 (a random free port) once per
session, creates a bucket and points every S3 client of this process (and of
child processes started with :attr:`Backend.env`) at it through the standard
``AWS_ENDPOINT_URL`` variable; credentials are dummies, instance metadata and
proxies are switched off, so that no request leaves the machine.

``backend`` is parametrized over ``local``, ``memory`` and ``s3``: each test
gets a fresh folder on that backend and URIs in the form users pass them.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from storage_tally import terminal_summary

BUCKET = "cairn-test"
BACKENDS = ("local", "memory", "s3")


@dataclass
class MotoS3:
    """A running moto S3 server."""

    endpoint_url: str
    bucket: str
    env: dict[str, str]

    def filesystem(self, **kwargs: Any) -> Any:
        """A fresh s3fs filesystem on the server (no instance or listing cache unless asked)."""
        import s3fs

        opts: dict[str, Any] = {"skip_instance_cache": True, "use_listings_cache": False}
        opts.update(kwargs)
        client_kwargs = dict(opts.pop("client_kwargs", {}))
        client_kwargs.setdefault("endpoint_url", self.endpoint_url)
        return s3fs.S3FileSystem(client_kwargs=client_kwargs, **opts)


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """moto's S3 server on 127.0.0.1, with a bucket; the process env points S3 clients at it."""
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    assert host == "127.0.0.1"
    url = f"http://127.0.0.1:{port}"
    cfg = tmp_path_factory.mktemp("aws")
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(cfg / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(cfg / "credentials"),
        # botocore >= 1.31 (and so s3fs) honours this for every client it builds.
        "AWS_ENDPOINT_URL": url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    for k in ("AWS_PROFILE", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "AWS_ENDPOINT_URL_S3"):
        mp.delenv(k, raising=False)
    moto = MotoS3(endpoint_url=url, bucket=BUCKET, env=env)
    moto.filesystem().mkdir(BUCKET)
    try:
        yield moto
    finally:
        mp.undo()
        import fsspec

        # Drop cached S3 filesystems that point at the server about to stop.
        fsspec.filesystem("s3").clear_instance_cache()
        server.stop()


@pytest.fixture
def no_read_retry_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader's pauses between attempts at a folder without a root manifest, cut to 1 ms each.

    On an object store a reader that finds no root manifest may be looking at a save in
    flight, so it tries again after 0.05, 0.25 and 1 s before it says "not found". A test
    that looks at the store while its only writer cannot move (a probe called inside the
    writer's storage call, or a SIGKILLed saver) gains nothing from those 1.3 s per look:
    nothing can commit meanwhile. The attempts stay as many; only the waits shrink.
    """
    import cairn._reader

    monkeypatch.setattr(cairn._reader, "_RETRY_DELAYS", (0.001, 0.001, 0.001))


@dataclass
class Backend:
    """One test's folder on one storage backend.

    Attributes:
        name: ``local``, ``memory`` or ``s3``.
        fs: An fsspec filesystem reaching the folder (for tampering in tests).
        base: The folder as a path on ``fs``.
        env: Environment variables a child process needs to reach the backend.
    """

    name: str
    fs: Any
    base: str
    env: dict[str, str] = field(default_factory=dict)

    def path(self, *parts: str) -> str:
        """A path on :attr:`fs` below the test's folder."""
        return "/".join([self.base.rstrip("/"), *parts])

    def uri(self, *parts: str) -> str:
        """The path as users pass it: a plain local path, ``memory://...`` or ``s3://...``."""
        p = self.path(*parts)
        if self.name == "local":
            return p
        if self.name == "memory":
            return f"memory://{p}"
        return f"s3://{p}"

    def child_env(self) -> dict[str, str]:
        """``os.environ`` plus what a child process needs."""
        return {**os.environ, **self.env}


def make_backend(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Build the backend ``name`` for one test, and clean it up afterwards."""
    if name == "local":
        from fsspec.implementations.local import LocalFileSystem

        yield Backend("local", LocalFileSystem(), str(tmp_path / "store"))
    elif name == "memory":
        from fsspec.implementations.memory import MemoryFileSystem

        fs = MemoryFileSystem()
        base = f"/cairn-tests/{uuid.uuid4().hex[:12]}"
        yield Backend("memory", fs, base)
        if fs.exists(base):
            fs.rm(base, recursive=True)
    else:
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        yield Backend("s3", moto.filesystem(), f"{moto.bucket}/{uuid.uuid4().hex[:12]}", env=dict(moto.env))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh folder on each backend: local disk, ``memory://`` and S3 (moto on 127.0.0.1)."""
    yield from make_backend(request.param, tmp_path, request)


@pytest.fixture(params=("memory", "s3"))
def remote_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The backends without folder renames (commit marker written last)."""
    yield from make_backend(request.param, tmp_path, request)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the counts of kills, corruptions and hostile inputs tried and refused."""
    terminal_summary(terminalreporter)
