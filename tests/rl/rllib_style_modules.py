"""RLModules written the RLlib way (setup + _forward + ValueFunctionAPI), for the tests.

A module of their own (not the test file) so that checkpoints record them as
``rllib_style_modules:<Class>`` and any test process can import them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.apis import ValueFunctionAPI
from cairn.rl.core.rl_module.torch import TorchRLModule


class VPGTorchRLModule(TorchRLModule):
    """RLlib's ``rllib/examples/rl_modules/classes/vpg_torch_rlm.py``: logits only, no value function."""

    def setup(self) -> None:
        input_dim = self.observation_space.shape[0]
        hidden_dim = self.model_config["hidden_dim"]
        output_dim = self.action_space.n
        self._policy_net = nn.Sequential(nn.Linear(input_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, output_dim))

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        action_logits = self._policy_net(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: action_logits}


class ActorCriticRLModule(TorchRLModule, ValueFunctionAPI):
    """A PPO module as RLlib users write one: action_dist_inputs from _forward, values from compute_values.

    Discrete actions: logits. Box actions: mean and log_std concatenated (RLlib's TorchDiagGaussian layout).
    """

    def setup(self) -> None:
        obs_dim = int(self.observation_space.shape[0])
        hidden = int(self.model_config.get("hidden_dim", 8))
        space = self.action_space
        out_dim = int(space.n) if hasattr(space, "n") else 2 * int(space.shape[0])
        self.pi = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, out_dim))
        self.vf = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}

    def compute_values(self, batch: Mapping[str, Any], embeddings: Any | None = None) -> torch.Tensor:
        values: torch.Tensor = self.vf(batch[Columns.OBS]).squeeze(-1)
        return values
