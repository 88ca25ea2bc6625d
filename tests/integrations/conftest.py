"""One small local Ray cluster for the RLlib and Tune tests (starting one takes seconds here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """``ray.init(num_cpus=2)`` with a small object store, shut down at the end of the session."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[tune]')")
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
