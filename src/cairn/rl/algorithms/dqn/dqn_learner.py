"""DQNLearner: the (double) Q-learning loss on the target-network learner.

As in CleanRL's ``dqn.py``: the TD target from the target network, a mean
squared TD error; with ``double_q`` the online network picks the next action
and the target network values it (van Hasselt et al., 2016). Transitions are
n-step (:func:`cairn.rl.algorithms.off_policy.n_step_transitions`): the target is
``rewards + discounts * (1 - terminateds) * Q_target(next_obs, a*)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, cast

import torch

from cairn.rl.algorithms.off_policy import TargetNetworkLearner
from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["DQNLearner", "DQNLossSettings"]


class DQNLossSettings(Protocol):
    """The settings the loss reads (a :class:`~cairn.rl.algorithms.dqn.dqn.DQNConfig` has them)."""

    double_q: bool
    td_error_loss_fn: str


class DQNLearner(TargetNetworkLearner):
    """A :class:`~cairn.rl.algorithms.off_policy.TargetNetworkLearner` with DQN's loss.

    The module's :meth:`~cairn.rl.core.rl_module.rl_module.RLModule.forward_train`
    returns ``{"q_values": Tensor[B, num_actions]}``.
    """

    def compute_loss_for_module(
        self, module_id: str, module: RLModule, minibatch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """TD loss of ``Q(obs, actions)`` against the (double) Q-learning target."""
        config = cast(DQNLossSettings, self.config_for_module(module_id))
        mb = minibatch
        q_values = module.forward_train({"obs": mb["obs"]})["q_values"]
        q_taken = q_values.gather(-1, mb["actions"].long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            target_q = self.target_module[module_id].forward_train({"obs": mb["next_obs"]})["q_values"]
            if config.double_q:
                best = module.forward_train({"obs": mb["next_obs"]})["q_values"].argmax(-1, keepdim=True)
                next_q = target_q.gather(-1, best).squeeze(-1)
            else:
                next_q = target_q.max(-1).values
            alive = 1.0 - mb["terminateds"].to(torch.float32)
            td_target = mb["rewards"].to(torch.float32) + mb["discounts"].to(torch.float32) * alive * next_q
        if config.td_error_loss_fn == "huber":
            loss = torch.nn.functional.smooth_l1_loss(q_taken, td_target)
        else:
            loss = torch.nn.functional.mse_loss(q_taken, td_target)
        return loss, {"td_loss": float(loss.detach()), "q_values_mean": float(q_taken.detach().mean())}
