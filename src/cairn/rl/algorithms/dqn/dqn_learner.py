"""DQNLearner: the (double) Q-learning loss on the target-network learner.

As in CleanRL's ``dqn.py``: the TD target from the target network, a mean
squared TD error; with ``double_q`` the online network picks the next action
and the target network values it (van Hasselt et al., 2016). Transitions are
n-step (:func:`cairn.rl.algorithms.off_policy.n_step_transitions`): the target is
``rewards + discounts * (1 - terminateds) * Q_target(next_obs, a*)``.

From a prioritized buffer (:class:`~cairn.rl.utils.replay_buffers.PrioritizedReplayBuffer`)
a batch also has ``weights``, the importance weights, which scale each row's loss
(Schaul et al., 2016), and ``batch_indexes``, its buffer rows: the learner keeps each
row's ``|TD error|`` with its row, and the algorithm takes them
(:meth:`DQNLearner.pop_td_errors`) to update the priorities, as RLlib's DQN learner
returns its ``TD_ERROR_KEY``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Module id -> (buffer rows, |TD errors|) of each minibatch since the last pop_td_errors.
        self._td_errors: dict[str, list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]] = {}

    def update(self, batches: Mapping[str, Any]) -> dict[str, float]:
        """:meth:`Learner.update <cairn.rl.core.learner.learner.Learner.update>`; the TD errors kept
        are this update's only (nobody popping them must not make them pile up)."""
        self._td_errors.clear()
        return super().update(batches)

    def pop_td_errors(self, module_id: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The buffer rows and ``|TD errors|`` of module ``module_id``'s minibatches since the last call.

        Only batches with ``batch_indexes`` (from a prioritized buffer) leave TD errors;
        empty arrays when none did.
        """
        parts = self._td_errors.pop(module_id, [])
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

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
        loss_fn = (
            torch.nn.functional.smooth_l1_loss if config.td_error_loss_fn == "huber" else torch.nn.functional.mse_loss
        )
        if "weights" in mb:  # prioritized replay: each row's loss scaled by its importance weight
            loss = (mb["weights"].to(torch.float32) * loss_fn(q_taken, td_target, reduction="none")).mean()
        else:
            loss = loss_fn(q_taken, td_target)
        if "batch_indexes" in mb:
            td_abs = (q_taken.detach() - td_target).abs().to(torch.float64).cpu().numpy()
            rows_of = mb["batch_indexes"].cpu().numpy().astype(np.int64)
            self._td_errors.setdefault(module_id, []).append((rows_of, td_abs))
        return loss, {"td_loss": float(loss.detach()), "q_values_mean": float(q_taken.detach().mean())}
