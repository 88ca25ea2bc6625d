"""PPOLearner: the clipped-surrogate loss of PPO on the generic :class:`Learner`.

The loss reads as in CleanRL's ``ppo.py``: the probability ratio of the new
and the sampling policy, clipped at ``1 +- clip_param``, a value loss, and an
entropy bonus; advantages are normalized per minibatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, cast

import torch

from cairn.rl._aliases import register_old_paths
from cairn.rl.core.columns import Columns
from cairn.rl.core.learner.learner import Learner
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.core.rl_module.stateful import sequence_train_outputs
from cairn.rl.core.rl_module.torch.torch_rl_module import complete_train_outputs

__all__ = ["PPOLearner", "PPOLossSettings"]


class PPOLossSettings(Protocol):
    """The settings the loss reads (a :class:`~cairn.rl.algorithms.ppo.ppo.PPOConfig` has them).

    A protocol rather than the config class, so that this module does not
    import ``ppo.py``, which imports it.
    """

    clip_param: float
    vf_loss_coeff: float
    vf_clip_param: float | None
    entropy_coeff: float
    normalize_advantages: bool


class PPOLearner(Learner):
    """A :class:`~cairn.rl.core.learner.learner.Learner` with PPO's loss.

    Stateful (recurrent) modules train on zero-padded sequences (``Columns.LOSS_MASK``):
    the loss and its statistics read the real steps only.

    Args:
        config: The PPO config (``clip_param``, ``vf_loss_coeff``,
            ``entropy_coeff``, ``normalize_advantages`` and the learner's settings).
        module_specs: Module id -> spec of each module to train.
    """

    supports_stateful_modules = True

    def compute_loss_for_module(
        self, module_id: str, module: RLModule, minibatch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """PPO's clipped surrogate + ``vf_loss_coeff`` x value loss - ``entropy_coeff`` x entropy.

        The value loss is ``0.5 * mean((V - target)^2)`` (CleanRL's), each step's squared error clamped
        at ``vf_clip_param`` first when it is set (RLlib's clipping; RLlib's loss has no 0.5).
        """
        config = cast(PPOLossSettings, self.config_for_module(module_id))
        mb = minibatch
        if Columns.LOSS_MASK in mb:
            # Sequences of a stateful module: its outputs and the columns at the real steps only, so that
            # every term and statistic below leaves the padding out.
            out, mb = sequence_train_outputs(module, mb)
        else:
            batch = {"obs": mb["obs"], "actions": mb["actions"]}
            # A module written the RLlib way returns action_dist_inputs (and has compute_values): complete it.
            out = complete_train_outputs(module, batch, module.forward_train(batch))
        logratio = out["action_logp"] - mb["action_logp"]
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - logratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > config.clip_param).float().mean()

        advantages = mb["advantages"].to(torch.float32)
        if config.normalize_advantages:
            advantages = self.normalize_over_minibatch(advantages)
        surrogate = torch.max(
            -advantages * ratio,
            -advantages * torch.clamp(ratio, 1.0 - config.clip_param, 1.0 + config.clip_param),
        )
        policy_loss = surrogate.mean()
        vf_loss = 0.5 * _value_errors(out["vf_preds"], mb["value_targets"], config.vf_clip_param).mean()
        entropy = out["entropy"].mean()
        loss = policy_loss - config.entropy_coeff * entropy + config.vf_loss_coeff * vf_loss
        return loss, {
            "policy_loss": float(policy_loss.detach()),
            "vf_loss": float(vf_loss.detach()),
            "entropy": float(entropy.detach()),
            "approx_kl": float(approx_kl),
            "clip_fraction": float(clip_fraction),
        }

    def compute_metrics_for_module(self, module_id: str, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """``vf_explained_var`` of the batch's value predictions (at the real steps of sequences)."""
        targets = batch["value_targets"].to(torch.float64)
        preds = batch["vf_preds"].to(torch.float64)
        if Columns.LOSS_MASK in batch:
            valid = batch[Columns.LOSS_MASK].to(torch.bool)
            targets, preds = targets[valid], preds[valid]
        target_var = float(targets.var(unbiased=False))
        explained = (
            float("nan") if target_var == 0.0 else 1.0 - float((targets - preds).var(unbiased=False)) / target_var
        )
        return {"vf_explained_var": explained}

    def join_collectives_without_rows(self, module_id: str) -> None:
        """The advantage normalization's all-reduce, with no rows."""
        if cast(PPOLossSettings, self.config_for_module(module_id)).normalize_advantages:
            self.normalize_over_minibatch(torch.zeros(0, dtype=torch.float32))


def _value_errors(values: torch.Tensor, targets: torch.Tensor, vf_clip_param: float | None) -> torch.Tensor:
    """Squared value errors ``(V - target)^2`` per step, clamped at ``vf_clip_param`` (RLlib's value-loss
    clipping, ``torch.clamp(vf_loss, 0, vf_clip_param)``) unless it is ``None``. A clamped step passes no
    gradient, as in RLlib."""
    errors = (values - targets.to(torch.float32)).pow(2)
    return errors if vf_clip_param is None else torch.clamp(errors, 0.0, vf_clip_param)


register_old_paths(PPOLearner)
