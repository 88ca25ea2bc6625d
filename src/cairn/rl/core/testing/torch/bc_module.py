"""RLlib's ``DiscreteBCTorchModule`` (``ray.rllib.core.testing.torch.bc_module``): logits from a one-layer MLP."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.torch import TorchRLModule

__all__ = ["DiscreteBCTorchModule"]


class DiscreteBCTorchModule(TorchRLModule):
    """``obs -> fcnet_hiddens[0] -> ReLU -> num_actions`` logits (a 1-d ``Box`` observation, ``Discrete`` actions)."""

    def setup(self) -> None:
        """Build the policy net from the spaces and ``model_config["fcnet_hiddens"][0]``."""
        shape = getattr(self.observation_space, "shape", None)
        num_actions = getattr(self.action_space, "n", None)
        hiddens = self.model_config.get("fcnet_hiddens")
        if not shape or len(shape) != 1 or num_actions is None or not hiddens or not isinstance(hiddens[0], int):
            raise ValueError(
                "DiscreteBCTorchModule needs a 1-d Box observation space, a Discrete action space and "
                f"model_config['fcnet_hiddens'] (a list of ints); got {self.observation_space}, "
                f"{self.action_space}, {self.model_config}."
            )
        self.input_dim = int(shape[0])
        self.policy = nn.Sequential(
            nn.Linear(self.input_dim, hiddens[0]), nn.ReLU(), nn.Linear(hiddens[0], int(num_actions))
        )

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.policy(batch[Columns.OBS])}
