"""SAC (Haarnoja et al., 2018) with CleanRL's defaults, as a cairn Algorithm.

One :meth:`SAC.train` call is one iteration of
:class:`~cairn.rl.algorithms.off_policy.OffPolicyAlgorithm`: the env runners
sample ``rollout_length`` steps per sub-environment, the transitions go into
the replay buffer, and (after ``num_steps_sampled_before_learning_starts``)
the learner takes one gradient step per ``train_frequency`` env steps on
``minibatch_size`` transitions drawn from it.
:class:`~cairn.rl.algorithms.sac.sac_learner.SACLearner` holds the losses,
:class:`~cairn.rl.algorithms.sac.default_sac_rl_module.DefaultSACRLModule` the
networks.

Example::

    from cairn.rl.algorithms.sac.sac import SAC, SACConfig

    algo = SAC(SACConfig(env="Pendulum-v1", seed=0))
    for _ in range(200):                      # 20,000 env steps
        results = algo.train()
    path = algo.save_to_path("ckpt")          # weights, targets, 3 optimizers, the buffer
    same = SAC.from_checkpoint(path)          # goes on exactly where algo stopped
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from cairn.registry import register_type
from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from cairn.rl.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from cairn.rl.algorithms.sac.sac_learner import SACLearner
from cairn.rl.core.learner.learner import Learner
from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["SAC", "SACConfig"]


@register_type
@dataclass
class SACConfig(OffPolicyConfig):
    """Settings of SAC; the defaults are CleanRL's ``sac_continuous_action.py`` ones.

    Inherits the off-policy settings of
    :class:`~cairn.rl.algorithms.off_policy.OffPolicyConfig` with SAC's values:
    a buffer of 1,000,000 transitions, 5,000 env steps before learning starts,
    one gradient step per env step on 256 transitions, a soft target update
    (``tau=0.005``) after every gradient step. The network sizes and the
    starting alpha are the module's ``model_config``
    (:data:`~cairn.rl.algorithms.sac.default_sac_rl_module.DEFAULT_SAC_MODEL_CONFIG`).
    ``lr`` is not read: each optimizer has its own rate below.
    """

    env: str = "Pendulum-v1"
    minibatch_size: int = 256
    replay_buffer_capacity: int = 1_000_000
    num_steps_sampled_before_learning_starts: int = 5_000
    train_frequency: int = 1
    tau: float = 0.005
    target_network_update_freq: int = 1
    model_config: dict[str, Any] = field(default_factory=dict)

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
        """Check ranges; see :meth:`OffPolicyConfig.validate`."""
        super().validate()
        for name in ("policy_lr", "q_lr", "alpha_lr"):
            if float(getattr(self, name)) <= 0.0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")


class SAC(OffPolicyAlgorithm):
    """Soft actor-critic: continuous actions, twin Q-networks with targets, automatic entropy tuning.

    Components: ``env_runner``, ``learner_group`` (the :class:`SACLearner`
    with ``rl_module``, ``target_rl_module`` and the ``qf``/``policy``/``alpha``
    optimizers) and ``replay_buffer``.

    Args:
        config: A :class:`SACConfig`.
    """

    config_class: ClassVar[type[AlgorithmConfig]] = SACConfig
    config: SACConfig
