"""RLlib's ``ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module``: PPO's default PyTorch module."""

from __future__ import annotations

from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule

__all__ = ["DefaultPPOTorchRLModule"]

DefaultPPOTorchRLModule = DefaultPPORLModule
"""RLlib's name of PPO's default PyTorch module: cairn's :class:`DefaultPPORLModule` (one framework)."""
