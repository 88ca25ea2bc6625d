"""SAC (Haarnoja et al., 2018) with CleanRL's defaults: its config.

``SACConfig`` holds SAC's settings (the defaults of CleanRL's
``sac_continuous_action.py``) and names SAC's learner and default module;
:class:`~cairn.rl.algorithms.sac.sac_learner.SACLearner` holds the losses and
:class:`~cairn.rl.algorithms.sac.default_sac_rl_module.DefaultSACRLModule` the
networks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cairn.registry import register_type
from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from cairn.rl.algorithms.sac.sac_learner import SACLearner
from cairn.rl.core.learner.learner import Learner
from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["SACConfig"]


@register_type
@dataclass
class SACConfig(AlgorithmConfig):
    """Settings of SAC; the defaults are CleanRL's ``sac_continuous_action.py`` ones.

    Inherits the environment, sampling and scale settings of
    :class:`~cairn.rl.algorithms.algorithm_config.AlgorithmConfig`, with
    SAC's values: one gradient step on a minibatch of ``minibatch_size``
    transitions per update (``num_epochs=1``), no gradient clipping, no
    learning-rate schedule (each optimizer keeps its own rate), no observation
    filter (a filter that keeps changing would make the stored transitions
    disagree with each other), one environment per env runner.
    The network sizes and the starting alpha are the module's ``model_config``
    (:data:`~cairn.rl.algorithms.sac.default_sac_rl_module.DEFAULT_SAC_MODEL_CONFIG`).
    """

    env: str = "Pendulum-v1"
    num_envs_per_env_runner: int = 1
    minibatch_size: int = 256
    num_epochs: int = 1
    max_grad_norm: float | None = None
    lr_anneal_timesteps: int | None = None
    observation_filter: str | None = None
    model_config: dict[str, Any] = field(default_factory=dict)

    gamma: float = 0.99
    """Discount factor."""

    tau: float = 0.005
    """Soft target update: after each update the target Q-networks move this fraction of the way."""

    policy_lr: float = 3e-4
    """Adam learning rate of the policy."""

    q_lr: float = 1e-3
    """Adam learning rate of the two Q-networks."""

    alpha_lr: float = 1e-3
    """Adam learning rate of ``log_alpha`` (CleanRL uses ``q_lr``)."""

    autotune_alpha: bool = True
    """Learn the entropy coefficient; ``False`` keeps ``model_config["initial_alpha"]``."""

    target_entropy: float | None = None
    """The entropy alpha tuning aims for; ``None``: ``-|A|`` (minus the action dimension)."""

    def get_default_learner_class(self) -> type[Learner]:
        """:class:`~cairn.rl.algorithms.sac.sac_learner.SACLearner`."""
        return SACLearner

    def get_default_rl_module_class(self) -> type[RLModule]:
        """:class:`~cairn.rl.algorithms.sac.default_sac_rl_module.DefaultSACRLModule`."""
        return DefaultSACRLModule

    def validate(self) -> None:
        """Check ranges; see :meth:`AlgorithmConfig.validate`."""
        super().validate()
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {self.gamma}.")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must lie in (0, 1], got {self.tau}.")
        for name in ("policy_lr", "q_lr", "alpha_lr"):
            if float(getattr(self, name)) <= 0.0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")
