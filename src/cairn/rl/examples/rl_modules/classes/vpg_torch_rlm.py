"""RLlib's ``VPGTorchRLModule`` example (``ray.rllib.examples.rl_modules.classes.vpg_torch_rlm``).

A policy-gradient module written the RLlib way: ``setup()`` builds one MLP of
``model_config["hidden_dim"]`` units from the spaces, ``_forward`` returns the action
logits (no value function). RLlib's unit tests build it; cairn records it by reference
(``cairn.rl.examples.rl_modules.classes.vpg_torch_rlm:VPGTorchRLModule``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.torch import TorchRLModule

__all__ = ["VPGTorchRLModule"]


class VPGTorchRLModule(TorchRLModule):
    """Logits from an MLP ``obs -> hidden_dim -> ReLU -> num_actions`` (a ``Box`` observation, ``Discrete`` actions)."""

    def setup(self) -> None:
        """Build the policy net from the spaces and ``model_config["hidden_dim"]``."""
        shape = getattr(self.observation_space, "shape", None)
        num_actions = getattr(self.action_space, "n", None)
        hidden_dim = self.model_config.get("hidden_dim")
        if not shape or len(shape) != 1 or num_actions is None or not isinstance(hidden_dim, int) or hidden_dim < 1:
            raise ValueError(
                "VPGTorchRLModule needs a 1-d Box observation space, a Discrete action space and "
                f"model_config['hidden_dim'] (a positive int); got {self.observation_space}, {self.action_space}, "
                f"{self.model_config}."
            )
        self._policy_net = nn.Sequential(
            nn.Linear(int(shape[0]), hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, int(num_actions))
        )

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._policy_net(batch[Columns.OBS])}
