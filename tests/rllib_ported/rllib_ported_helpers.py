"""What the ported RLlib tests need at module level (cairn records functions by reference, never lambdas)."""

from __future__ import annotations

from typing import Any


def agent_id_as_module_id(agent_id: Any, episode: Any, **kwargs: Any) -> Any:
    """RLlib's ``lambda agent_id, episode, worker, **kwargs: agent_id`` as a top-level function."""
    return agent_id
