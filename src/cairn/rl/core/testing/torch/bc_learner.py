"""RLlib's ``BCTorchLearner`` (``ray.rllib.core.testing.torch.bc_learner``): behaviour cloning of actions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import torch

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.core.rl_module.torch import TorchRLModule
from cairn.rl.core.testing.base_testing_learner import BaseTestingLearner

__all__ = ["BCTorchLearner"]


class BCTorchLearner(BaseTestingLearner):
    """The loss is the mean negative log-likelihood of the batch's actions under the module's distribution."""

    def compute_loss_for_module(
        self, module_id: str, module: RLModule, minibatch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``-mean(logp(actions))`` of the module's train distribution."""
        out = module.forward_train(minibatch)
        dist = cast(TorchRLModule, module).get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
        loss = -torch.mean(dist.logp(minibatch[Columns.ACTIONS]))
        return loss, {"policy_loss": float(loss.detach())}
