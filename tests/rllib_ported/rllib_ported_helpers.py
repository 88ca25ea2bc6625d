"""What the ported RLlib tests need at module level (cairn records functions by reference, never lambdas)."""

from __future__ import annotations

from typing import Any


def agent_id_as_module_id(agent_id: Any, episode: Any, **kwargs: Any) -> Any:
    """RLlib's ``lambda agent_id, episode, worker, **kwargs: agent_id`` as a top-level function."""
    return agent_id


def agent_to_numbered_policy(agent_id: Any, episode: Any, **kwargs: Any) -> str:
    """RLlib's ``lambda aid, *args, **kwargs: f"p{aid}"`` (one policy per agent) as a top-level function."""
    return f"p{agent_id}"


def every_agent_to_p0(agent_id: Any, episode: Any, **kwargs: Any) -> str:
    """RLlib's ``lambda aid, *args, **kwargs: "p0"`` (one policy for all agents) as a top-level function."""
    return "p0"
