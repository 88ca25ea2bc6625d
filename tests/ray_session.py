"""How the tests start (or join) Ray: one home for the settings the session's cluster and the multi-node tests share."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any


def init_test_ray(ray: ModuleType, *, address: str | None = None) -> Any:
    """``ray.init`` as the tests want it: ``tests/`` on the workers' ``PYTHONPATH`` (classes and
    functions a config names by reference are found there), no dashboard, no worker logs.

    Without ``address``: a new one-node cluster of 2 CPUs and a small object store. With one:
    join that cluster (a ``ray.cluster_utils.Cluster``), whose nodes were sized when added.
    """
    tests = str(Path(__file__).resolve().parent)
    python_path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH", "")) if p)
    common: dict[str, Any] = {
        "log_to_driver": False,
        "configure_logging": False,
        "runtime_env": {"env_vars": {"PYTHONPATH": python_path}},
    }
    if address is not None:
        return ray.init(address=address, **common)
    # address="local": always a new cluster. Without it ray.init joins any Ray it finds running on
    # the machine (another test run's, a user's), and then refuses num_cpus.
    return ray.init(
        address="local", num_cpus=2, object_store_memory=150 * 1024 * 1024, include_dashboard=False, **common
    )
