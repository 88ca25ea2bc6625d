"""RLlib's ``ray.rllib.algorithms.ppo.torch.ppo_torch_learner``: ``PPOTorchLearner``, cairn's PPO learner."""

from __future__ import annotations

from cairn.rl.algorithms.ppo.ppo_learner import PPOLearner

__all__ = ["PPOTorchLearner"]

PPOTorchLearner = PPOLearner
"""RLlib's name of PPO's PyTorch learner: cairn's :class:`PPOLearner` (PyTorch is cairn's one framework)."""
