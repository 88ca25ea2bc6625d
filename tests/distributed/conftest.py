"""One real local Ray cluster for the whole distributed suite (starting one takes ~10 s here)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from dist_helpers import S3_SECRET


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def s3_filesystem() -> Iterator[Any]:
    """An s3fs filesystem on moto's S3 server (127.0.0.1), with the bucket ``cairn-dist``.

    Credentials and endpoint are arguments of the filesystem, not environment
    variables, so that the filesystem the actors get (by reference, through Ray's
    object store) reaches the same server.
    """
    s3fs = pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    fs = s3fs.S3FileSystem(
        key="testing",
        secret=S3_SECRET,
        client_kwargs={"endpoint_url": f"http://{host}:{port}"},
        skip_instance_cache=True,
        use_listings_cache=False,
    )
    fs.mkdir("cairn-dist")
    try:
        yield fs
    finally:
        server.stop()
