"""RLlib's shared-encoder example (``ray.rllib.examples.rl_modules.classes.vpg_using_shared_encoder_rlm``).

A :class:`~cairn.rl.core.rl_module.multi_rl_module.MultiRLModule` whose modules are one
:class:`SharedEncoder` (under :data:`SHARED_ENCODER_ID`) and any number of
:class:`VPGPolicyAfterSharedEncoder` policies that read its embeddings: the encoder runs
once per batch and every policy's head sits on top of it. Build it with
``MultiRLModuleSpec(multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
rl_module_specs={SHARED_ENCODER_ID: RLModuleSpec(SharedEncoder, ...), "agent_1": ...})``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.core.rl_module.torch import TorchRLModule

__all__ = ["SHARED_ENCODER_ID", "SharedEncoder", "VPGMultiRLModuleWithSharedEncoder", "VPGPolicyAfterSharedEncoder"]

SHARED_ENCODER_ID = "encoder"
"""The module id of the shared encoder."""


def _positive(model_config: Mapping[str, Any], key: str, who: str) -> int:
    value = model_config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{who} needs model_config[{key!r}], a positive int; got {value!r:.40}.")
    return value


class SharedEncoder(TorchRLModule):
    """``obs -> embedding_dim`` (one linear layer and a ReLU), shared by the policies."""

    def setup(self) -> None:
        """Build the encoder from the observation space and ``model_config["embedding_dim"]``."""
        shape = getattr(self.observation_space, "shape", None)
        if not shape or len(shape) != 1:
            raise ValueError(f"SharedEncoder needs a 1-d Box observation space, got {self.observation_space}.")
        dim = _positive(self.model_config, "embedding_dim", "SharedEncoder")
        self._net = nn.Sequential(nn.Linear(int(shape[0]), dim), nn.ReLU())

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.EMBEDDINGS: self._net(batch[Columns.OBS])}


class VPGPolicyAfterSharedEncoder(TorchRLModule):
    """Logits from the encoder's embeddings (``batch["embeddings"]``): ``embedding_dim -> hidden_dim -> actions``."""

    def setup(self) -> None:
        """Build the head from ``model_config["embedding_dim"]``, ``["hidden_dim"]`` and the action space."""
        num_actions = getattr(self.action_space, "n", None)
        if num_actions is None:
            raise ValueError(f"VPGPolicyAfterSharedEncoder needs a Discrete action space, got {self.action_space}.")
        embedding_dim = _positive(self.model_config, "embedding_dim", "VPGPolicyAfterSharedEncoder")
        hidden_dim = _positive(self.model_config, "hidden_dim", "VPGPolicyAfterSharedEncoder")
        self._head = nn.Sequential(
            nn.Linear(embedding_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, int(num_actions))
        )

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._head(batch[Columns.EMBEDDINGS])}


class VPGMultiRLModuleWithSharedEncoder(MultiRLModule):
    """The shared encoder and the policies after it: the encoder runs first, each policy on its embeddings."""

    def setup(self) -> None:
        """Check that there is the encoder and at least one policy."""
        if SHARED_ENCODER_ID not in self or len(self) < 2:
            raise ValueError(
                f"VPGMultiRLModuleWithSharedEncoder needs a module {SHARED_ENCODER_ID!r} (a SharedEncoder) and at "
                f"least one policy; got {self.keys()}."
            )
        self.encoder = self[SHARED_ENCODER_ID]

    def forward_inference(self, batch: Mapping[str, Mapping[str, torch.Tensor]]) -> dict[str, dict[str, torch.Tensor]]:
        """Greedy actions of each policy in ``batch`` (module id -> module batch), on the shared embeddings."""
        out: dict[str, dict[str, torch.Tensor]] = {}
        for module_id, module_batch in batch.items():
            embeddings = self.encoder.forward_train(module_batch)[Columns.EMBEDDINGS]
            out[module_id] = self[module_id].forward_inference({**module_batch, Columns.EMBEDDINGS: embeddings})
        return out
