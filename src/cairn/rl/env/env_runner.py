"""EnvRunner: steps gymnasium vector environments with a copy of the module.

The runner owns everything sampling depends on, and all of it is state:

- the connectors (``env_to_module_connector`` with the ``MeanStdFilter``
  observation filter, ``module_to_env_connector`` clipping Box actions),
- the RNG that samples actions (a private ``torch.Generator``),
- the environments themselves where that is possible (classic control:
  physics state, each env's ``np_random``, the ``TimeLimit`` counters), the
  current observations and the returns of the episodes in flight,
- lifetime counters and the window of recent episode returns.

Restored into a fresh runner, sampling goes on exactly as if it never
stopped. For environments whose state cannot be saved, the state records
``env.saved = False`` and the runner's metadata says
``episodes_restart_on_restore``: the restored runner starts new episodes.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.rl._aliases import register_old_paths
from cairn.rl.callbacks.callbacks import callbacks_from_config, overrides
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.core.rl_module.stateful import batched_state, initial_state, state_columns, state_out, strip_time_dim
from cairn.rl.env.connector_building import (
    build_env_to_module,
    build_module_to_env,
    check_learner_connector,
    nested_module_name,
)
from cairn.rl.env.env_state import (
    env_state_mismatch,
    env_state_problem,
    get_env_state,
    set_env_state,
    supports_env_state,
)
from cairn.rl.env.episodes import EpisodeTracker
from cairn.rl.env.module_outputs import owed_output, owes_logp_and_values
from cairn.rl.env.multi_agent_env import (
    DEFAULT_AGENT_ID,
    agent_ids,
    build_module_specs,
    make_env,
    parse_env,
    resolve_policy_mapping,
)
from cairn.rl.env.pretrained_connectors import restore_pretrained_connectors
from cairn.rl.env.state_checks import (
    PEER_OWN_KEYS,
    PEER_STATES_KEY,
    check_state_tree,
    corrupt,
    count,
    episode_windows,
    layout_problem,
    mapping,
    numeric_leaves,
    rng_state,
    runner_local_states,
    slot_rows,
    spec_spaces_problem,
    tracker_state,
)
from cairn.rl.utils._util import Names
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger
from cairn.rl.utils.metrics.metrics_logger import read_state as read_metrics_state
from cairn.rl.utils.nested import (
    copy_rows,
    from_state,
    index_rows,
    map_leaves,
    same_layout,
    set_rows,
    stack_rows,
    take_rows,
    to_state,
)

__all__ = ["NUM_AGENT_STEPS_SAMPLED", "NUM_ENV_STEPS_SAMPLED", "EnvRunner", "ModuleRemoval", "SampleBatch"]

NUM_ENV_STEPS_SAMPLED = "num_env_steps_sampled"
"""Env steps of a runner's last ``sample()`` in its metrics logger (RLlib's name), logged before
``on_sample_end``; the algorithm reports the iteration's sum as ``env_runners/num_env_steps_sampled``."""

NUM_AGENT_STEPS_SAMPLED = "num_agent_steps_sampled"
"""Agent steps of a runner's last ``sample()`` (every agent's action is one), as :data:`NUM_ENV_STEPS_SAMPLED`."""

SampleBatch = dict[str, npt.NDArray[Any]]
"""One module's rollout: time-major arrays ``[T, N, ...]`` plus ``bootstrap_vf`` ``[N]``.

Keys: ``obs`` (filtered; a dict (tuple) of such arrays, each in its space's dtype, when a
module that takes Dict/Tuple observations reads them unflattened), ``actions``, ``action_logp``, ``vf_preds``,
``rewards``, ``terminateds``, ``truncateds``, ``final_vf`` (value of the final
observation of a truncated episode), ``bootstrap_vf``.

When the config's ``sample_next_obs`` is true (off-policy algorithms), the
batch also holds ``next_obs`` ``[T, N, ...]``: the (filtered) observation that
followed each step, the episode's ``final_obs`` where it ended (terminated or
truncated; the environments reset in the same step). ``action_logp`` and
``vf_preds`` are then zeros unless the module returns them, and ``final_vf`` /
``bootstrap_vf`` are zeros (no value function is asked).
"""


@dataclass(frozen=True)
class ModuleRemoval:
    """A removal of a module that an env runner checked and can apply without refusing.

    :meth:`EnvRunner.prepare_remove_module` makes it, :meth:`EnvRunner.apply_remove_module`
    applies it; a group prepares on every runner before it applies on any.

    Attributes:
        module_id: The module to drop.
        config: The algorithm's config without it.
        remapped: ``(env copy, agent) -> new module`` of the agents of episodes in
            flight that act with ``module_id`` (multi-agent runners).
        mapping_fn: The mapping function the runner takes (multi-agent runners).
    """

    module_id: str
    config: AlgorithmConfig
    remapped: dict[tuple[int, Any], str] = field(default_factory=dict)
    mapping_fn: Any = None


class EnvRunner(Checkpointable):
    """Samples rollouts from ``num_envs_per_env_runner`` vectorized environments.

    Args:
        config: The algorithm's config (``env``, ``env_config``, ``num_agents``,
            ``seed``, ``num_envs_per_env_runner``, ``rollout_length``,
            ``policies``, ``policy_mapping``, ``model_config``,
            ``observation_filter``, ``episode_return_window``).
        worker_index: Index of this runner in its group; seeds differ per index.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    samples_next_obs: ClassVar[bool] = True
    """A capability: whether this runner's batches carry ``next_obs`` when the config's
    ``sample_next_obs`` asks (off-policy algorithms refuse a runner without it)."""

    def __init__(self, config: AlgorithmConfig, *, worker_index: int = 0) -> None:
        self.config = config
        self.worker_index = int(worker_index)
        env_id, _ = parse_env(config.env)
        agents = agent_ids(config.env, config.num_agents)
        self.policy_mapping = resolve_policy_mapping(agents, config.policies, config.policy_mapping)
        num_envs = int(config.num_envs_per_env_runner)
        if num_envs < 1:
            raise ValueError(f"num_envs_per_env_runner must be >= 1, got {num_envs}.")
        # Sub-environment (slot) i is agent i % n of env copy i // n.
        self.slot_agents = [agents[i % len(agents)] for i in range(num_envs * len(agents))]
        self.slot_modules = [self.policy_mapping[agent] for agent in self.slot_agents]
        self.num_envs = num_envs
        self.num_slots = len(self.slot_agents)
        self.env = gym.vector.SyncVectorEnv(
            [functools.partial(make_env, config.env, dict(config.env_config))] * self.num_slots,
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        self.env_id = env_id
        seeds = self._init_sampling(config, self.env.single_observation_space, self.env.single_action_space)
        self.env_state_saved = supports_env_state(self.env.envs[0])
        obs, reset_infos = self.env.reset(seed=int(seeds[0]))
        self._obs: npt.NDArray[Any] = obs
        self._episode_starts = np.ones(self.num_slots, dtype=np.bool_)
        """Which slots' current observation is the first of an episode (told to the connectors)."""
        self.episode_tracker: EpisodeTracker | None = self._new_episode_tracker(reset_infos)
        """The episodes in flight as episode hooks see them; ``None`` when no callback overrides an episode hook."""
        self._episode_returns = np.zeros(self.num_slots, dtype=np.float64)
        self._episode_lengths = np.zeros(self.num_slots, dtype=np.int64)
        self._multi_agent = self.slot_agents[0] != DEFAULT_AGENT_ID
        self._module_slots = {
            module_id: np.array([i for i, m in enumerate(self.slot_modules) if m == module_id])
            for module_id in config.policies
            if module_id in self.slot_modules
        }
        self._initial_states = {
            module_id: state
            for module_id in self._module_slots
            if (state := initial_state(self.module[module_id], module_id))
        }
        """Module id -> ``get_initial_state()`` (tensors) of each stateful module that acts here."""
        self._module_states = {
            module_id: batched_state(state, len(self._module_slots[module_id]))
            for module_id, state in self._initial_states.items()
        }
        """Module id -> the state to feed with each of its slots' current observation (``[slots, ...]``
        per name): the memory of the episodes in flight, checkpointed with them."""
        self._passes_prev = any(
            getattr(piece, "NEEDS_PREV_ACTIONS_REWARDS", False) for piece in self.env_to_module.connectors
        )
        """Whether a connector piece reads each slot's previous action and reward (PrevActionsPrevRewards)."""
        act_shape = (self.num_slots, *(self.env.single_action_space.shape or ()))
        act_dtype = np.int64 if isinstance(self.env.single_action_space, gym.spaces.Discrete) else np.float32
        self._prev_actions: npt.NDArray[Any] = np.zeros(act_shape, dtype=act_dtype)
        self._prev_rewards = np.zeros(self.num_slots, dtype=np.float32)
        """Each slot's last action (as the module chose it) and reward, for those pieces; checkpointed."""

    def _init_sampling(
        self,
        config: AlgorithmConfig,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        module_spaces: Mapping[str, tuple[gym.Space[Any], gym.Space[Any]]] | None = None,
    ) -> npt.NDArray[Any]:
        """Build what every runner samples with: modules, connectors, the action RNG, counters, windows.

        Shared by the multi-agent runner, whose modules may each have their own
        spaces (``module_spaces``). Returns the runner's two seeds (the
        first seeds the environments, the second the action-sampling RNG).
        """
        self.module_specs: dict[str, RLModuleSpec] = self._build_connectors(
            config, observation_space, action_space, module_spaces=module_spaces
        )
        self.module = MultiRLModule(self.module_specs)
        self.module.eval()

        seeds = np.random.SeedSequence([config.seed, 104729, self.worker_index]).generate_state(2)
        self._generator = torch.Generator().manual_seed(int(seeds[1]))
        window = int(config.episode_return_window)
        self._recent_returns: deque[float] = deque(maxlen=window)
        self._recent_lengths: deque[int] = deque(maxlen=window)
        self._recent_module_returns: dict[str, deque[float]] = {
            module_id: deque(maxlen=window) for module_id in config.policies
        }
        self.num_env_steps_sampled_lifetime = 0
        self.num_agent_steps_sampled_lifetime = 0
        self.num_episodes_lifetime = 0
        self._episodes_this_iteration = 0
        self.last_episodes: list[tuple[float, int, str]] = []
        """(return, length, module id) of the episodes that ended in the last :meth:`sample`."""
        self.episodes_restarted = False
        self.metrics = MetricsLogger()
        """What this runner's callbacks log; checkpointed, and handed to the algorithm's logger each iteration."""
        self.callbacks = callbacks_from_config(config)
        # on_episode_start of the first episodes fires in the first sample() (as in RLlib), not here: a
        # runner that never samples (the driver's, with remote runners) or whose episodes in flight a
        # checkpoint restores must not report starts that are not new.
        self._episodes_started = False
        self._step_hook = overrides(self.callbacks, "on_episode_step")  # a call per step and env costs
        # Episode objects (RLlib's Episode API) cost per-step work: kept only when an episode hook is overridden.
        self._episode_hooks = any(
            overrides(self.callbacks, hook) for hook in ("on_episode_start", "on_episode_step", "on_episode_end")
        )
        return seeds

    def _build_connectors(
        self,
        config: AlgorithmConfig,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        module_spaces: Mapping[str, tuple[gym.Space[Any], gym.Space[Any]]] | None = None,
    ) -> dict[str, RLModuleSpec]:
        """Build the connector pipelines and return the modules' specs (for the pipelines' output space).

        One pipeline pair for all slots: the user's pieces, then the observation filter /
        action clipping; the modules are built for what the env-to-module pipeline outputs
        (stacked, flattened), and the pipeline starts from the observation filter state of
        the modules' ``load_state_path`` checkpoints. The multi-agent runner overrides this
        with one pipeline pair per module.
        """
        self.env_observation_space = observation_space
        env = getattr(self, "env", None)
        self.env_to_module, self.observation_space = build_env_to_module(
            config,
            observation_space,
            action_space,
            env=env,
            multi_agent=not isinstance(env, gym.vector.VectorEnv),
            nested_module=nested_module_name(config, observation_space, action_space, self.slot_modules),
        )
        self.action_space = action_space
        self.module_to_env = build_module_to_env(config, observation_space, action_space, env=env)
        check_learner_connector(config, self.env_to_module, self.observation_space, action_space)
        specs = build_module_specs(config, self.observation_space, self.action_space, module_spaces=module_spaces)
        # A spec's own spaces win (a recorded config may give them): refuse now what the first forward pass would.
        for module_id in dict.fromkeys(self.slot_modules):
            problem = spec_spaces_problem(specs.get(module_id), self.observation_space, self.action_space)
            if problem is not None:
                raise ValueError(f"Module {module_id!r} of env={config.env!r}: {problem}")
        restore_pretrained_connectors(self.env_to_module, config)  # load_state_path's observation filter
        return specs

    # ------------------------------------------------------------------ sampling

    def _act(self, obs: Any) -> tuple[npt.NDArray[Any], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        if isinstance(self.action_space, gym.spaces.Discrete):
            actions: npt.NDArray[Any] = np.zeros(self.num_slots, dtype=np.int64)
        else:
            actions = np.zeros((self.num_slots, *(self.action_space.shape or ())), dtype=np.float32)
        logp = np.zeros(self.num_slots, dtype=np.float32)
        values = np.zeros(self.num_slots, dtype=np.float32)
        # Off-policy modules (DQN's Q-network) and modules that are not trained (heuristics) may return
        # actions only: no log-probabilities, no values. explore=False (evaluation runners): greedy
        # actions of forward_inference, which gives actions only.
        explore = bool(getattr(self.config, "explore", True))
        for module_id, slots in self._module_slots.items():
            batch = self._module_batch(module_id, index_rows(obs, slots))
            if explore:
                out = self.module[module_id].forward_exploration(batch, generator=self._generator)
            else:
                out = self.module[module_id].forward_inference(batch)
            if module_id in self._module_states:
                out = self._one_step_outputs(module_id, out, len(slots), explore=explore)
            actions[slots] = out["actions"].numpy()
            owed = owes_logp_and_values(self.config, module_id)
            if owed or "action_logp" in out:
                logp[slots] = owed_output(out, "action_logp", module_id).numpy()
            if owed or "vf_preds" in out:
                values[slots] = owed_output(out, "vf_preds", module_id).numpy()
        return actions, logp, values

    def _values(self, obs: Any, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        values = np.zeros(len(slots), dtype=np.float32)
        for module_id, module_slots in self._module_slots.items():
            pick = np.isin(slots, module_slots)
            if pick.any() and owes_logp_and_values(self.config, module_id):
                rows = np.searchsorted(module_slots, slots[pick])  # the slots' rows in the module's state
                batch = self._module_batch(module_id, index_rows(obs, pick), rows)
                with torch.no_grad():  # an RLlib-style compute_values keeps gradients for the learner
                    module_values = self.module[module_id].compute_values(batch)
                if module_id in self._module_states:
                    where = f"compute_values of module {module_id!r}"
                    module_values = strip_time_dim(module_values, int(pick.sum()), (), key="values", where=where)
                values[pick] = module_values.numpy()
        return values

    # ------------------------------------------------------------------ state of stateful modules

    def _module_batch(self, module_id: str, obs: Any, rows: Any = None) -> dict[str, Any]:
        """The forward batch of ``module_id``: ``{"obs"}``; for a stateful module, observations of one
        time step (``[B, 1, ...]``) and ``Columns.STATE_IN`` of its slots (``rows`` of them; all: None)."""
        states = self._module_states.get(module_id)
        if states is None:
            return {"obs": obs}
        picked = states if rows is None else {name: value[rows] for name, value in states.items()}
        return {"obs": map_leaves(lambda leaf: leaf.unsqueeze(1), obs), Columns.STATE_IN: picked}

    def _one_step_outputs(
        self, module_id: str, out: Mapping[str, Any], rows: int, *, explore: bool
    ) -> dict[str, torch.Tensor]:
        """A stateful module's outputs of one step without their time step; its ``STATE_OUT`` kept as the
        state to feed with the slots' next observations."""
        where = f"{'forward_exploration' if explore else 'forward_inference'} of module {module_id!r}"
        self._module_states[module_id] = state_out(out, self._initial_states[module_id], rows, where=where)
        shapes = {"actions": tuple(self.action_space.shape or ()), "action_logp": (), "vf_preds": ()}
        return {
            key: strip_time_dim(value, rows, shapes[key], key=key, where=where) if key in shapes else value
            for key, value in out.items()
        }

    def _reset_states(self, starts: npt.NDArray[np.bool_]) -> None:
        """Give the slots whose current observation begins an episode their module's initial state."""
        for module_id, states in self._module_states.items():
            rows = np.flatnonzero(starts[self._module_slots[module_id]])
            if rows.size:
                for name, value in states.items():
                    value[torch.from_numpy(rows)] = self._initial_states[module_id][name]

    def _record_states(self, buffers: dict[str, dict[str, npt.NDArray[Any]]], t: int) -> None:
        """Write the state fed at step ``t`` into the sample's buffers (``[T, slots, ...]`` per name)."""
        horizon = int(self.config.rollout_length)
        for module_id, states in self._module_states.items():
            module_buffers = buffers.setdefault(module_id, {})
            for name, value in states.items():
                if name not in module_buffers:
                    module_buffers[name] = np.zeros((horizon, *value.shape), dtype=value.numpy().dtype)
                module_buffers[name][t] = value.numpy()

    def sample(self) -> dict[str, SampleBatch]:
        """Run ``rollout_length`` steps in every sub-environment.

        Returns:
            Module id -> that module's :data:`SampleBatch`.
        """
        horizon = int(self.config.rollout_length)
        n = self.num_slots
        off_policy = bool(self.config.sample_next_obs)
        buf = self._sample_buffers(horizon, off_policy=off_policy)
        state_bufs: dict[str, dict[str, npt.NDArray[Any]]] = {}  # the states fed (stateful modules)
        all_slots = np.arange(n)
        self._episodes_this_iteration = 0
        self.last_episodes = []
        if not self._episodes_started:
            self._episodes_started = True
            for slot in range(n):
                self._episode_hook("on_episode_start", slot, done=False)
        for t in range(horizon):
            filtered = self._to_module(self._obs, all_slots, update=True, starts=self._episode_starts)
            self._reset_states(self._episode_starts)
            self._record_states(state_bufs, t)
            self._episode_starts = np.zeros(n, dtype=np.bool_)
            set_rows(buf["obs"], t, filtered)
            actions, logp, values = self._act(as_tensors(filtered))
            if "actions" not in buf:
                buf["actions"] = np.zeros((horizon, *actions.shape), dtype=actions.dtype)
            buf["actions"][t], buf["action_logp"][t], buf["vf_preds"][t] = actions, logp, values
            env_actions = self.module_to_env(
                actions, update=True, column="actions", rl_module=self.module, explore=True, slots=all_slots
            )
            next_obs, rewards, terminateds, truncateds, infos = self.env.step(env_actions)
            self._episode_starts = terminateds | truncateds  # same-step autoreset: next_obs begins a new episode
            if self._passes_prev:  # what the next observations (and final ones) follow
                self._prev_actions, self._prev_rewards = actions.copy(), np.asarray(rewards, dtype=np.float32)
            buf["rewards"][t], buf["terminateds"][t], buf["truncateds"][t] = rewards, terminateds, truncateds
            if off_policy:
                buf["next_obs"][t] = self._followed(next_obs, infos, np.flatnonzero(self._episode_starts))
            cut = np.flatnonzero(truncateds & ~terminateds)
            if cut.size and not off_policy:
                final_obs = stack_rows([infos["final_obs"][i] for i in cut])
                filtered_final = self._to_module(final_obs, cut, update=False)
                buf["final_vf"][t, cut] = self._values(as_tensors(filtered_final), cut)
            self._episode_returns += rewards
            self._episode_lengths += 1
            self._episode_steps(next_obs, actions, rewards, terminateds, truncateds, infos)
            for i in np.flatnonzero(terminateds | truncateds):
                self._end_episode(int(i))
            self._obs = next_obs
            self.num_env_steps_sampled_lifetime += self.num_envs
            self.num_agent_steps_sampled_lifetime += n
        self._reset_states(self._episode_starts)  # the next observations that begin episodes: their values
        if off_policy:
            bootstrap_vf = np.zeros(n, dtype=np.float32)
        else:
            last = as_tensors(self._to_module(self._obs, all_slots, update=False, starts=self._episode_starts))
            bootstrap_vf = self._values(last, np.arange(n))
        batches = self._module_batches(buf, bootstrap_vf, state_bufs)
        self._end_sample(batches, agent_steps=n * horizon)
        return batches

    def _sample_buffers(self, horizon: int, *, off_policy: bool) -> dict[str, npt.NDArray[Any]]:
        """The time-major ``[T, slots, ...]`` buffers of a sample (``actions`` comes with the first step)."""
        n = self.num_slots
        obs = zeros_of(self.observation_space, (horizon, n))
        buf: dict[str, Any] = {
            "obs": obs,
            "action_logp": np.zeros((horizon, n), dtype=np.float32),
            "vf_preds": np.zeros((horizon, n), dtype=np.float32),
            "rewards": np.zeros((horizon, n), dtype=np.float64),
            "terminateds": np.zeros((horizon, n), dtype=np.bool_),
            "truncateds": np.zeros((horizon, n), dtype=np.bool_),
            "final_vf": np.zeros((horizon, n), dtype=np.float32),
        }
        if off_policy:
            buf["next_obs"] = np.zeros_like(obs)
        return buf

    _BATCH_KEYS = ("obs", "actions", "action_logp", "vf_preds", "rewards", "terminateds", "truncateds", "final_vf")

    def _module_batches(
        self,
        buf: Mapping[str, npt.NDArray[Any]],
        bootstrap_vf: npt.NDArray[np.float32],
        state_bufs: Mapping[str, Mapping[str, npt.NDArray[Any]]],
    ) -> dict[str, SampleBatch]:
        """Each module's columns of its slots (a stateful module's: also the states fed, ``state_in/<name>``)."""
        batches: dict[str, SampleBatch] = {}
        for module_id, slots in self._module_slots.items():
            batch = {key: index_rows(buf[key], (slice(None), slots)) for key in self._BATCH_KEYS}
            batch["bootstrap_vf"] = bootstrap_vf[slots]
            if "next_obs" in buf:
                batch["next_obs"] = buf["next_obs"][:, slots]
            batch.update(state_columns(state_bufs.get(module_id, {})))
            batches[module_id] = batch
        return batches

    def _followed(self, next_obs: Any, infos: Mapping[str, Any], done: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The module's view of the observation that followed each step (``next_obs`` of off-policy batches).

        Same-step autoreset: for the slots ``done``, ``next_obs`` is the new episode's first; the
        transition's is ``final_obs``. It continues the stack the module just saw (never an episode start).
        """
        followed = next_obs
        if done.size:
            followed = copy_rows(next_obs)
            set_rows(followed, done, stack_rows([infos["final_obs"][i] for i in done]))
        # An array: off-policy algorithms refuse Dict/Tuple observations reaching the module (build.py).
        view: npt.NDArray[Any] = self._to_module(followed, np.arange(self.num_slots), update=False)
        return view

    def _to_module(
        self, obs: Any, slots: npt.NDArray[Any], *, update: bool, starts: npt.NDArray[np.bool_] | None = None
    ) -> Any:
        """Run raw observations of the env slots ``slots`` through the env-to-module pipeline.

        Returns an array ``[len(slots), ...]``, or for a module that takes Dict/Tuple observations
        a dict (tuple) of such arrays.

        ``update=False`` looks without changing any connector's state (a final observation's
        value, ``next_obs``); ``starts`` marks the rows whose observation begins an episode.
        """
        # The previous actions and rewards only for a pipeline that reads them: other pieces get what they always got.
        prev = (
            {"prev_actions": self._prev_actions[slots], "prev_rewards": self._prev_rewards[slots]}
            if self._passes_prev
            else {}
        )
        out: Any = self.env_to_module(
            obs,
            update=update,
            column="obs",
            rl_module=self.module,
            explore=True,
            slots=slots,
            episode_starts=starts,
            **prev,
        )
        if isinstance(self.observation_space, gym.spaces.Dict | gym.spaces.Tuple):
            self._check_nested(out, len(slots))
        elif np.shape(out)[1:] != self.observation_space.shape:
            raise ValueError(
                f"The env-to-module pipeline {[c.name for c in self.env_to_module.connectors]} gave observations of "
                f"shape {np.shape(out)[1:]}, but its pieces' recompute_output_observation_space said "
                f"{self.observation_space.shape}; make the piece's space match what its __call__ returns."
            )
        return out

    def _check_nested(self, out: Any, rows: int) -> None:
        """Refuse a pipeline output that is not ``rows`` rows of the Dict/Tuple space the module was built for.

        Raises:
            ValueError: Another structure, keys, row count or shape; the message names the pipeline.
        """
        if rows == 0:
            return
        pieces = [c.name for c in self.env_to_module.connectors]
        counts: set[int] = set()
        map_leaves(lambda leaf: counts.add(int(np.shape(leaf)[0]) if np.ndim(leaf) else -1), out)
        problem = (
            f"has leaves of {sorted(counts)} rows for {rows} env slots"
            if counts != {rows}
            else layout_problem(self.observation_space, take_rows(out, 0))
        )
        if problem is not None:
            raise ValueError(
                f"The env-to-module pipeline {pieces} gave observations that do not fit the space the module was "
                f"built for ({self.observation_space}): one row {problem}. Make the pieces' "
                "recompute_output_observation_space match what their __call__ returns."
            )

    def _end_sample(self, batches: dict[str, SampleBatch], *, agent_steps: int) -> None:
        """Log the sample's counters, then call ``on_sample_end`` (RLlib's order: the callback may
        ``metrics_logger.peek("num_env_steps_sampled")``: the steps since the runner's metrics were last
        handed to the algorithm, as in RLlib). Reported each iteration under ``env_runners/`` (summed
        over the runners)."""
        env_steps = self.num_envs * int(self.config.rollout_length)
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
        self.metrics.log_value(NUM_AGENT_STEPS_SAMPLED, agent_steps, reduce="sum")
        self.callbacks.on_sample_end(env_runner=self, metrics_logger=self.metrics, samples=batches)

    def _end_episode(self, slot: int) -> None:
        self._episode_hook("on_episode_end", slot, done=True)
        self._record_episode(
            float(self._episode_returns[slot]), int(self._episode_lengths[slot]), self.slot_modules[slot]
        )
        self._episode_returns[slot] = 0.0
        self._episode_lengths[slot] = 0
        if self.episode_tracker is not None:
            self.episode_tracker.begin_next(slot)
        self._episode_hook("on_episode_start", slot, done=False)  # same-step autoreset: the next one began

    def _episode_steps(
        self,
        next_obs: npt.NDArray[Any],
        actions: npt.NDArray[Any],
        rewards: npt.NDArray[Any],
        terminateds: npt.NDArray[np.bool_],
        truncateds: npt.NDArray[np.bool_],
        infos: Mapping[str, Any],
    ) -> None:
        """Record a step in the episode objects, then call ``on_episode_step`` for the episodes that go on."""
        if self.episode_tracker is not None:
            self.episode_tracker.step(next_obs, actions, rewards, terminateds, truncateds, infos)
        if self._step_hook:
            for i in np.flatnonzero(~(terminateds | truncateds)):
                self._episode_hook("on_episode_step", int(i), done=False)

    def _new_episode_tracker(self, reset_infos: Mapping[str, Any]) -> EpisodeTracker | None:
        """Episode objects for the slots' current episodes, when a callback overrides an episode hook."""
        if not self._episode_hooks:
            return None
        return EpisodeTracker(self.worker_index, self.slot_agents, self.slot_modules, self._obs, reset_infos)

    def _episode_hook(self, hook: str, slot: int, *, done: bool) -> None:
        """Call the callbacks' ``hook`` (``on_episode_start``/``_step``/``_end``) for the episode of ``slot``
        (``done``: it ended, which the episode itself says)."""
        if self.episode_tracker is None:  # no callback overrides an episode hook
            return
        getattr(self.callbacks, hook)(
            episode=self.episode_tracker.episodes[slot],
            env_runner=self,
            metrics_logger=self.metrics,
            env=self.env.envs[slot],
            env_index=slot,
            rl_module=self.module,
        )

    def _record_episode(self, episode_return: float, length: int, module_id: str) -> None:
        self._recent_returns.append(episode_return)
        self._recent_lengths.append(length)
        if module_id in self._recent_module_returns:
            self._recent_module_returns[module_id].append(episode_return)
        self.num_episodes_lifetime += 1
        self._episodes_this_iteration += 1
        self.last_episodes.append((episode_return, length, module_id))

    # ------------------------------------------------------------------ group bookkeeping

    def sample_report(self) -> dict[str, Any]:
        """What the group's driver needs from this runner after a :meth:`sample`.

        The steps taken, the episodes that ended (in order), the connectors'
        deltas (statistics of the data seen since the last report, connector name
        -> delta, per pipeline) and what the callbacks logged since the last report
        (:meth:`MetricsLogger.pop_deltas`); small, whatever the size of the batches.
        """
        return {
            "env_steps": self.num_envs * int(self.config.rollout_length),
            "agent_steps": self._agent_steps_of_last_sample(),
            "episodes": list(self.last_episodes),
            "connector_deltas": self.pop_connector_deltas(),
            "metrics": self.metrics.pop_deltas(),
        }

    def pop_connector_deltas(self) -> dict[str, Any]:
        """The connectors' deltas (statistics of the data seen since the last call), by pipeline name."""
        return {
            "env_to_module_connector": self.env_to_module.pop_deltas(),
            "module_to_env_connector": self.module_to_env.pop_deltas(),
        }

    def _agent_steps_of_last_sample(self) -> int:
        # Every slot is one agent that acts every step.
        return self.num_slots * int(self.config.rollout_length)

    def begin_group_iteration(self) -> None:
        """Start counting a new iteration's episodes (for a runner that keeps a group's totals)."""
        self._episodes_this_iteration = 0
        self.last_episodes = []

    def absorb_sample_report(self, report: Mapping[str, Any]) -> None:
        """Add another runner's :meth:`sample_report` to this runner's counters, windows and connectors.

        The runner that keeps a group's totals (the local runner of a group of
        remote runners) calls this for every remote runner after each round of
        sampling, in runner order, so that the totals are deterministic.
        """
        self.num_env_steps_sampled_lifetime += int(report["env_steps"])
        self.num_agent_steps_sampled_lifetime += int(report["agent_steps"])
        for episode_return, length, module_id in report["episodes"]:
            self._record_episode(float(episode_return), int(length), str(module_id))
        deltas = report["connector_deltas"]
        self.env_to_module.merge_deltas(deltas.get("env_to_module_connector", {}))
        self.module_to_env.merge_deltas(deltas.get("module_to_env_connector", {}))

    def get_connector_states(self) -> dict[str, Any]:
        """The states of both connector pipelines, by component name."""
        return {
            "env_to_module_connector": self.env_to_module.get_state(),
            "module_to_env_connector": self.module_to_env.get_state(),
        }

    def set_synced_connector_states(self, states: Mapping[str, Any]) -> None:
        """Take the group's merged connector states (as :meth:`get_connector_states` gives)."""
        if "env_to_module_connector" in states:
            self.env_to_module.set_synced_states(states["env_to_module_connector"])
        if "module_to_env_connector" in states:
            self.module_to_env.set_synced_states(states["module_to_env_connector"])

    def get_metrics(self) -> dict[str, float | int]:
        """Episode and counter metrics (NaN means: no episode has ended yet)."""
        metrics: dict[str, float | int] = {
            "episode_return_mean": _mean(self._recent_returns),
            "episode_return_min": min(self._recent_returns, default=math.nan),
            "episode_return_max": max(self._recent_returns, default=math.nan),
            "episode_len_mean": _mean(self._recent_lengths),
            "num_episodes": self._episodes_this_iteration,
            "num_episodes_lifetime": self.num_episodes_lifetime,
            "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
            "num_agent_steps_sampled_lifetime": self.num_agent_steps_sampled_lifetime,
        }
        if len(self.config.policies) > 1 or self._multi_agent:
            for module_id, returns in self._recent_module_returns.items():
                metrics[f"env_runner/{module_id}/episode_return_mean"] = _mean(returns)
        return metrics

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load module weights (module id -> RLModule state) into the inference copy."""
        self.module.set_state(dict(weights))

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """Add an inference copy of a new module (weights follow with the next :meth:`set_weights`).

        Args:
            module_id: The new module's id.
            spec: Its complete spec (class and spaces given).
            config: The algorithm's config with the module added (its ``policies``).
        """
        self.module.add_module(module_id, spec.build())
        self.module.eval()
        self.module_specs[module_id] = spec
        self._recent_module_returns.setdefault(module_id, deque(maxlen=int(self.config.episode_return_window)))
        self.config = config

    _prepared_removal: ModuleRemoval | None = None
    """What :meth:`prepare_remove_module` checked, until :meth:`apply_remove_module`."""

    def remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Drop the inference copy of ``module_id`` (:meth:`prepare_remove_module`, then apply it).

        Raises:
            ValueError: Agents of this runner's environments still act with it (nothing is changed).
        """
        self.prepare_remove_module(module_id, config=config)
        self.apply_remove_module()

    def prepare_remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """Check that removing ``module_id`` with ``config`` is possible here, changing nothing.

        The runner keeps what the removal would do until :meth:`apply_remove_module`
        (or the next prepare). A group of runners prepares on every runner first, so
        that one runner's refusal leaves them all as they were.

        Raises:
            ValueError: Agents of this runner's environments still act with it.
        """
        self._prepared_removal = None
        self._prepared_removal = self._plan_removal(module_id, config)

    def apply_remove_module(self) -> None:
        """Apply the removal :meth:`prepare_remove_module` checked.

        Raises:
            RuntimeError: Nothing was prepared.
        """
        removal, self._prepared_removal = self._prepared_removal, None
        if removal is None:
            raise RuntimeError("apply_remove_module() without prepare_remove_module(): there is nothing to remove.")
        self._apply_removal(removal)

    def discard_remove_module(self) -> None:
        """Forget a removal :meth:`prepare_remove_module` checked (another runner refused it)."""
        self._prepared_removal = None

    def _plan_removal(self, module_id: str, config: AlgorithmConfig) -> ModuleRemoval:
        """The removal of ``module_id``, or ``ValueError`` if this runner refuses it; changes nothing."""
        if module_id in self._module_slots:
            agents = sorted({agent for agent, m in self.policy_mapping.items() if m == module_id})
            raise ValueError(
                f"Module {module_id!r} cannot be removed: agents {agents} act with it. Map them to another "
                "module first (new_agent_to_module_mapping_fn / policy_mapping)."
            )
        return ModuleRemoval(module_id, config)

    def _apply_removal(self, removal: ModuleRemoval) -> None:
        """Forget the module (inference copy, spec, return window) once no agent acts with it; take the config."""
        self.module.remove_module(removal.module_id)
        self.module_specs.pop(removal.module_id, None)
        self._recent_module_returns.pop(removal.module_id, None)
        self.config = removal.config

    # ------------------------------------------------------------------ Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``env_to_module_connector`` and ``module_to_env_connector``.

        The inference copy of the module is not a component (as in RLlib): the
        learner's module is the one checkpointed, and the algorithm copies its
        weights here after every restore.
        """
        return [
            ("env_to_module_connector", self.env_to_module),
            ("module_to_env_connector", self.module_to_env),
        ]

    def _env_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "saved": self.env_state_saved,
            "env": self.config.env,
            "num_slots": self.num_slots,
        }
        if self.env_state_saved:
            state["obs"] = to_state(self._obs)
            state["episode_starts"] = self._episode_starts.copy()
            local = self._runner_local_connector_states()
            if local:  # the connectors' part of the episodes in flight (frame stacks), this runner's own
                state["connectors"] = local
            state["sub_envs"] = [get_env_state(env) for env in self.env.envs]
            state["autoreset"] = np.array(self.env._autoreset_envs, copy=True)
            state["episode_returns"] = self._episode_returns.copy()
            state["episode_lengths"] = self._episode_lengths.copy()
            state["episodes_started"] = self._episodes_started  # whether on_episode_start fired for them
            if self._passes_prev:  # each slot's last action and reward, which its next observation follows
                state["prev_actions"], state["prev_rewards"] = self._prev_actions.copy(), self._prev_rewards.copy()
            if self._module_states:  # the memory of stateful modules, per slot: the episodes go on with it
                state["module_states"] = {
                    module_id: {name: value.numpy().copy() for name, value in states.items()}
                    for module_id, states in self._module_states.items()
                }
            if self.episode_tracker is not None:
                state["episode_api"] = self.episode_tracker.get_state()  # custom_data and history, in flight
        return state

    def _runner_local_connector_states(self) -> dict[str, Any]:
        states = {
            "env_to_module_connector": self.env_to_module.get_runner_local_states(),
            "module_to_env_connector": self.module_to_env.get_runner_local_states(),
        }
        return {name: value for name, value in states.items() if value}

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Counters, the action-sampling RNG, episode windows, env state, and components."""
        state: dict[str, Any] = {
            "counters": {
                "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
                "num_agent_steps_sampled_lifetime": self.num_agent_steps_sampled_lifetime,
                "num_episodes_lifetime": self.num_episodes_lifetime,
                "num_episodes": self._episodes_this_iteration,
            },
            "rng": {"torch": self._generator.get_state()},
            "episodes": {
                "recent_returns": list(self._recent_returns),
                "recent_lengths": list(self._recent_lengths),
                "recent_module_returns": {
                    module_id: list(returns) for module_id, returns in self._recent_module_returns.items()
                },
            },
            "env": self._env_state(),
            "metrics": self.metrics.get_state(),
        }
        state.update(self._get_components_state(components, not_components=not_components))
        return state

    checkpoint_label: str = "env_runner"
    """How refusals of a restore name this runner's folder (the evaluation runner's is ``eval_env_runner``)."""

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse a hostile or damaged state before a restore changes anything (:mod:`~cairn.rl.env.state_checks`).

        Raises:
            CorruptCheckpointError: A value that does not hold together (a NaN or negative
                counter, per-slot arrays of another length, a foreign RNG state, an episode
                of another slot); the message names its path in the checkpoint.
            IncompatibleCheckpointError: A metrics logger state of another layout.
        """
        self._read_state(state)
        # The own states of remote runners 2..N, which each of them applies: all checked here first.
        peers = state.get(PEER_STATES_KEY, [])
        if not isinstance(peers, list | tuple):
            raise corrupt(f"{self.checkpoint_label}/{PEER_STATES_KEY}", "is not a list of runner states")
        for i, peer in enumerate(peers):
            peer = mapping(peer, where=f"{self.checkpoint_label}/{PEER_STATES_KEY}/{i}")
            self._read_state({key: peer[key] for key in PEER_OWN_KEYS if key in peer})

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what ``state`` holds; what it does not hold is left as it is.

        The environments are restored when the state saved them and they fit
        (same env, same number of sub-environments); otherwise the runner
        keeps its current episodes and sets :attr:`episodes_restarted`.
        Everything (also the components' parts) is checked before anything is
        applied: a refused state leaves the runner as it was.

        Raises:
            CorruptCheckpointError: See :meth:`check_state`.
        """
        check_state_tree(self, state, where=self.checkpoint_label)
        read = self._read_state(state)
        self._set_components_state(state)
        counters = read["counters"]
        self.num_env_steps_sampled_lifetime = counters.get(
            "num_env_steps_sampled_lifetime", self.num_env_steps_sampled_lifetime
        )
        self.num_agent_steps_sampled_lifetime = counters.get(
            "num_agent_steps_sampled_lifetime", self.num_agent_steps_sampled_lifetime
        )
        self.num_episodes_lifetime = counters.get("num_episodes_lifetime", self.num_episodes_lifetime)
        self._episodes_this_iteration = counters.get("num_episodes", self._episodes_this_iteration)
        if "rng" in read:
            self._generator.set_state(read["rng"])
        if "episodes" in read:
            window = int(self.config.episode_return_window)
            returns, lengths, module_returns = read["episodes"]
            if returns is not None:
                self._recent_returns = deque(returns, maxlen=window)
            if lengths is not None:
                self._recent_lengths = deque(lengths, maxlen=window)
            for module_id, values in module_returns.items():
                self._recent_module_returns[module_id] = deque(values, maxlen=window)
        if "env" in read:
            self._apply_env_state(read["env"])
        if "metrics" in read:
            self.metrics.set_state(state["metrics"], where=f"{self.checkpoint_label}/metrics")

    def _read_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """``state``'s own values, checked and parsed for :meth:`set_state`; changes nothing."""
        where = self.checkpoint_label
        read: dict[str, Any] = {}
        counters = mapping(state.get("counters", {}), where=f"{where}/counters")
        read["counters"] = {
            name: count(counters[name], where=f"{where}/counters/{name}") for name in _COUNTERS if name in counters
        }
        rng = mapping(state.get("rng", {}), where=f"{where}/rng")
        if "torch" in rng:
            read["rng"] = rng_state(self._generator, rng["torch"], where=f"{where}/rng/torch")
        if "episodes" in state:
            read["episodes"] = episode_windows(
                state["episodes"], self._recent_module_returns, where=f"{where}/episodes"
            )
        if "env" in state:
            read["env"] = self._read_env_state(mapping(state["env"], where=f"{where}/env"))
        if "metrics" in state:
            read["metrics"] = read_metrics_state(state["metrics"], where=f"{where}/metrics")
        return read

    def _read_env_state(self, env_state: Mapping[str, Any]) -> dict[str, Any] | None:
        """The environments' part of a state, checked; None when it does not fit (the episodes restart)."""
        where = f"{self.checkpoint_label}/env"
        sub_states = env_state.get("sub_envs")
        fits = (
            env_state.get("saved") is True
            and self.env_state_saved
            and env_state.get("env") == self.config.env
            and _is_int(env_state.get("num_slots"), self.num_slots)
            and same_layout(self._obs, env_state.get("obs"))
            and isinstance(sub_states, list | tuple)
            and len(sub_states) == self.num_slots
            and all(env_state_mismatch(env, sub) is None for env, sub in zip(self.env.envs, sub_states, strict=True))
        )
        if not fits:
            return None
        assert isinstance(sub_states, list | tuple)
        for i, (env, sub) in enumerate(zip(self.env.envs, sub_states, strict=True)):
            problem = env_state_problem(env, sub)
            if problem is not None:
                raise corrupt(f"{where}/sub_envs/{i}", f"the environment's saved state does not fit: {problem}")
        if not numeric_leaves(env_state["obs"]):
            raise corrupt(f"{where}/obs", "the current observations are not arrays of numbers")
        n = self.num_slots
        starts = env_state.get("episode_starts")

        def rows(key: str, kind: str) -> npt.NDArray[Any]:
            return slot_rows(env_state.get(key), length=n, kind=kind, where=f"{where}/{key}")

        connectors = env_state.get("connectors", {})
        read: dict[str, Any] = {
            "sub_envs": list(sub_states),
            "obs": env_state["obs"],
            "episode_starts": None if starts is None else rows("episode_starts", "bool"),
            "autoreset": rows("autoreset", "bool"),
            "returns": rows("episode_returns", "float"),
            "lengths": rows("episode_lengths", "int"),
            "started": env_state.get("episodes_started", True),
            "connectors": runner_local_states(self, connectors, max_slot=n, where=f"{where}/connectors"),
            "memory": self._read_memory(env_state),  # recurrent module states, previous actions and rewards
        }
        if not isinstance(read["started"], bool | np.bool_):
            raise corrupt(f"{where}/episodes_started", f"expected True or False, found {read['started']!r:.40}")
        api = env_state.get("episode_api")
        if self.episode_tracker is not None and api is not None:
            spaces = (self.env.single_observation_space, self.env.single_action_space)
            read["episode_api"] = tracker_state(
                api, self.slot_agents, self.slot_modules, spaces, where=f"{where}/episode_api"
            )
        return read

    def _set_env_state(self, env_state: Mapping[str, Any]) -> None:
        """Check, then apply, the environments' part of a state (see :meth:`set_state`)."""
        self._apply_env_state(self._read_env_state(mapping(env_state, where=f"{self.checkpoint_label}/env")))

    def _apply_env_state(self, read: dict[str, Any] | None) -> None:
        """Apply :meth:`_read_env_state`'s result (None: the episodes restart)."""
        if read is None:
            self.episodes_restarted = True
            self._episode_starts[:] = True  # connectors (frame stacks) start afresh with the runner's episodes
            return
        self._apply_memory(read["memory"])  # recurrent states, previous actions and rewards (checked when read)
        for env, sub_state in zip(self.env.envs, read["sub_envs"], strict=True):
            set_env_state(env, sub_state)
        self._obs = from_state(self._obs, read["obs"])
        starts = read["episode_starts"]
        self._episode_starts = np.zeros(self.num_slots, dtype=np.bool_) if starts is None else starts
        self.env._autoreset_envs = read["autoreset"]
        self._episode_returns = read["returns"]
        self._episode_lengths = read["lengths"]
        self.episodes_restarted = False
        connectors = read["connectors"]
        self.env_to_module.set_runner_local_states(connectors.get("env_to_module_connector", {}))
        self.module_to_env.set_runner_local_states(connectors.get("module_to_env_connector", {}))
        # Their on_episode_start fired before the checkpoint, unless it was taken before the first sample.
        self._episodes_started = bool(read["started"])
        if self.episode_tracker is None:
            return
        if "episode_api" in read:
            self.episode_tracker.take(*read["episode_api"])
        else:
            # Saved without episode objects: they start from the restored observations (their earlier
            # history and custom_data were never recorded), and the next sample() calls on_episode_start
            # for them, so that a callback sees every episode start.
            self.episode_tracker = self._new_episode_tracker({})
            self._episodes_started = False

    def _read_memory(self, env_state: Mapping[str, Any]) -> tuple[dict[str, dict[str, torch.Tensor]], Any]:
        """The memory of the episodes in flight, checked: the stateful modules' states and, for a pipeline
        that reads them, each slot's previous action and reward (``None`` otherwise).

        Raises:
            IncompatibleCheckpointError: See :meth:`_restored_module_states`; previous actions or rewards
                missing or of another shape or kind.
        """
        states = self._restored_module_states(env_state.get("module_states", {}))
        prev = None
        if self._passes_prev:
            actions, rewards = env_state.get("prev_actions"), env_state.get("prev_rewards")
            if not (
                isinstance(actions, np.ndarray)
                and isinstance(rewards, np.ndarray)
                and actions.shape == self._prev_actions.shape
                and rewards.shape == self._prev_rewards.shape
                and actions.dtype.kind in "fiu"
                and rewards.dtype.kind in "fiu"
                and np.isfinite(actions).all()
                and np.isfinite(rewards).all()
            ):
                raise IncompatibleCheckpointError(
                    "env_runner/env/prev_actions and prev_rewards must be finite arrays of shapes "
                    f"{self._prev_actions.shape} and {self._prev_rewards.shape} (each slot's last action and reward, "
                    "which PrevActionsPrevRewards reads); the checkpoint was written without that piece or altered."
                )
            prev = (actions.astype(self._prev_actions.dtype), rewards.astype(np.float32))
        return states, prev

    def _apply_memory(self, memory: tuple[dict[str, dict[str, torch.Tensor]], Any]) -> None:
        """Take what :meth:`_read_memory` checked."""
        states, prev = memory
        self._module_states = states
        if prev is not None:
            self._prev_actions, self._prev_rewards = prev

    def _restored_module_states(self, saved: Any) -> dict[str, dict[str, torch.Tensor]]:
        """The stateful modules' states of a checkpoint's episodes in flight, checked against this runner's.

        Raises:
            IncompatibleCheckpointError: States of modules that are not stateful here, a stateful
                module without its states, other names, shapes, or non-finite values.
        """
        where = "env_runner/env/module_states"
        if not isinstance(saved, Mapping) or set(saved) != set(self._initial_states):
            found = sorted(map(str, saved)) if isinstance(saved, Mapping) else type(saved).__name__
            raise IncompatibleCheckpointError(
                f"{where} holds states of {found}, but this runner's stateful modules are "
                f"{sorted(self._initial_states)}: the checkpoint was written with other modules (restore it with the "
                "modules it was written with) or altered."
            )
        restored: dict[str, dict[str, torch.Tensor]] = {}
        for module_id, initial in self._initial_states.items():
            entry, rows = saved[module_id], len(self._module_slots[module_id])
            if not isinstance(entry, Mapping) or set(entry) != set(initial):
                raise IncompatibleCheckpointError(
                    f"{where}/{module_id} is not a state with the names {sorted(initial)} of the module's "
                    "get_initial_state(); the checkpoint was written by another module or altered."
                )
            restored[module_id] = {}
            for name, value in initial.items():
                array = entry[name]
                expected = (rows, *value.shape)
                if not isinstance(array, np.ndarray) or array.dtype.kind not in "fiu" or array.shape != expected:
                    shape = getattr(array, "shape", type(array).__name__)
                    raise IncompatibleCheckpointError(
                        f"{where}/{module_id}/{name} has shape {shape}, but module {module_id!r} "
                        f"({type(self.module[module_id]).__qualname__}) with {rows} env slots here needs a numeric "
                        f"array of shape {expected}: the checkpoint was written with another state size "
                        "(lstm_cell_size) or number of envs. Restore it with the config it was written with."
                    )
                if not np.isfinite(array).all():
                    raise IncompatibleCheckpointError(f"{where}/{module_id}/{name} holds NaN or infinite values.")
                restored[module_id][name] = torch.as_tensor(array.copy()).to(value.dtype)
        return restored

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config,), {"worker_index": ...})``."""
        return (self.config,), {"worker_index": self.worker_index}

    def get_metadata(self) -> dict[str, Any]:
        """Adds the env id and whether episodes restart on restore."""
        metadata = dict(super().get_metadata())
        metadata.update(
            {
                "env": self.config.env,
                "env_state_saved": self.env_state_saved,
                "episodes_restart_on_restore": not self.env_state_saved,
            }
        )
        return metadata

    def close(self) -> None:
        """Close the environments."""
        self.env.close()


_COUNTERS = (
    "num_env_steps_sampled_lifetime",
    "num_agent_steps_sampled_lifetime",
    "num_episodes_lifetime",
    "num_episodes",
)


def as_tensors(obs: Any) -> Any:
    """Batched observations (an array, or a dict/tuple of them) as tensors sharing their memory where they can."""
    return map_leaves(lambda leaf: torch.from_numpy(np.ascontiguousarray(leaf)), obs)


def zeros_of(space: gym.Space[Any], rows: tuple[int, ...]) -> Any:
    """Zero buffers ``[*rows, *shape]`` of a module's observation space: float32 for a flat space (what
    cairn's batches always held); a Dict/Tuple space's leaves in their own dtypes (an action mask of
    int8 stays int8), in the structure the env-to-module pipeline gives them."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _leaf_zeros(sub, rows) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_leaf_zeros(sub, rows) for sub in space.spaces)
    return np.zeros((*rows, *(space.shape or ())), dtype=np.float32)


def _leaf_zeros(space: gym.Space[Any], rows: tuple[int, ...]) -> Any:
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        return zeros_of(space, rows)
    dtype = np.int64 if isinstance(space, gym.spaces.Discrete) else (space.dtype or np.float32)
    return np.zeros((*rows, *(space.shape or ())), dtype=dtype)


def _is_int(value: Any, expected: int) -> bool:
    """Whether ``value`` is the int ``expected`` (a NaN or a str is not; nothing is converted)."""
    return not isinstance(value, bool) and isinstance(value, int | np.integer) and int(value) == expected


def _mean(values: deque[float] | deque[int]) -> float:
    return float(np.mean(np.asarray(values, dtype=np.float64))) if values else float("nan")


register_old_paths(EnvRunner)
