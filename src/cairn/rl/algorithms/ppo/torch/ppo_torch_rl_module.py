"""RLlib 2.60's deprecated ``ray.rllib.algorithms.ppo.torch.ppo_torch_rl_module`` path.

RLlib keeps this module as a backward-compatible import of ``DefaultPPOTorchRLModule`` and warns
on import; so does cairn, so that RLlib code importing it runs unchanged. To be removed on
2027-06-01, or when RLlib removes the path if that comes first: import
:class:`~cairn.rl.algorithms.ppo.torch.default_ppo_torch_rl_module.DefaultPPOTorchRLModule`.
"""

from __future__ import annotations

import warnings

from cairn.rl.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule

__all__ = ["PPOTorchRLModule"]

PPOTorchRLModule = DefaultPPOTorchRLModule
"""RLlib's old name of PPO's default PyTorch module (cairn's ``DefaultPPORLModule``)."""

warnings.warn(
    "cairn.rl.algorithms.ppo.torch.ppo_torch_rl_module.PPOTorchRLModule is deprecated (as in RLlib 2.60) and "
    "will be removed on 2027-06-01: import DefaultPPOTorchRLModule from "
    "cairn.rl.algorithms.ppo.torch.default_ppo_torch_rl_module.",
    DeprecationWarning,
    stacklevel=2,
)
