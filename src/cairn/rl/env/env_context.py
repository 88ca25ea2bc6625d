"""RLlib's ``EnvContext`` (``ray.rllib.env.env_context``): an env's config with where the env runs.

What ``on_environment_created`` hands a callback as ``env_context``: the ``env_config``
(the dict itself) and the env's place, ``worker_index`` (0: the local runner),
``num_workers`` (the config's ``num_env_runners``), ``vector_index`` (which env copy of
the runner) and ``remote`` (whether the runner is a Ray actor).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["EnvContext"]


class EnvContext(dict[str, Any]):
    """An ``env_config`` dict with the env's place (RLlib's ``EnvContext``; see the module docstring)."""

    def __init__(
        self,
        env_config: Mapping[str, Any],
        *,
        worker_index: int,
        num_workers: int,
        vector_index: int = 0,
        remote: bool = False,
    ) -> None:
        super().__init__(env_config)
        self.worker_index = int(worker_index)
        self.num_workers = int(num_workers)
        self.vector_index = int(vector_index)
        self.remote = bool(remote)

    def __repr__(self) -> str:
        return (
            f"EnvContext({dict(self)!r}, worker_index={self.worker_index}, num_workers={self.num_workers}, "
            f"vector_index={self.vector_index}, remote={self.remote})"
        )
