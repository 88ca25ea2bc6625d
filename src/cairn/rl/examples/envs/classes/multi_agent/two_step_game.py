"""RLlib's ``TwoStepGame`` (``ray.rllib.examples.envs.classes.multi_agent.two_step_game``).

The cooperative matrix game of QMIX (Rashid et al., 2018): agent ``0`` picks one of
two matrix games in step one; in step two the pair is paid 7 in the first, or 0, 1 or 8
in the second (8 when both pick action 1), split evenly.

Agent ids are ``0`` and ``1``, as in RLlib. Differs from RLlib: the
observations are ``Box``es (cairn's default modules take ``Box`` observations): the
one-hot of RLlib's ``Discrete(6)`` observation, or with
``one_hot_state_encoding=True`` RLlib's ``[state one-hot, agent number]`` as floats.
``separate_state_space`` and ``actions_are_logits`` (for QMIX/MADDPG) are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv

__all__ = ["TwoStepGame"]


class TwoStepGame(MultiAgentEnv):
    """Two agents, two steps, a shared reward.

    Args:
        env_config: ``one_hot_state_encoding`` (default False).

    Raises:
        ValueError: ``separate_state_space`` or ``actions_are_logits`` set.
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        settings = dict(env_config or {})
        for refused in ("separate_state_space", "actions_are_logits"):
            if settings.get(refused):
                raise ValueError(
                    f"TwoStepGame({refused}=True) is refused: it serves RLlib's QMIX and MADDPG, which cairn does not "
                    "have."
                )
        self.one_hot_state_encoding = bool(settings.get("one_hot_state_encoding", False))
        self.agent_1, self.agent_2 = 0, 1  # RLlib's int agent ids
        self.agents = [self.agent_1, self.agent_2]
        self.possible_agents = list(self.agents)
        size = 4 if self.one_hot_state_encoding else 6
        self.observation_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Box(0.0, 2.0, (size,), np.float32))
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))
        self.state = np.array([1, 0, 0])

    def reset(
        self, *, seed: int | None = None, options: dict[Any, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Back to the first state."""
        gym.Env.reset(self, seed=seed)
        self.state = np.array([1, 0, 0])
        return self._obs(), {}

    def step(  # type: ignore[override]  # dicts of rewards and flags, as MultiAgentEnv.step
        self, action_dict: dict[Any, Any]
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """RLlib's rules: agent 1 picks the game, then the game pays the pair."""
        state_index = int(np.flatnonzero(self.state)[0])
        if state_index == 0:
            self.state = np.array([0, 1, 0]) if int(action_dict[self.agent_1]) == 0 else np.array([0, 0, 1])
            global_rew, terminated = 0.0, False
        elif state_index == 1:
            global_rew, terminated = 7.0, True
        else:
            a1, a2 = int(action_dict[self.agent_1]), int(action_dict[self.agent_2])
            global_rew = 0.0 if a1 == a2 == 0 else 8.0 if a1 == a2 == 1 else 1.0
            terminated = True
        rewards = {self.agent_1: global_rew / 2.0, self.agent_2: global_rew / 2.0}
        infos = {self.agent_1: {"done": terminated}, self.agent_2: {"done": terminated}}
        return self._obs(), rewards, {ALL_AGENTS: terminated}, {ALL_AGENTS: False}, infos

    def _obs(self) -> dict[Any, npt.NDArray[np.float32]]:
        return {self.agent_1: self._agent_obs(1), self.agent_2: self._agent_obs(2)}

    def _agent_obs(self, number: int) -> npt.NDArray[np.float32]:
        if self.one_hot_state_encoding:
            return np.concatenate([self.state, [number]]).astype(np.float32)
        obs = np.zeros(6, dtype=np.float32)
        obs[int(np.flatnonzero(self.state)[0]) + 3 * (number - 1)] = 1.0
        return obs
