"""PPOLearner: the clipped-surrogate loss of PPO on the generic :class:`Learner`.

The loss reads as in CleanRL's ``ppo.py``: the probability ratio of the new
and the sampling policy, clipped at ``1 +- clip_param``, a value loss, and an
entropy bonus; advantages are normalized per minibatch (or, RLlib's way, per
batch). With ``use_kl_loss`` (RLlib's KL penalty) the loss adds ``kl_coeff x KL``
and each module's ``kl_coeff`` adapts towards ``kl_target`` after every update:
learner state, checkpointed under ``kl_coeffs`` (module id -> coefficient).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, cast

import numpy as np
import torch

from cairn.checkpointable import Names
from cairn.rl._aliases import register_old_paths
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.columns import Columns
from cairn.rl.core.learner.learner import Learner, TrainBatch
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.core.rl_module.stateful import sequence_train_outputs
from cairn.rl.core.rl_module.torch.torch_rl_module import complete_train_outputs
from cairn.state_checks import ById, Number, Schema

__all__ = ["LEARNER_RESULTS_CURR_KL_COEFF_KEY", "LEARNER_RESULTS_KL_KEY", "PPOLearner", "PPOLossSettings"]

LEARNER_RESULTS_CURR_KL_COEFF_KEY = "curr_kl_coeff"
"""RLlib's key of a module's KL coefficient after an update in the learner results (with ``use_kl_loss``;
also exported by ``cairn.rl.algorithms.ppo.ppo``, RLlib's path)."""
LEARNER_RESULTS_KL_KEY = "mean_kl_loss"
"""RLlib's key of a module's mean KL divergence of the update in the learner results (with ``use_kl_loss``)."""


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
    advantage_normalization: str
    use_kl_loss: bool
    kl_coeff: float
    kl_target: float


_KL_COEFFS = ById(Number(low=0.0, finite=True))
"""Module id -> KL coefficient: finite numbers >= 0 (what adaptation from a valid one gives)."""


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

    state_schema: ClassVar[Schema] = Learner.state_schema | Schema({"kl_coeffs": _KL_COEFFS})
    """The Learner's state, and ``kl_coeffs``: the adapted KL coefficient of each module (finite, >= 0)."""

    def __init__(self, config: AlgorithmConfig, module_specs: Mapping[str, RLModuleSpec]) -> None:
        super().__init__(config, module_specs)
        self.curr_kl_coeffs: dict[str, float] = {
            module_id: self._initial_kl_coeff(module_id) for module_id in self.module
        }
        """Module id -> the KL coefficient now (RLlib's ``curr_kl_coeffs_per_module``); learner state."""
        # The KL of the last minibatch of each module (sum over this learner's rows, rows): the adaptation reads it.
        self._last_kl: dict[str, tuple[float, int]] = {}

    def _initial_kl_coeff(self, module_id: str) -> float:
        return float(cast(PPOLossSettings, self.config_for_module(module_id)).kl_coeff)

    def add_module(
        self,
        module_id: str,
        module: RLModule | RLModuleSpec | None = None,
        *,
        module_spec: RLModuleSpec | None = None,
        config_overrides: Mapping[str, Any] | None = None,
    ) -> RLModule:
        """As :meth:`Learner.add_module`; the new module's KL coefficient starts at its ``kl_coeff``."""
        built = super().add_module(module_id, module, module_spec=module_spec, config_overrides=config_overrides)
        self.curr_kl_coeffs[module_id] = self._initial_kl_coeff(module_id)
        return built

    def remove_module(self, module_id: str) -> RLModule:
        """As :meth:`Learner.remove_module`; the module's KL coefficient goes too."""
        module = super().remove_module(module_id)
        self.curr_kl_coeffs.pop(module_id, None)
        self._last_kl.pop(module_id, None)
        return module

    def _update_module(self, module_id: str, batch: TrainBatch) -> dict[str, float]:
        """The base's update (advantages standardized over the batch first, with ``"batch"``); then
        RLlib's adaptation of the KL coefficient from the last minibatch's KL."""
        config = cast(PPOLossSettings, self.config_for_module(module_id))
        if config.normalize_advantages and config.advantage_normalization == "batch":
            batch = {**batch, "advantages": _standardized(batch["advantages"], batch.get(Columns.LOSS_MASK))}
        self._last_kl.pop(module_id, None)
        metrics = super()._update_module(module_id, batch)
        if config.use_kl_loss:
            total, rows = self._last_kl.pop(module_id, (0.0, 0))
            kl = self.mean_over_minibatch(total, rows)
            coeff = self.curr_kl_coeffs[module_id]
            if kl > 2.0 * config.kl_target:  # RLlib's rule (NaN compares false: the coefficient stays)
                coeff *= 1.5
            elif kl < 0.5 * config.kl_target:
                coeff *= 0.5
            self.curr_kl_coeffs[module_id] = coeff
            metrics[LEARNER_RESULTS_KL_KEY] = kl
            metrics[LEARNER_RESULTS_CURR_KL_COEFF_KEY] = coeff
        return metrics

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
        if config.normalize_advantages and config.advantage_normalization == "minibatch":
            advantages = self.normalize_over_minibatch(advantages)
        surrogate = torch.max(
            -advantages * ratio,
            -advantages * torch.clamp(ratio, 1.0 - config.clip_param, 1.0 + config.clip_param),
        )
        policy_loss = surrogate.mean()
        vf_loss = 0.5 * _value_errors(out["vf_preds"], mb["value_targets"], config.vf_clip_param).mean()
        entropy = out["entropy"].mean()
        loss = policy_loss - config.entropy_coeff * entropy + config.vf_loss_coeff * vf_loss
        if config.use_kl_loss:
            # KL(sampling || current) estimated from the sampled actions: E[(r - 1) - log r] (k3), whose
            # value and gradient are the KL's in expectation; RLlib's closed form needs the sampling
            # policy's distribution inputs, which the batch does not carry.
            kl = ((ratio - 1.0) - logratio).mean()
            loss = loss + self.curr_kl_coeffs[module_id] * kl
            self._last_kl[module_id] = (float(kl.detach()) * logratio.numel(), logratio.numel())
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
        """The advantage normalization's all-reduce, with no rows (and no KL of this learner's)."""
        config = cast(PPOLossSettings, self.config_for_module(module_id))
        if config.normalize_advantages and config.advantage_normalization == "minibatch":
            self.normalize_over_minibatch(torch.zeros(0, dtype=torch.float32))
        if config.use_kl_loss:
            self._last_kl[module_id] = (0.0, 0)

    # ------------------------------------------------------------------ Checkpointable

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The :class:`Learner`'s state and ``kl_coeffs`` (module id -> the adapted KL coefficient)."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        state["kl_coeffs"] = dict(self.curr_kl_coeffs)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """The :class:`Learner`'s :meth:`~Learner.set_state`, then the KL coefficients of the modules trained
        now (a checkpoint of an earlier version has none: they keep their ``kl_coeff``)."""
        coeffs = self.state_schema.read(state, where="").get("kl_coeffs", {})  # refused before anything changes
        super().set_state(state)
        for module_id, coeff in coeffs.items():
            if module_id in self.curr_kl_coeffs:
                self.curr_kl_coeffs[module_id] = coeff


def _standardized(advantages: Any, mask: Any) -> Any:
    """RLlib's standardization over the batch, ``(A - mean) / max(1e-4, std)`` (``std`` with ``ddof=0``),
    of the real steps (``mask``) of sequences; the padding is left at 0."""
    values = np.asarray(advantages, dtype=np.float64)
    real = values if mask is None else values[np.asarray(mask, dtype=bool)]
    if real.size == 0:
        return advantages
    out = (values - real.mean()) / max(1e-4, float(real.std()))
    if mask is not None:
        out = np.where(np.asarray(mask, dtype=bool), out, 0.0)
    return out.astype(np.float32)


def _value_errors(values: torch.Tensor, targets: torch.Tensor, vf_clip_param: float | None) -> torch.Tensor:
    """Squared value errors ``(V - target)^2`` per step, clamped at ``vf_clip_param`` (RLlib's value-loss
    clipping, ``torch.clamp(vf_loss, 0, vf_clip_param)``) unless it is ``None``. A clamped step passes no
    gradient, as in RLlib."""
    errors = (values - targets.to(torch.float32)).pow(2)
    return errors if vf_clip_param is None else torch.clamp(errors, 0.0, vf_clip_param)


register_old_paths(PPOLearner)
