"""PettingZoo's shipped rock-paper-scissors (``classic.rps_v2``) for cairn's PPO, in an importable module.

Configs and checkpoints name the classes here by path
(``"pettingzoo_games:RockPaperScissors"``), so that a new process (or a Ray
worker: ``tests/`` is on their ``PYTHONPATH``) finds them once it imports this module.
rps observes the opponent's last move as a ``Discrete(4)``; PPO's default module
takes ``Box`` observations, so :class:`OneHotPPOModule` one-hot encodes them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import cairn
from cairn.rl import DefaultPPORLModule
from cairn.rl.env.pettingzoo_env import ParallelPettingZooEnv

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # rps imports pygame, which greets on import
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # rps_v2 suggests pettingzoo.make; the module is the API
    from pettingzoo.classic import rps_v2


@cairn.register  # configs name it by path: this library allows it (SPEC 8)
class RockPaperScissors(ParallelPettingZooEnv):
    """``rps_v2.parallel_env(**env_config)`` (e.g. ``{"max_cycles": 6}``) through the adapter."""

    def __init__(self, env_config: Mapping[str, Any] | None = None) -> None:
        super().__init__(rps_v2.parallel_env(**dict(env_config or {})))


class OneHotPPOModule(DefaultPPORLModule):
    """PPO's default MLP on a ``Discrete`` observation, one-hot encoded."""

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        if not isinstance(observation_space, gym.spaces.Discrete):
            raise ValueError(f"OneHotPPOModule needs a Discrete observation space, got {observation_space!r}.")
        size = int(observation_space.n)
        super().__init__(gym.spaces.Box(0.0, 1.0, (size,), np.float32), action_space, model_config, seed=seed)
        self.observation_space = observation_space  # what the checkpoint records and rebuilds from

    def _obs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        values = torch.as_tensor(batch["obs"]).reshape(-1).long()
        return torch.nn.functional.one_hot(values, self.obs_dim).to(torch.float32)
