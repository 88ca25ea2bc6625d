"""One small local Ray cluster for the RLlib and Tune tests (starting one takes seconds here)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """``ray.init(num_cpus=2)`` with a small object store, shut down at the end of the session."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[rllib]')")
    pytest.importorskip("ray.rllib", reason="RLlib is not installed (pip install 'cairn-rl[rllib]')")
    # Tune's trial outputs go under the test's tmp dirs, not ~/ray_results.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            object_store_memory=150 * 1024 * 1024,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    yield ray
    ray.shutdown()
