"""DQN (Mnih et al., 2015) with double Q-learning, target network and n-step returns.

Defaults are CleanRL's ``dqn.py`` (CartPole: target copy every 500 steps, batch
128, the 120-84 Q-network, epsilon down to 0.05) except the ones measured better
within 100,000 env steps (see :class:`DQNConfig`). One :meth:`DQN.train` call is one iteration of
:class:`~cairn.rl.algorithms.off_policy.OffPolicyAlgorithm`: sample with
epsilon-greedy exploration, store n-step transitions in the replay buffer,
take ``1 / train_frequency`` gradient steps per env step, sync the weights.

Example::

    from cairn.rl import DQN, DQNConfig

    algo = DQN(DQNConfig(env="CartPole-v1", seed=0))
    for _ in range(10):
        print(algo.train()["env_runners"]["episode_return_mean"])
    path = algo.save_to_path("ckpt")          # replay_buffer/ beside learner_group/
    same = DQN.from_checkpoint(path)          # goes on exactly where algo stopped
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from cairn._ctor_bounds import FolderSizes, alloc_limit
from cairn.registry import register_type
from cairn.rl.algorithms.dqn.default_dqn_rl_module import DefaultDQNRLModule, dqn_parameter_bytes
from cairn.rl.algorithms.dqn.dqn_learner import DQNLearner
from cairn.rl.algorithms.off_policy import NStep, OffPolicyAlgorithm, OffPolicyConfig
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.translations import Accept, Refuse, Rule, epsilon_schedule, integer, number, replay_buffer_config
from cairn.rl.core.learner.learner import Learner, LinearSchedule
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.utils.replay_buffers import MultiAgentReplayBuffer, PrioritizedMultiAgentReplayBuffer

__all__ = ["DQN", "DQNConfig"]

_TD_ERROR_LOSSES = ("mse", "huber")

_PRIORITIZED_TYPES = (
    "PrioritizedEpisodeReplayBuffer",
    "MultiAgentPrioritizedEpisodeReplayBuffer",
    "PrioritizedReplayBuffer",
    "MultiAgentPrioritizedReplayBuffer",
)
_PRIORITIZED_KEYS = {
    "alpha": "prioritized_replay_alpha",
    "beta": "prioritized_replay_beta",
    "epsilon": "prioritized_replay_eps",
}


def dqn_replay_buffer_config(config: Any, value: Any) -> dict[str, Any]:
    """RLlib's DQN ``replay_buffer_config``: a uniform buffer (see :func:`replay_buffer_config`) or
    ``{"type": "PrioritizedEpisodeReplayBuffer", "capacity", "alpha", "beta", "epsilon"}``.

    A prioritized type sets ``replay_buffer_class=PrioritizedMultiAgentReplayBuffer`` and the
    ``prioritized_replay_*`` fields; a uniform type sets ``MultiAgentReplayBuffer`` back. A dict
    without ``type`` changes only what it gives (RLlib updates its dict the same way).
    """
    if not isinstance(value, Mapping) or value.get("type") not in _PRIORITIZED_TYPES:
        out = replay_buffer_config(config, value)
        if isinstance(value, Mapping) and "type" in value:
            out["replay_buffer_class"] = MultiAgentReplayBuffer
        elif isinstance(value, Mapping) and config.prioritized:  # capacity only, of a prioritized buffer
            return {**out, **_prioritized_fields(config, value)}
        return out
    return {"replay_buffer_class": PrioritizedMultiAgentReplayBuffer, **_prioritized_fields(config, value)}


def _prioritized_fields(config: Any, value: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(value) - {"type", "capacity", *_PRIORITIZED_KEYS})
    if unknown:
        raise ValueError(
            f"replay_buffer_config keys {unknown} are refused: cairn's prioritized buffer takes type, capacity, "
            f"alpha, beta and epsilon; its chunking is replay_buffer_chunk_rows."
        )
    out: dict[str, Any] = {}
    if "capacity" in value:
        out.update(integer("replay_buffer_capacity", name="capacity")(config, value["capacity"]))
    for key, field_name in _PRIORITIZED_KEYS.items():
        if key in value:
            out.update(number(field_name, name=key)(config, value[key]))
    return out


@register_type
@dataclass
class DQNConfig(OffPolicyConfig):
    """Settings of DQN. Inherits the off-policy settings of :class:`OffPolicyConfig`
    (buffer, n-step, learning starts, train frequency, target updates) and the
    environment and scale settings of :class:`AlgorithmConfig`.

    The exploration rate falls linearly from ``epsilon_start`` to ``epsilon_end``
    over ``epsilon_timesteps`` env steps sampled; its state is that counter (the
    env runners' lifetime env steps), so it continues exactly after a restore.
    """

    # Measured better than CleanRL's on CartPole-v1 within 100,000 env steps (docs/rl.md#dqn): CleanRL's
    # settings with epsilon over 50,000 steps peaked at 316; these reach 400 at 77,200 steps (seed 0).
    lr: float = 5e-4
    """Adam's learning rate (CleanRL: 2.5e-4)."""

    n_step: NStep = 3
    """Rewards summed per transition (CleanRL: 1), or RLlib's range ``(low, high)``: each
    transition draws its n, ``low <= n < high`` (see :attr:`OffPolicyConfig.n_step`)."""

    replay_buffer_capacity: int = 50_000
    """Transitions each module's buffer holds (CleanRL: 10,000)."""

    num_steps_sampled_before_learning_starts: int = 1_000
    """Env steps sampled before the first gradient step (CleanRL: 10,000)."""

    train_frequency: int = 5
    """Env steps sampled per gradient step (CleanRL: 10)."""

    epsilon_start: float = 1.0
    """Exploration rate at env step 0 (CleanRL's ``start_e``)."""

    epsilon_end: float = 0.05
    """Exploration rate from ``epsilon_timesteps`` on (CleanRL's ``end_e``)."""

    epsilon_timesteps: int = 10_000
    """Env steps over which epsilon falls (CleanRL: ``exploration_fraction`` 0.5 of 500,000)."""

    double_q: bool = True
    """Double Q-learning: the online network picks the next action, the target values it."""

    td_error_loss_fn: str = "huber"
    """``"huber"`` (smooth L1, as SB3 and RLlib) or ``"mse"`` (CleanRL)."""

    dueling: bool = False
    """The dueling architecture (Wang et al., 2016) in the default module: value and advantage
    streams, ``Q = V + A - mean(A)``. Sets ``model_config["dueling"]`` of the modules whose
    spec gives no ``model_config`` of its own (RLlib's ``dueling``; RLlib's default is True)."""

    RLLIB_RULES: ClassVar[dict[str, dict[str, Rule]]] = {
        "training": {
            "epsilon": epsilon_schedule,
            "target_network_update_freq": integer("target_network_update_freq"),
            "replay_buffer_config": dqn_replay_buffer_config,
            "num_atoms": Accept((1,), "cairn's DQN is not distributional"),
            "noisy": Accept((False,), "cairn's DQN explores epsilon-greedily"),
            "hiddens": Refuse(
                "it is RLlib's old name of the head's widths: use rl_module(model_config={'head_fcnet_hiddens': "
                "[...]}) (and 'fcnet_hiddens' for the shared layers)"
            ),
            "adam_epsilon": Accept((1e-8,), "cairn's learners use Adam with torch's default eps"),
            "before_learn_on_batch": Accept((None,), "cairn has no such hook"),
        }
    }
    """RLlib's DQN ``training()`` settings (see :class:`~cairn.rl.config.builders.ConfigBuilders`)."""

    @classmethod
    def algo_class(cls) -> type[OffPolicyAlgorithm]:
        """:class:`DQN`."""
        return DQN

    def get_default_learner_class(self) -> type[Learner]:
        """:class:`~cairn.rl.algorithms.dqn.dqn_learner.DQNLearner`."""
        return DQNLearner

    def get_default_rl_module_class(self) -> type[RLModule]:
        """:class:`~cairn.rl.algorithms.dqn.default_dqn_rl_module.DefaultDQNRLModule`."""
        return DefaultDQNRLModule

    def validate(self) -> None:
        """Check ranges; see :meth:`OffPolicyConfig.validate`."""
        super().validate()
        if not (0.0 <= self.epsilon_end <= 1.0 and 0.0 <= self.epsilon_start <= 1.0):
            raise ValueError("epsilon_start and epsilon_end must lie in [0, 1].")
        if self.epsilon_timesteps < 0:
            raise ValueError(f"epsilon_timesteps must be >= 0, got {self.epsilon_timesteps}.")
        if not isinstance(self.dueling, bool):
            raise ValueError(f"dueling must be a bool, got {self.dueling!r:.40}.")
        if self.dueling:
            given = self.model_config.get("dueling")
            if given is False:
                raise ValueError("dueling=True but model_config={'dueling': False}: the two disagree; set one of them.")
            # The modules read their model_config: fold the algorithm's setting in (whatever the order
            # of training(dueling=True) and rl_module(model_config=...) was).
            self.model_config = {**self.model_config, "dueling": True}
        if self.td_error_loss_fn not in _TD_ERROR_LOSSES:
            raise ValueError(
                f"td_error_loss_fn must be one of {list(_TD_ERROR_LOSSES)}, got {self.td_error_loss_fn!r}."
            )


class DQN(OffPolicyAlgorithm):
    """Deep Q-networks: double Q, a target network, n-step returns, epsilon-greedy exploration.

    Args:
        config: A :class:`DQNConfig`.
    """

    config_class: ClassVar[type[AlgorithmConfig]] = DQNConfig
    config: DQNConfig

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """The bound of :meth:`Algorithm.ctor_args_problem
        <cairn.rl.algorithms.algorithm.Algorithm.ctor_args_problem>`, with the Q-network's head
        (``head_fcnet_hiddens``) counted too."""
        problem = super().ctor_args_problem(args, kwargs, folder)
        config = args[0] if args else kwargs.get("config")
        if problem is not None or not isinstance(config, AlgorithmConfig):
            return problem
        specs = getattr(config.rl_module_spec, "rl_module_specs", None)
        total = 0
        for module_id in config.policies:
            # A MultiRLModuleSpec's dict, or its one shared spec; else the config's own RLModuleSpec.
            spec = specs.get(module_id) if isinstance(specs, Mapping) else (specs or config.rl_module_spec)
            own = getattr(spec, "model_config", None)
            total += dqn_parameter_bytes(own if isinstance(own, Mapping) else config.model_config)
        if total > alloc_limit(folder.tree_bytes):
            return (
                f"the Q-networks of its config make at least {total} bytes of parameters, and the checkpoint "
                f"holds {folder.tree_bytes} bytes"
            )
        return None

    @property
    def epsilon(self) -> float:
        """The exploration rate the env runners act with now (from the env steps sampled so far)."""
        schedule = LinearSchedule(self.config.epsilon_start, self.config.epsilon_end, self.config.epsilon_timesteps)
        return schedule.value(self.env_runner.num_env_steps_sampled_lifetime)

    def get_weights_for_env_runners(self) -> dict[str, Any]:
        """The learners' weights, with each module's ``epsilon`` buffer set to :attr:`epsilon`.

        A module of the user's own without an ``epsilon`` buffer gets its weights as they are.
        """
        weights: dict[str, Any] = dict(self.learner_group.get_weights())
        epsilon = torch.tensor(self.epsilon, dtype=torch.float32)
        for module_id, module_weights in weights.items():
            if "epsilon" in module_weights:
                weights[module_id] = {**module_weights, "epsilon": epsilon.clone()}
        return weights

    def training_step(self) -> dict[str, Any]:
        """One off-policy iteration (:meth:`OffPolicyAlgorithm.training_step`); adds ``epsilon``."""
        results = super().training_step()
        results["epsilon"] = self.epsilon
        return results
