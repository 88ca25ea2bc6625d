"""PPO (Schulman et al., 2017) with CleanRL's defaults, as a cairn Algorithm.

One :meth:`PPO.train` call is one iteration: every env runner samples
``rollout_length`` steps in each of its sub-environments, GAE turns the
rollouts into advantages and value targets, the learner runs ``num_epochs``
epochs of minibatch updates, and the new weights go to the env runners.

Example::

    from cairn.rl import PPO, PPOConfig

    algo = PPO(PPOConfig(env="CartPole-v1", seed=0))
    for _ in range(10):
        print(algo.train()["episode_return_mean"])
    path = algo.save_to_path("ckpt")
    same = PPO.from_checkpoint(path)          # goes on exactly where algo stopped
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from cairn.registry import register_type
from cairn.rl.algorithm import Algorithm, AlgorithmConfig
from cairn.rl.env_runner import SampleBatch
from cairn.rl.gae import compute_gae
from cairn.rl.learner_group import LearnerGroup
from cairn.rl.rl_module import RLModuleSpec

__all__ = ["PPO", "PPOConfig"]


@register_type
@dataclass
class PPOConfig(AlgorithmConfig):
    """Settings of PPO; the defaults are CleanRL's ``ppo.py`` (CartPole) ones.

    Inherits the environment, sampling and scale settings of
    :class:`~cairn.rl.algorithm.AlgorithmConfig`. Change a copy with
    ``dataclasses.replace(config, lr=1e-3)``.
    """

    lr: float = 2.5e-4
    """Adam's learning rate at the start."""

    lr_anneal_timesteps: int | None = 500_000
    """The learning rate falls linearly to 0 over this many timesteps trained per
    module (env steps for single-agent envs); ``None`` keeps it constant."""

    gamma: float = 0.99
    """Discount factor."""

    gae_lambda: float = 0.95
    """Lambda of generalized advantage estimation."""

    num_epochs: int = 4
    """Passes over each iteration's batch."""

    minibatch_size: int = 128
    """Samples per gradient step (CleanRL: 4 minibatches of a 4 x 128 batch)."""

    clip_param: float = 0.2
    """Clip range of the probability ratio in the surrogate loss."""

    vf_loss_coeff: float = 0.5
    """Weight of the value loss."""

    entropy_coeff: float = 0.01
    """Weight of the entropy bonus."""

    max_grad_norm: float | None = 0.5
    """Gradients are clipped to this global norm; ``None`` turns clipping off."""

    normalize_advantages: bool = True
    """Normalize advantages per minibatch."""

    def validate(self) -> None:
        """Check ranges; see :meth:`AlgorithmConfig.validate`."""
        super().validate()
        if self.minibatch_size < 1 or self.num_epochs < 1:
            raise ValueError("minibatch_size and num_epochs must be at least 1.")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError("gamma and gae_lambda must lie in [0, 1].")
        if self.lr <= 0.0 or self.clip_param <= 0.0:
            raise ValueError("lr and clip_param must be positive.")


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
        """One local learner training every module of ``module_specs``."""
        return LearnerGroup(config, module_specs)

    def _postprocess(self, batch: SampleBatch) -> dict[str, npt.NDArray[Any]]:
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
        return {
            "obs": _flatten(batch["obs"]),
            "actions": _flatten(batch["actions"]),
            "action_logp": _flatten(batch["action_logp"]),
            "vf_preds": _flatten(batch["vf_preds"]),
            "advantages": _flatten(advantages.astype(np.float32)),
            "value_targets": _flatten(value_targets.astype(np.float32)),
        }

    def training_step(self) -> dict[str, Any]:
        """Sample, compute GAE, update, sync weights; returns the iteration's metrics."""
        per_runner = self.env_runner_group.sample()
        train_batches: dict[str, dict[str, npt.NDArray[Any]]] = {}
        for runner_batches in per_runner:
            for module_id, batch in runner_batches.items():
                processed = self._postprocess(batch)
                if module_id in train_batches:
                    previous = train_batches[module_id]
                    processed = {key: np.concatenate([previous[key], value]) for key, value in processed.items()}
                train_batches[module_id] = processed
        results: dict[str, Any] = dict(self.learner_group.update(train_batches))
        self._sync_env_runners()
        results.update(self.env_runner_group.get_metrics())
        return results
