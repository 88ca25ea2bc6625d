"""The off-policy scaffolding DQN and SAC share: config, replay buffer component, n-step, target networks.

* :class:`OffPolicyConfig`: the settings of a replay-based algorithm (buffer
  size, n-step, learning starts, updates per env step, target updates);
* :class:`OffPolicyAlgorithm`: an :class:`~cairn.rl.algorithms.algorithm.Algorithm`
  whose env runners sample transitions with their next observation
  (``sample_next_obs``), which it turns into n-step transitions, stores in a
  :class:`~cairn.rl.utils.replay_buffers.MultiAgentReplayBuffer` (one buffer per
  module: the ``replay_buffer/`` component beside ``learner_group/``, in every
  checkpoint) and trains on, ``1 / train_frequency`` gradient steps per env step;
* :class:`TargetNetworkLearner`: a :class:`~cairn.rl.core.learner.learner.Learner`
  with a target copy of every module (the ``target_rl_module/`` component of the
  learner), updated every ``target_network_update_freq`` env steps with ``tau``;
* :func:`n_step_transitions` and :func:`replay_columns`, the pure parts.

An algorithm built on it implements only its loss (a ``TargetNetworkLearner``
subclass) and, if it likes, :meth:`OffPolicyAlgorithm.get_weights_for_env_runners`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from cairn import Checkpointable
from cairn.registry import register_type
from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.translations import Accept, Rule, integer, number, replay_buffer_config
from cairn.rl.core.learner.learner import Learner
from cairn.rl.core.learner.learner_group import LearnerGroup
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule, MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.env.env_runner import SampleBatch
from cairn.rl.utils._util import Names
from cairn.rl.utils.replay_buffers import ColumnSpecs, MultiAgentReplayBuffer, PrioritizedMultiAgentReplayBuffer
from cairn.state_checks import Schema, counts_by_id

__all__ = [
    "NStep",
    "OffPolicyAlgorithm",
    "OffPolicyConfig",
    "TargetNetworkLearner",
    "n_step_rule",
    "n_step_transitions",
    "replay_columns",
]

NStep = int | tuple[int, int]
"""An n-step setting: an int, or RLlib's range ``(low, high)`` from which each transition draws
its n uniformly, ``low <= n < high`` (numpy's ``integers(low, high)``, as RLlib's buffers)."""


def check_n_step(value: Any, *, where: str = "n_step") -> NStep:
    """``value`` as an :data:`NStep` (a list of two ints, as a checkpoint records a tuple, becomes a tuple).

    Raises:
        ValueError: Not an int >= 1 nor a pair ``(low, high)`` of ints with ``1 <= low < high``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and 1 <= value[0] < value[1]
    ):
        return (int(value[0]), int(value[1]))
    raise ValueError(
        f"{where} must be an int >= 1 or a range (low, high) of ints with 1 <= low < high (each transition "
        f"sums n rewards, n drawn from low .. high - 1, as RLlib), got {value!r:.80}."
    )


def n_step_rule(config: Any, value: Any) -> dict[str, Any]:
    """RLlib's ``training(n_step=...)``: an int, or a range ``(low, high)``."""
    return {"n_step": check_n_step(value)}


@register_type
@dataclass
class OffPolicyConfig(AlgorithmConfig):
    """Settings of a replay-based algorithm; the defaults are those of CleanRL's ``dqn.py``.

    The learner's ``minibatch_size`` is the rows of one gradient step (CleanRL's
    ``batch_size``); ``num_epochs`` is 1 (each gradient step draws its own rows).
    """

    sample_next_obs: ClassVar[bool] = True

    RLLIB_RULES: ClassVar[dict[str, dict[str, Rule]]] = {
        "training": {
            "train_batch_size_per_learner": integer("minibatch_size", name="train_batch_size_per_learner"),
            "train_batch_size": integer("minibatch_size", name="train_batch_size"),
            "gamma": number("gamma"),
            "n_step": n_step_rule,
            "tau": number("tau"),
            "replay_buffer_config": replay_buffer_config,
            "store_buffer_in_checkpoints": Accept(
                (True, False), "cairn's checkpoints always hold the replay buffer (saved incrementally)"
            ),
            "training_intensity": Accept((None,), "cairn: training(train_frequency=<env steps per gradient step>)"),
        }
    }
    """RLlib's off-policy ``training()`` settings: the train batch is the rows of one gradient step."""

    def _train_batch_rows(self) -> int:
        """RLlib's off-policy ``train_batch_size``: the rows of one gradient step."""
        return int(self.minibatch_size)

    num_envs_per_env_runner: int = 1
    """Vectorized environments per env runner (CleanRL: 1)."""

    rollout_length: int = 100
    """Env steps each sub-environment takes per training iteration."""

    observation_filter: str | None = None
    """No observation filter (CleanRL feeds raw observations)."""

    lr_anneal_timesteps: int | None = None
    """A constant learning rate."""

    num_epochs: int = 1
    """Each gradient step draws fresh rows from the buffer: one pass."""

    max_grad_norm: float | None = None
    """No gradient clipping (CleanRL)."""

    gamma: float = 0.99
    """Discount factor."""

    n_step: NStep = 1
    """Rewards summed per transition. A transition whose episode ends, or whose rollout
    ends, sooner sums fewer and bootstraps from there (its ``discounts`` say how far).
    A range ``(low, high)`` (RLlib's): each transition draws its own n, ``low <= n < high``,
    from its module buffer's seeded RNG when it is added (checkpointed with the buffer,
    so a resumed run draws the same n's); RLlib draws it when the row is sampled."""

    replay_buffer_capacity: int = 10_000
    """Transitions each module's buffer holds (CleanRL's ``buffer_size``)."""

    replay_buffer_chunk_rows: int | None = None
    """Rows per checkpoint chunk of the buffer (``None``: about 16 MB per chunk)."""

    replay_buffer_class: type[MultiAgentReplayBuffer] = MultiAgentReplayBuffer
    """The algorithm's ``replay_buffer`` component: :class:`MultiAgentReplayBuffer` or a
    subclass, built with ``(capacity, columns, chunk_rows=, seed=)``; its
    ``buffer_class`` is the buffer of each module. Recorded in checkpoints by
    reference: loading one needs the class's module imported first."""

    prioritized_replay_alpha: float = 0.6
    """With a prioritized buffer (``replay_buffer_class=PrioritizedMultiAgentReplayBuffer``):
    how much priorities count, 0 uniform, 1 fully proportional (Schaul et al.; RLlib's ``alpha``)."""

    prioritized_replay_beta: float = 0.4
    """With a prioritized buffer: the importance-weight exponent, 0 no correction, 1 full (RLlib's ``beta``)."""

    prioritized_replay_eps: float = 1e-6
    """With a prioritized buffer: a row's priority is ``|TD error| + eps`` (RLlib's old ``prioritized_replay_eps``)."""

    num_steps_sampled_before_learning_starts: int = 10_000
    """Env steps sampled before the first gradient step (CleanRL's ``learning_starts``)."""

    train_frequency: int = 10
    """Env steps sampled per gradient step (CleanRL's ``train_frequency``)."""

    tau: float = 1.0
    """Target update: ``target = tau * online + (1 - tau) * target`` (1.0: a hard copy)."""

    target_network_update_freq: int = 500
    """Env steps between target updates (CleanRL's ``target_network_frequency``), counted
    in gradient steps of ``train_frequency`` env steps each."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.n_step = check_n_step(self.n_step)  # a checkpoint's list [2, 5] is the range (2, 5)

    @property
    def prioritized(self) -> bool:
        """Whether the replay buffer is prioritized (:class:`PrioritizedMultiAgentReplayBuffer` or a subclass)."""
        return isinstance(self.replay_buffer_class, type) and issubclass(
            self.replay_buffer_class, PrioritizedMultiAgentReplayBuffer
        )

    def validate(self) -> None:
        """Check ranges; see :meth:`AlgorithmConfig.validate`."""
        super().validate()
        if self.batch_mode != "truncate_episodes":  # whole-episode batches are PPO's sampler's (rl/env/batch_modes)
            raise ValueError(
                f"batch_mode={self.batch_mode!r:.40}: {type(self).__name__} samples transitions into its replay "
                "buffer; batch_mode='complete_episodes' is for PPO. Leave batch_mode='truncate_episodes'."
            )
        self.n_step = check_n_step(self.n_step)
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {self.gamma}.")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must lie in (0, 1], got {self.tau}.")
        if not (
            isinstance(self.replay_buffer_class, type) and issubclass(self.replay_buffer_class, MultiAgentReplayBuffer)
        ):
            raise ValueError(
                "replay_buffer_class must be cairn.rl.utils.replay_buffers.MultiAgentReplayBuffer or a subclass "
                f"(its buffer_class is the buffer of each module), got {self.replay_buffer_class!r:.80}."
            )
        for name, low in (
            ("prioritized_replay_alpha", 0.0),
            ("prioritized_replay_beta", 0.0),
            ("prioritized_replay_eps", 0.0),
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not value >= low
                or value == float("inf")
            ):
                raise ValueError(f"{name} must be a finite number >= {low}, got {value!r:.80}.")
        for name in ("replay_buffer_capacity", "train_frequency", "target_network_update_freq"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.num_steps_sampled_before_learning_starts < 0:
            raise ValueError("num_steps_sampled_before_learning_starts must be >= 0.")

    @property
    def target_update_every(self) -> int:
        """Gradient steps between target updates."""
        return max(1, int(self.target_network_update_freq) // int(self.train_frequency))


def replay_columns(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> ColumnSpecs:
    """The buffer columns of one module: ``obs``, ``actions``, ``rewards``, ``next_obs``,
    ``terminateds``, ``discounts`` (see :func:`n_step_transitions`)."""
    obs_shape = tuple(observation_space.shape or ())
    if isinstance(action_space, gym.spaces.Discrete):
        action: tuple[Sequence[int], Any] = ((), "int64")
    else:
        action = (tuple(action_space.shape or ()), "float32")
    return {
        "obs": (obs_shape, "float32"),
        "actions": action,
        "rewards": ((), "float32"),
        "next_obs": (obs_shape, "float32"),
        "terminateds": ((), "bool"),
        "discounts": ((), "float32"),
    }


def n_step_transitions(
    batch: Mapping[str, npt.NDArray[Any]], *, gamma: float, n_step: int | npt.NDArray[np.integer[Any]]
) -> dict[str, Any]:
    """Flat n-step transitions ``[T * N, ...]`` (time-major) from a rollout ``[T, N, ...]``.

    For the step ``t`` of sub-environment ``i``, the sum runs over ``k`` steps,
    ``k = n_step`` or fewer where the episode ends (terminated or truncated) or
    the rollout ends first: ``rewards = sum_{j<k} gamma^j r[t+j]``,
    ``next_obs = next_obs[t+k-1]``, ``terminateds = terminated[t+k-1]``,
    ``discounts = gamma^k``. The target of a transition is then
    ``rewards + discounts * (1 - terminateds) * V(next_obs)``.

    Args:
        batch: An env runner's batch with ``next_obs`` (``sample_next_obs``).
        gamma: Discount factor.
        n_step: The most steps a transition sums: one for all, or an array ``[T, N]``
            of ints >= 1, each transition's own (an n-step range draws them).
    """
    rewards = np.asarray(batch["rewards"], dtype=np.float64)
    terminateds = np.asarray(batch["terminateds"], dtype=np.bool_)
    ended = terminateds | np.asarray(batch["truncateds"], dtype=np.bool_)
    horizon, n = rewards.shape
    per_row = np.broadcast_to(np.asarray(n_step, dtype=np.int64), (horizon, n))
    total = rewards.copy()
    last = np.broadcast_to(np.arange(horizon)[:, None], (horizon, n)).copy()  # index of the last summed step
    open_ = ~ended  # whether the sum of (t, i) goes on past its last step
    # A sum never reaches past the rollout: n beyond its length changes nothing (and costs nothing).
    for k in range(1, min(int(per_row.max(initial=1)), horizon)):
        nxt = last + 1
        go = open_ & (nxt < horizon) & (k < per_row)
        idx = np.minimum(nxt, horizon - 1)
        cols = np.arange(n)[None, :].repeat(horizon, 0)
        total = np.where(go, total + gamma**k * rewards[idx, cols], total)
        last = np.where(go, nxt, last)
        open_ = go & ~ended[idx, cols]
    cols = np.arange(n)[None, :].repeat(horizon, 0)
    steps = last - np.arange(horizon)[:, None] + 1
    next_obs = np.asarray(batch["next_obs"])[last, cols]

    def flat(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return array.reshape((horizon * n, *array.shape[2:]))

    return {
        "obs": flat(np.asarray(batch["obs"])),
        "actions": flat(np.asarray(batch["actions"])),
        "rewards": flat(total.astype(np.float32)),
        "next_obs": flat(next_obs),
        "terminateds": flat(terminateds[last, cols]),
        "discounts": flat((float(gamma) ** steps).astype(np.float32)),
    }


class TargetNetworkLearner(Learner):
    """A Learner with a target copy of every module, updated as the config says.

    Components: ``rl_module`` and ``target_rl_module`` (a :class:`MultiRLModule`
    of the same modules, same classes). Every ``target_update_every`` gradient
    steps of a module, its target moves to ``tau * online + (1 - tau) * target``.
    The per-module gradient-step counters are in the state, so a restored
    learner updates its targets at exactly the same steps.

    A subclass implements :meth:`compute_loss_for_module` and reads the targets
    as ``self.target_module[module_id]``.

    Args:
        config: An :class:`OffPolicyConfig`.
        module_specs: Module id -> spec of each module to train.
    """

    state_schema = Learner.state_schema | Schema({"counters": Schema({"num_gradient_steps": counts_by_id})})

    def __init__(self, config: AlgorithmConfig, module_specs: Mapping[str, RLModuleSpec]) -> None:
        super().__init__(config, module_specs)
        self.target_module = MultiRLModule(self.module.specs)
        self.target_module.set_state(self.module.get_state())
        self.target_module.eval()
        self.target_module.requires_grad_(False)
        self.num_gradient_steps: dict[str, int] = {module_id: 0 for module_id in self.module}

    def _off_policy_config(self, module_id: str) -> OffPolicyConfig:
        config = self.config_for_module(module_id)
        if not isinstance(config, OffPolicyConfig):
            raise TypeError(f"{type(self).__name__} needs an OffPolicyConfig, got {type(config).__name__}.")
        return config

    def _minibatch_step(
        self,
        module_id: str,
        module: RLModule,
        optimizers: Mapping[str, torch.optim.Optimizer],
        mb: Mapping[str, torch.Tensor],
    ) -> dict[str, float]:
        stats = super()._minibatch_step(module_id, module, optimizers, mb)
        self.num_gradient_steps[module_id] = self.num_gradient_steps.get(module_id, 0) + 1
        config = self._off_policy_config(module_id)
        if self.num_gradient_steps[module_id] % config.target_update_every == 0:
            self.update_target(module_id, tau=float(config.tau))
        return stats

    def update_target(self, module_id: str, *, tau: float) -> None:
        """``target = tau * online + (1 - tau) * target`` for module ``module_id`` (tau=1: a copy)."""
        online = self.module[module_id].state_dict()
        with torch.no_grad():
            for name, target in self.target_module[module_id].state_dict().items():
                source = online[name]
                if tau >= 1.0 or not target.is_floating_point():
                    target.copy_(source)
                else:
                    target.mul_(1.0 - tau).add_(source, alpha=tau)

    def add_module(
        self,
        module_id: str,
        module: RLModule | RLModuleSpec | None = None,
        *,
        module_spec: RLModuleSpec | None = None,
        config_overrides: Mapping[str, Any] | None = None,
    ) -> RLModule:
        """Add a module (see :meth:`Learner.add_module`) and its target, a copy of it."""
        built = super().add_module(module_id, module, module_spec=module_spec, config_overrides=config_overrides)
        target = built.spec.build()
        target.set_state(built.get_state())
        target.eval()
        target.requires_grad_(False)
        self.target_module.add_module(module_id, target)
        self.num_gradient_steps[module_id] = 0
        return built

    def remove_module(self, module_id: str) -> RLModule:
        """Remove a module (see :meth:`Learner.remove_module`) and its target."""
        module = super().remove_module(module_id)
        self.target_module.remove_module(module_id)
        self.num_gradient_steps.pop(module_id, None)
        return module

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``rl_module`` and ``target_rl_module``."""
        return [*super().get_checkpointable_components(), ("target_rl_module", self.target_module)]

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """The learner's state plus the gradient-step counters that time the target updates."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        state["counters"]["num_gradient_steps"] = dict(self.num_gradient_steps)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply ``state``; see :meth:`Learner.set_state`."""
        super().set_state(state)
        for module_id, steps in state.get("counters", {}).get("num_gradient_steps", {}).items():
            if module_id in self.num_gradient_steps:
                self.num_gradient_steps[module_id] = int(steps)


def _spaces(spec: RLModuleSpec) -> tuple[gym.Space[Any], gym.Space[Any]]:
    # The env runners complete every spec (spaces from the env) before the algorithm builds anything.
    if spec.observation_space is None or spec.action_space is None:
        raise ValueError(f"The module spec {spec!r:.200} has no spaces; an algorithm's specs are completed first.")
    return spec.observation_space, spec.action_space


def _check_prioritized(config: OffPolicyConfig) -> None:
    """Refuse a prioritized buffer where the TD errors cannot come back to it."""
    learner_class = config.get_default_learner_class()
    if not callable(getattr(learner_class, "pop_td_errors", None)):
        raise ValueError(
            f"A prioritized replay buffer needs the learner's TD errors to set priorities, and "
            f"{learner_class.__name__} does not report them (DQN's learner does; SAC's does not yet). Use "
            "replay_buffer_class=MultiAgentReplayBuffer (uniform sampling)."
        )
    if int(config.num_learners) > 1:
        raise ValueError(
            f"Prioritized replay takes the TD errors from the one local learner; num_learners={config.num_learners} "
            "runs data-parallel learners on Ray, whose TD errors do not come back yet. Use num_learners=0 or 1, "
            "or a uniform buffer (replay_buffer_class=MultiAgentReplayBuffer)."
        )


def _merge_step_metrics(steps: list[dict[str, float]]) -> dict[str, float]:
    """One update's metrics from several: means, but lifetime counters last and rows trained summed."""
    out: dict[str, float] = {}
    for key in {k: None for step in steps for k in step}:
        values = [step[key] for step in steps if key in step]
        if key.endswith("_lifetime"):
            out[key] = values[-1]
        elif key.endswith("/num_module_steps_trained"):
            out[key] = float(sum(values))
        else:
            out[key] = float(sum(values) / len(values))
    return out


class OffPolicyAlgorithm(Algorithm):
    """An algorithm that learns from a replay buffer (DQN, SAC).

    Each :meth:`train` iteration: every env runner samples ``rollout_length``
    steps per sub-environment (with ``next_obs``); the rollouts become n-step
    transitions in each module's buffer; once
    ``num_steps_sampled_before_learning_starts`` env steps were sampled, the
    learners take one gradient step per ``train_frequency`` env steps sampled,
    each on ``minibatch_size`` rows drawn from the buffer; the new weights go to
    the env runners.

    Components: ``env_runner``, ``learner_group`` and ``replay_buffer`` (a
    :class:`~cairn.rl.utils.replay_buffers.MultiAgentReplayBuffer`, one buffer
    per module id, saved incrementally by a :class:`cairn.CheckpointManager`).
    Restore just the buffer with ``algo.restore_from_path(ckpt + "/replay_buffer",
    component="replay_buffer")``.

    Environments: gymnasium ids and ``"multi:<id>"`` (independent agents);
    turn-based :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv` classes are
    not supported yet (their runner samples no ``next_obs``).

    Args:
        config: An :class:`OffPolicyConfig` subclass (:attr:`config_class`).
    """

    config_class: ClassVar[type[AlgorithmConfig]] = OffPolicyConfig
    config: OffPolicyConfig
    replay_buffer: MultiAgentReplayBuffer

    def build_learner_group(self, config: Any, module_specs: Mapping[str, RLModuleSpec]) -> LearnerGroup:
        """The learner group, and the replay buffer of the same modules (built here, from the same specs)."""
        runner = self.env_runner_group.local_env_runner
        if not runner.samples_next_obs:
            raise ValueError(
                f"{type(self).__name__} samples transitions with their next observation, which "
                f"{type(runner).__name__} (env={config.env!r}) does not provide yet; use a gymnasium id or "
                "'multi:<id>' (independent agents)."
            )
        extra: dict[str, Any] = {}
        if config.prioritized:
            _check_prioritized(config)
            extra = {
                "alpha": float(config.prioritized_replay_alpha),
                "beta": float(config.prioritized_replay_beta),
                "epsilon": float(config.prioritized_replay_eps),
            }
        self.replay_buffer = config.replay_buffer_class(
            int(config.replay_buffer_capacity),
            {m: replay_columns(*_spaces(spec)) for m, spec in module_specs.items()},
            chunk_rows=config.replay_buffer_chunk_rows,
            seed=int(config.seed),
            **extra,
        )
        return LearnerGroup(config, module_specs)

    def num_gradient_steps_for(self, steps_before: int, steps_after: int) -> int:
        """Gradient steps owed for the env steps sampled from ``steps_before`` to ``steps_after``."""
        start = int(self.config.num_steps_sampled_before_learning_starts)
        if steps_after < max(start, 1):
            return 0
        freq = int(self.config.train_frequency)
        return steps_after // freq - max(steps_before, start) // freq

    def _n_steps(self, module_id: str, batch: SampleBatch) -> int | npt.NDArray[np.int64]:
        """The n-step of a rollout's transitions: the config's int, or one per transition drawn from its range.

        The draws come from the module's buffer RNG (seeded, checkpointed with the buffer).
        """
        n_step = self.config.n_step
        if isinstance(n_step, int):
            return n_step
        buffer = self.replay_buffer.buffers.get(module_id)
        if buffer is None:
            raise ValueError(f"No replay buffer for module {module_id!r}; add_module it first.")
        shape = np.shape(batch["rewards"])
        return buffer.rng.integers(n_step[0], n_step[1], size=shape, dtype=np.int64)

    def add_to_buffer(self, per_runner: list[dict[str, SampleBatch]]) -> None:
        """Turn each runner's rollouts into n-step transitions and add them, runner by runner."""
        for runner_batches in per_runner:
            transitions = {
                module_id: n_step_transitions(
                    batch,
                    gamma=float(self.config.get_config_for_module(module_id).gamma),  # type: ignore[attr-defined]
                    n_step=self._n_steps(module_id, batch),
                )
                for module_id, batch in runner_batches.items()
            }
            self.replay_buffer.add(transitions)

    def training_step(self) -> dict[str, Any]:
        """Sample, store, learn (when due), sync weights; returns the iteration's metrics."""
        steps_before = self.env_runner.num_env_steps_sampled_lifetime
        self.add_to_buffer(self.env_runner_group.sample_batches())
        steps_after = self.env_runner.num_env_steps_sampled_lifetime
        num_steps = self.num_gradient_steps_for(steps_before, steps_after)
        results: dict[str, Any] = {}
        if num_steps > 0 and isinstance(self.replay_buffer, PrioritizedMultiAgentReplayBuffer):
            results.update(self._learn_prioritized(num_steps))
        elif num_steps > 0:
            results.update(self.learner_group.update(self._sample_batches(num_steps)))
        self._sync_env_runners()
        results["num_gradient_steps"] = num_steps
        for module_id in self.replay_buffer:
            results[f"replay_buffer/{module_id}/size"] = len(self.replay_buffer[module_id])
        results.update(self._env_runner_results())
        return results

    def _sample_batches(self, num_steps: int) -> dict[str, dict[str, Any]]:
        """``num_steps`` minibatches of rows of each trained module with rows, in one batch per module."""
        trainable = self.config.policies_to_train
        return {
            module_id: self.replay_buffer[module_id].sample(
                num_steps * int(self.config.get_config_for_module(module_id).minibatch_size)
            )
            for module_id in self.replay_buffer
            if len(self.replay_buffer[module_id]) and (trainable is None or module_id in trainable)
        }

    def _learn_prioritized(self, num_steps: int) -> dict[str, float]:
        """RLlib's loop: per gradient step, sample a minibatch by priority, update, set the rows' priorities.

        The TD errors come from the local learner (:meth:`DQNLearner.pop_td_errors
        <cairn.rl.algorithms.dqn.dqn_learner.DQNLearner.pop_td_errors>`); the metrics are
        the steps' means (lifetime counters: the last step's; rows trained: their sum).
        """
        buffer = self.replay_buffer
        assert isinstance(buffer, PrioritizedMultiAgentReplayBuffer)  # the caller checked
        learner: Any = self.learner_group.learner
        steps: list[dict[str, float]] = []
        for _ in range(num_steps):
            batches = self._sample_batches(1)
            steps.append(self.learner_group.update(batches))
            for module_id in batches:
                rows, td_errors = learner.pop_td_errors(module_id)
                buffer.update_priorities(module_id, rows, td_errors)
        return _merge_step_metrics(steps)

    def add_module(
        self,
        module_id: str,
        module_spec: RLModuleSpec,
        *,
        config_overrides: Mapping[str, Any] | None = None,
        new_agent_to_module_mapping_fn: Any = None,
        new_should_module_be_updated: Sequence[str] | None = None,
    ) -> MultiRLModuleSpec:
        """Add a module (see :meth:`Algorithm.add_module`) and an empty replay buffer for it."""
        specs = super().add_module(
            module_id,
            module_spec,
            config_overrides=config_overrides,
            new_agent_to_module_mapping_fn=new_agent_to_module_mapping_fn,
            new_should_module_be_updated=new_should_module_be_updated,
        )
        # The spec the env runners built the module from: its spaces are filled in (add_module did).
        spec = self.env_runner.module_specs[module_id]
        observation_space = spec.observation_space or self.env_runner.observation_space
        action_space = spec.action_space or self.env_runner.action_space
        self.replay_buffer.add_module(module_id, replay_columns(observation_space, action_space))
        return specs

    def remove_module(
        self,
        module_id: str,
        *,
        new_agent_to_module_mapping_fn: Any = None,
        new_should_module_be_updated: Sequence[str] | None = None,
    ) -> MultiRLModuleSpec:
        """Remove a module (see :meth:`Algorithm.remove_module`) and its replay buffer."""
        specs = super().remove_module(
            module_id,
            new_agent_to_module_mapping_fn=new_agent_to_module_mapping_fn,
            new_should_module_be_updated=new_should_module_be_updated,
        )
        self.replay_buffer.remove_module(module_id)
        return specs

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``env_runner``, ``learner_group`` and ``replay_buffer``."""
        return [*super().get_checkpointable_components(), ("replay_buffer", self.replay_buffer)]
