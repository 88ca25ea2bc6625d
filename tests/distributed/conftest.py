"""One real local Ray cluster for the whole distributed suite (starting one takes ~10 s here)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """``ray.init(num_cpus=2)`` with a small object store, shut down at the end of the session.

    The workers get ``tests/`` on their ``PYTHONPATH`` (pytest's ``pythonpath``), so that
    classes of the test helpers named in a config (callbacks) are found there too.
    """
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")
    if not ray.is_initialized():
        tests = str(Path(__file__).resolve().parents[1])
        python_path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH", "")) if p)
        ray.init(
            num_cpus=2,
            object_store_memory=150 * 1024 * 1024,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"PYTHONPATH": python_path}},
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def s3_filesystem() -> Iterator[Any]:
    """An s3fs filesystem on moto's S3 server (127.0.0.1), with the bucket ``cairn-dist``.

    Credentials and endpoint are arguments of the filesystem, not environment
    variables, so that the filesystem pickled into a Ray actor reaches the same server.
    """
    s3fs = pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    fs = s3fs.S3FileSystem(
        key="testing",
        secret="testing",
        client_kwargs={"endpoint_url": f"http://{host}:{port}"},
        skip_instance_cache=True,
        use_listings_cache=False,
    )
    fs.mkdir("cairn-dist")
    try:
        yield fs
    finally:
        server.stop()
