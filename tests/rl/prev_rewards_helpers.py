"""Connector factories of the PrevActionsPrevRewards tests, recorded by reference (importable by path)."""

from __future__ import annotations

from typing import Any

from cairn.rl.connectors.env_to_module import FlattenObservations, PrevActionsPrevRewards


def two_actions_one_reward(env: Any, spaces: Any = None, device: Any = None) -> list[Any]:
    return [PrevActionsPrevRewards(n_prev_actions=2, n_prev_rewards=1), FlattenObservations()]
