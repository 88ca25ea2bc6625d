"""RLlib's ``ray.rllib.algorithms``: ``from cairn.rl.algorithms import PPOConfig, DQNConfig, SACConfig``.

The algorithms and their configs, importable from the package as from RLlib's
(``Algorithm``, ``AlgorithmConfig``, ``PPO``/``PPOConfig``, ``DQN``/``DQNConfig``,
``SAC``/``SACConfig``); each lives in its own module (``cairn.rl.algorithms.ppo.ppo``,
...), which is what checkpoints record. They are imported on first use, so that
importing a submodule (the catalog, which the command line reads to build its
parsers) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn._lazy import lazy_names

if TYPE_CHECKING:
    from cairn.rl.algorithms.algorithm import Algorithm
    from cairn.rl.algorithms.dqn.dqn import DQN, DQNConfig
    from cairn.rl.algorithms.ppo.ppo import PPO, PPOConfig
    from cairn.rl.algorithms.sac.sac import SAC, SACConfig
    from cairn.rl.config.algorithm_config import AlgorithmConfig

__all__ = ["DQN", "PPO", "SAC", "Algorithm", "AlgorithmConfig", "DQNConfig", "PPOConfig", "SACConfig"]

_HOMES = {
    "Algorithm": "cairn.rl.algorithms.algorithm",
    "AlgorithmConfig": "cairn.rl.config.algorithm_config",
    "DQN": "cairn.rl.algorithms.dqn.dqn",
    "DQNConfig": "cairn.rl.algorithms.dqn.dqn",
    "PPO": "cairn.rl.algorithms.ppo.ppo",
    "PPOConfig": "cairn.rl.algorithms.ppo.ppo",
    "SAC": "cairn.rl.algorithms.sac.sac",
    "SACConfig": "cairn.rl.algorithms.sac.sac",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES)
