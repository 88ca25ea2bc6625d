"""PPO (Schulman et al., 2017) with CleanRL's defaults, as a cairn Algorithm.

One :meth:`PPO.train` call is one iteration: every env runner samples
``rollout_length`` steps in each of its sub-environments, GAE turns the
rollouts into advantages and value targets, the learner runs ``num_epochs``
epochs of minibatch updates, and the new weights go to the env runners.

Example::

    from cairn.rl import PPO, PPOConfig

    algo = PPO(PPOConfig(env="CartPole-v1", seed=0))
    for _ in range(10):
        print(algo.train()["env_runners"]["episode_return_mean"])
    path = algo.save_to_path("ckpt")
    same = PPO.from_checkpoint(path)          # goes on exactly where algo stopped
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from cairn.registry import register_type
from cairn.rl._aliases import register_old_paths
from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from cairn.rl.algorithms.ppo.ppo_learner import LEARNER_RESULTS_CURR_KL_COEFF_KEY, LEARNER_RESULTS_KL_KEY, PPOLearner
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.translations import Accept, Rule, number
from cairn.rl.core.learner.learner import Learner
from cairn.rl.core.learner.learner_group import LearnerGroup
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.core.rl_module.stateful import STATE_IN_PREFIX, max_seq_len_of, to_sequences
from cairn.rl.env.env_runner import SampleBatch
from cairn.rl.utils.gae import compute_gae
from cairn.rl.utils.nested import concat_rows, map_leaves

__all__ = ["LEARNER_RESULTS_CURR_KL_COEFF_KEY", "LEARNER_RESULTS_KL_KEY", "PPO", "PPOConfig"]


def _check_vf_clip_param(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value <= 0.0:
        raise ValueError(
            f"vf_clip_param={value!r:.60} is refused: give a positive number (RLlib's 10.0, or float('inf')), "
            "or None for no clipping."
        )


def _use_kl_loss(config: Any, value: Any) -> dict[str, Any]:
    """RLlib's ``training(use_kl_loss=...)``: a bool."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"use_kl_loss={value!r:.60} is refused: give True or False.")
    return {"use_kl_loss": bool(value)}


def _vf_clip_param(config: Any, value: Any) -> dict[str, Any]:
    """RLlib's ``training(vf_clip_param=...)``: a positive number, or ``None`` (no clipping)."""
    _check_vf_clip_param(value)
    return {"vf_clip_param": None if value is None else float(value)}


@register_type
@dataclass
class PPOConfig(AlgorithmConfig):
    """Settings of PPO; the defaults are CleanRL's ``ppo.py`` (CartPole) ones, but for the learning rate and
    gradient clipping, which are RLlib's (``lr=5e-5``, no clipping; CleanRL: ``lr=2.5e-4``, ``max_grad_norm=0.5``,
    which ``cairn train`` keeps for PPO).

    Inherits the environment, sampling and scale settings of
    :class:`~cairn.rl.algorithms.algorithm.AlgorithmConfig`. Change a copy with
    ``dataclasses.replace(config, lr=1e-3)``.
    """

    lr: float = 5e-5
    """The optimizer's learning rate at the start (RLlib's PPO default; CleanRL's is ``2.5e-4``)."""

    max_grad_norm: float | None = None
    """Gradients are clipped to this global norm (RLlib's ``grad_clip``); ``None``, RLlib's PPO default,
    does not clip (CleanRL clips at ``0.5``)."""

    gamma: float = 0.99
    """Discount factor."""

    gae_lambda: float = 0.95
    """Lambda of generalized advantage estimation."""

    clip_param: float = 0.2
    """Clip range of the probability ratio in the surrogate loss."""

    vf_loss_coeff: float = 0.5
    """Weight of the value loss."""

    vf_clip_param: float | None = None
    """RLlib's value-loss clipping: each step's squared value error is clamped at this value before
    the mean (``min((V - target)^2, vf_clip_param)``, RLlib's formula). ``None``, cairn's default,
    does not clip (RLlib's default is ``10.0``: write ``training(vf_clip_param=10.0)`` for RLlib's loss)."""

    entropy_coeff: float = 0.01
    """Weight of the entropy bonus."""

    normalize_advantages: bool = True
    """Standardize the advantages (mean 0, std 1) before the surrogate loss, over what
    ``advantage_normalization`` says."""

    advantage_normalization: str = "minibatch"
    """Where ``normalize_advantages`` standardizes: ``"minibatch"`` (cairn's default, CleanRL's: each
    minibatch over its own rows) or ``"batch"`` (RLlib's: once per update over the module's whole
    train batch, ``(A - mean) / max(1e-4, std)``)."""

    use_kl_loss: bool = False
    """RLlib's KL penalty: add ``kl_coeff x KL(sampling policy || current policy)`` to the loss and adapt
    ``kl_coeff`` towards ``kl_target`` after each update. ``False``, cairn's default (CleanRL's PPO
    only clips the ratio); RLlib's default is ``True``. The KL is estimated from the sampled actions,
    ``mean((r - 1) - log r)`` with ``r`` the probability ratio (unbiased for the KL and its gradient),
    where RLlib computes it in closed form from the sampling policy's distribution inputs, which
    cairn's train batches do not carry."""

    kl_coeff: float = 0.2
    """Initial coefficient of the KL penalty (RLlib's default). After each update of a module, its
    coefficient is multiplied by 1.5 when the KL of the update's last minibatch exceeds
    ``2 x kl_target`` and by 0.5 when it is below ``kl_target / 2`` (RLlib's rule); the adapted
    coefficient is learner state (checkpointed, restored exactly). Read only with ``use_kl_loss``."""

    kl_target: float = 0.01
    """Target KL of the coefficient's adaptation (RLlib's default)."""

    RLLIB_RULES: ClassVar[dict[str, dict[str, Rule]]] = {
        "training": {
            "lambda_": number("gae_lambda", name="lambda_"),
            "lambda": number("gae_lambda", name="lambda"),
            "gamma": number("gamma"),
            "clip_param": number("clip_param"),
            "vf_loss_coeff": number("vf_loss_coeff"),
            "entropy_coeff": number("entropy_coeff"),
            "use_critic": Accept((True,), "cairn's PPO always learns a value function"),
            "use_gae": Accept((True,), "cairn's PPO always uses GAE"),
            "use_kl_loss": _use_kl_loss,
            "kl_coeff": number("kl_coeff"),
            "kl_target": number("kl_target"),
            "vf_clip_param": _vf_clip_param,
            "entropy_coeff_schedule": Accept((None,), "cairn's entropy_coeff is constant"),
        }
    }
    """RLlib's PPO ``training()`` settings (see :class:`~cairn.rl.config.builders.ConfigBuilders`)."""

    @classmethod
    def algo_class(cls) -> type[Algorithm]:
        """:class:`PPO`."""
        return PPO

    def get_default_learner_class(self) -> type[Learner]:
        """:class:`~cairn.rl.algorithms.ppo.ppo_learner.PPOLearner`."""
        return PPOLearner

    def get_default_rl_module_class(self) -> type[RLModule]:
        """:class:`~cairn.rl.algorithms.ppo.default_ppo_rl_module.DefaultPPORLModule`."""
        return DefaultPPORLModule

    def validate(self) -> None:
        """Check ranges; see :meth:`AlgorithmConfig.validate`."""
        super().validate()
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError("gamma and gae_lambda must lie in [0, 1].")
        if self.clip_param <= 0.0:
            raise ValueError("clip_param must be positive.")
        _check_vf_clip_param(self.vf_clip_param)  # each module's override too (the base validates those)
        if self.advantage_normalization not in ("minibatch", "batch"):
            raise ValueError(
                f"advantage_normalization={self.advantage_normalization!r:.60} is refused: give 'minibatch' "
                "(each minibatch over its rows, cairn's default) or 'batch' (the whole train batch, RLlib's)."
            )
        for name in ("kl_coeff", "kl_target"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < math.inf:
                raise ValueError(f"{name}={value!r:.60} is refused: give a finite number >= 0 (RLlib's 0.2 / 0.01).")


def _flatten(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return array.reshape((-1, *array.shape[2:]))


class PPO(Algorithm):
    """Proximal policy optimization.

    Args:
        config: A :class:`PPOConfig`.
    """

    config_class: ClassVar[type[AlgorithmConfig]] = PPOConfig
    config: PPOConfig

    def build_learner_group(self, config: Any, module_specs: Mapping[str, RLModuleSpec]) -> LearnerGroup:
        """The learners (PPOLearner) training every module of ``module_specs``."""
        return LearnerGroup(config, module_specs)

    def _postprocess(self, batch: SampleBatch, module_id: str) -> dict[str, npt.NDArray[Any]]:
        advantages, value_targets = compute_gae(
            batch["rewards"],
            batch["vf_preds"],
            batch["terminateds"],
            batch["truncateds"],
            batch["final_vf"],
            batch["bootstrap_vf"],
            gamma=self.config.gamma,
            gae_lambda=self.config.gae_lambda,
        )
        columns = {
            "obs": batch["obs"],
            "actions": batch["actions"],
            "action_logp": batch["action_logp"],
            "vf_preds": batch["vf_preds"],
            "advantages": advantages.astype(np.float32),
            "value_targets": value_targets.astype(np.float32),
        }
        states = {key: value for key, value in batch.items() if key.startswith(STATE_IN_PREFIX)}
        if states:  # a stateful module: sequences of each slot, cut at episode ends and every max_seq_len steps
            model_config = self.env_runner.module[module_id].model_config
            return to_sequences(
                {**columns, **states},
                np.asarray(batch["terminateds"]) | np.asarray(batch["truncateds"]),
                max_seq_len=max_seq_len_of(model_config, module_id),
            )
        return {key: map_leaves(_flatten, value) for key, value in columns.items()}

    def training_step(self) -> dict[str, Any]:
        """Sample, compute GAE, update, sync weights; returns the iteration's metrics."""
        per_runner = self.env_runner_group.sample_batches()
        train_batches: dict[str, dict[str, npt.NDArray[Any]]] = {}
        for runner_batches in per_runner:
            for module_id, batch in runner_batches.items():
                processed = self._postprocess(batch, module_id)
                if module_id in train_batches:
                    previous = train_batches[module_id]
                    processed = {key: concat_rows([previous[key], value]) for key, value in processed.items()}
                train_batches[module_id] = processed
        results: dict[str, Any] = dict(self.learner_group.update(train_batches))
        self._sync_env_runners()
        results.update(self._env_runner_results())
        return results


register_old_paths(PPO, PPOConfig)
