"""Fixtures of RLlib's checkpoint tests translated to cairn (``tests/rl/rllib_parity/``).

The folder runs without Ray; the one test whose RLlib original is about remote
env runners has a Ray variant that asks for :func:`ray_cluster`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A small local Ray cluster, shut down at the end only if this fixture started it.

    Another suite of the same session (``tests/distributed``) may have started one
    already; it is reused rather than restarted (a start costs ~10 s here).
    """
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")
    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            object_store_memory=150 * 1024 * 1024,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    yield ray
    if started:
        ray.shutdown()
