"""One real local Ray cluster for the whole distributed suite (starting one takes ~10 s here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """``ray.init(num_cpus=2)`` with a small object store, shut down at the end of the session."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")
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
