"""Fixtures every test folder may use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """One real local Ray cluster for the whole session (``ray.init(num_cpus=2)``, small object store).

    Starting one takes ~10 s here, so every Ray test (distributed, RLlib, Tune) shares it.
    """
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
