"""RLlib's ``ray.rllib.algorithms``: ``from cairn.rl.algorithms import PPOConfig, DQNConfig, SACConfig``.

The algorithms and their configs, importable from the package as from RLlib's
(``Algorithm``, ``AlgorithmConfig``, ``PPO``/``PPOConfig``, ``DQN``/``DQNConfig``,
``SAC``/``SACConfig``); each lives in its own module (``cairn.rl.algorithms.ppo.ppo``,
...), which is what checkpoints record.
"""

from __future__ import annotations

from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.algorithms.dqn.dqn import DQN, DQNConfig
from cairn.rl.algorithms.ppo.ppo import PPO, PPOConfig
from cairn.rl.algorithms.sac.sac import SAC, SACConfig
from cairn.rl.config.algorithm_config import AlgorithmConfig

__all__ = ["DQN", "PPO", "SAC", "Algorithm", "AlgorithmConfig", "DQNConfig", "PPOConfig", "SACConfig"]
