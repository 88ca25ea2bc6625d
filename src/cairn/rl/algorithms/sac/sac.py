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
from cairn.rl.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from cairn.rl.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from cairn.rl.algorithms.sac.sac_learner import SACLearner
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.translations import Accept, Refuse, Rule, integer, number
from cairn.rl.core.learner.learner import Learner
from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["SAC", "SACConfig"]


def _initial_alpha(config: Any, value: Any) -> dict[str, Any]:
    alpha = number("initial_alpha")(config, value)["initial_alpha"]
    return {"model_config": {**config.model_config, "initial_alpha": alpha}}  # the module holds log_alpha


def _target_entropy(config: Any, value: Any) -> dict[str, Any]:
    if value == "auto":
        return {"target_entropy": None}  # cairn's None is RLlib's "auto": -|A|
    return number("target_entropy")(config, value)


def _optimization_config(config: Any, value: Any) -> dict[str, Any]:
    names = {"actor_learning_rate": "policy_lr", "critic_learning_rate": "q_lr", "entropy_learning_rate": "alpha_lr"}
    if not isinstance(value, dict) or set(value) - set(names):
        raise ValueError(f"optimization_config must be a dict with keys from {sorted(names)}, got {value!r:.80}.")
    return {names[k]: number(names[k], name=k)(config, v)[names[k]] for k, v in value.items()}


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

    RLLIB_RULES: ClassVar[dict[str, dict[str, Rule]]] = {
        "training": {
            "twin_q": Accept((True,), "cairn's SAC always has twin Q-networks"),
            "initial_alpha": _initial_alpha,
            "target_entropy": _target_entropy,
            "actor_lr": number("policy_lr", name="actor_lr"),
            "critic_lr": number("q_lr", name="critic_lr"),
            "alpha_lr": number("alpha_lr"),
            "optimization_config": _optimization_config,
            "lr": Accept((None,), "SAC's rates are actor_lr, critic_lr and alpha_lr"),
            "lr_schedule": Accept((None,), "SAC's rates are actor_lr, critic_lr and alpha_lr (constant)"),
            "target_network_update_freq": integer("target_network_update_freq"),
            "q_model_config": Refuse("use rl_module(model_config={'fcnet_hiddens': [...]}) for both networks"),
            "policy_model_config": Refuse("use rl_module(model_config={'fcnet_hiddens': [...]}) for both networks"),
            "_deterministic_loss": Accept((False,), "cairn's SAC samples actions in its loss"),
            "_use_beta_distribution": Accept((False,), "cairn's SAC uses a squashed Gaussian"),
        }
    }
    """RLlib's SAC ``training()`` settings (see :class:`~cairn.rl.config.builders.ConfigBuilders`)."""

    @classmethod
    def algo_class(cls) -> type[OffPolicyAlgorithm]:
        """:class:`SAC`."""
        return SAC

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
        if self.lr_schedule is not None:  # its learner's optimizers keep their own rates
            raise ValueError("SACConfig takes no lr_schedule: its rates are policy_lr, q_lr and alpha_lr (constant).")


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
