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
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from cairn import Checkpointable
from cairn.rl._aliases import register_old_paths
from cairn.rl.callbacks.callbacks import callbacks_from_config, overrides
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.env_creators import live_env_creator
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.core.rl_module.stateful import batched_state, initial_state, state_columns, state_out, strip_time_dim
from cairn.rl.env.batch_modes import complete_episodes
from cairn.rl.env.complete_sampling import sample_whole_episodes
from cairn.rl.env.connector_building import (
    build_env_to_module,
    build_module_to_env,
    check_learner_connector,
    nested_module_name,
)
from cairn.rl.env.env_context import EnvContext
from cairn.rl.env.env_errors import StepFailedRecreateEnvError
from cairn.rl.env.env_state import (
    supports_env_state,
)
from cairn.rl.env.episodes import EpisodeTracker
from cairn.rl.env.module_outputs import owed_output, owes_logp_and_values
from cairn.rl.env.module_spaces import build_module_specs
from cairn.rl.env.multi_agent_env import DEFAULT_AGENT_ID, agent_ids, make_env, parse_env, resolve_policy_mapping
from cairn.rl.env.pretrained_connectors import restore_pretrained_connectors
from cairn.rl.env.runner_episode_hooks import EnvRunnerEpisodeHooks
from cairn.rl.env.runner_metrics import EnvRunnerMetrics
from cairn.rl.env.runner_modules import EnvRunnerModules
from cairn.rl.env.runner_state import EnvRunnerState
from cairn.rl.env.runner_state_checks import (
    layout_problem,
    spec_spaces_problem,
)
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger
from cairn.rl.utils.nested import (
    copy_rows,
    index_rows,
    map_leaves,
    set_rows,
    stack_rows,
    take_rows,
)

__all__ = [
    "NUM_AGENT_STEPS_SAMPLED",
    "NUM_ENV_STEPS_SAMPLED",
    "EnvRunner",
    "SampleBatch",
    "StepFailedRecreateEnvError",  # at RLlib's path as well (ray.rllib.env.env_runner imports it)
]

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


class EnvRunner(EnvRunnerModules, EnvRunnerMetrics, EnvRunnerState, EnvRunnerEpisodeHooks):
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
            [functools.partial(make_env, config.env, dict(config.env_config), live_env_creator(config))]
            * self.num_slots,
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
        self._last_env_steps = self._last_agent_steps = 0  # of the last sample_batches() (its report)
        self._episodes_this_iteration = 0
        self.last_episodes: list[tuple[float, int, str]] = []
        """(return, length, module id) of the episodes that ended in the last :meth:`sample_batches`."""
        self.episodes_restarted = False
        self.metrics = MetricsLogger()
        """What this runner's callbacks log; checkpointed, and handed to the algorithm's logger each iteration."""
        self.callbacks = callbacks_from_config(config)
        self._callbacks = self.callbacks
        """RLlib's name of the same list (its env runners keep it as ``_callbacks``; RLlib's tests read it)."""
        # on_episode_start of the first episodes fires in the first sample() (as in RLlib), not here: a
        # runner that never samples (the driver's, with remote runners) or whose episodes in flight a
        # checkpoint restores must not report starts that are not new.
        self._episodes_started = False
        self._step_hook = overrides(self.callbacks, "on_episode_step")  # a call per step and env costs
        # Episode objects (RLlib's Episode API) cost per-step work: kept only when an episode hook is overridden.
        self._episode_hooks = any(
            overrides(self.callbacks, hook)
            for hook in ("on_episode_created", "on_episode_start", "on_episode_step", "on_episode_end")
        )
        self._environment_created(config)
        return seeds

    def _environment_created(self, config: AlgorithmConfig) -> None:
        """Call ``on_environment_created``: once with the vector env, or once per multi-agent env copy."""
        if not overrides(self.callbacks, "on_environment_created"):
            return
        env = getattr(self, "env", None)
        copies = [env] if isinstance(env, gym.vector.VectorEnv) else list(getattr(self, "envs", []))
        for index, copy in enumerate(copies):
            context = EnvContext(
                config.env_config,
                worker_index=self.worker_index,
                num_workers=int(config.num_env_runners),
                vector_index=index,
                remote=self.worker_index > 0,
            )
            self.callbacks.on_environment_created(
                env_runner=self, metrics_logger=self.metrics, env=copy, env_context=context
            )

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

    def sample_batches(self) -> dict[str, SampleBatch]:
        """Run ``rollout_length`` steps in every sub-environment; with ``batch_mode="complete_episodes"``,
        whole episodes of at least that many steps per slot (:mod:`~cairn.rl.env.batch_modes`).

        Returns:
            Module id -> that module's :data:`SampleBatch` (``[T, slots, ...]``; whole episodes:
            ``[T, 1, ...]``, one after the other).

        Raises:
            IncompleteEpisodesError: An episode went on past the bound of ``"complete_episodes"``.
        """
        self._episodes_this_iteration = 0
        self.last_episodes = []
        if not self._episodes_started:
            self._episodes_started = True
            for slot in range(self.num_slots):
                self._episode_hook("on_episode_start", slot, done=False)
        if complete_episodes(self.config):
            batches, steps = sample_whole_episodes(self)
            self._end_sample(batches, agent_steps=steps * self.num_slots, env_steps=steps * self.num_envs)
            return batches
        horizon = int(self.config.rollout_length)
        batches, _ = self._rollout(horizon)
        self._end_sample(batches, agent_steps=self.num_slots * horizon)
        return batches

    def _rollout(
        self, horizon: int, until: Callable[[npt.NDArray[np.bool_]], bool] | None = None
    ) -> tuple[dict[str, SampleBatch], int]:
        """Step every sub-environment ``horizon`` times, or until ``until(episodes ended at this step)`` says
        so (then the next episodes' ``on_episode_start`` waits for the next call); returns each module's
        batch of the ``T`` steps taken, and ``T``."""
        n = self.num_slots
        off_policy = bool(self.config.sample_next_obs)
        buf = self._sample_buffers(horizon, off_policy=off_policy)
        state_bufs: dict[str, dict[str, npt.NDArray[Any]]] = {}  # the states fed (stateful modules)
        all_slots = np.arange(n)
        steps = horizon
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
                rl_module=self.module,
                batch={"actions": actions},
                episodes=None,
                explore=True,
                metrics=self.metrics,
                update=True,
                slots=all_slots,
            )["actions"]
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
            stop = until is not None and until(terminateds | truncateds)
            for i in np.flatnonzero(terminateds | truncateds):
                self._end_episode(int(i), start_next=not stop)
            self._obs = next_obs
            self.num_env_steps_sampled_lifetime += self.num_envs
            self.num_agent_steps_sampled_lifetime += n
            if stop:
                steps = t + 1
                break
        self._reset_states(self._episode_starts)  # the next observations that begin episodes: their values
        if off_policy:
            bootstrap_vf = np.zeros(n, dtype=np.float32)
        else:
            last = as_tensors(self._to_module(self._obs, all_slots, update=False, starts=self._episode_starts))
            bootstrap_vf = self._values(last, np.arange(n))
        if steps < horizon:  # stopped early: the buffers' first `steps` rows
            buf = {key: index_rows(value, slice(0, steps)) for key, value in buf.items()}
            state_bufs = {m: {k: v[:steps] for k, v in b.items()} for m, b in state_bufs.items()}
        return self._module_batches(buf, bootstrap_vf, state_bufs), steps

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
            rl_module=self.module,
            batch={"obs": obs},
            episodes=None,
            explore=True,
            metrics=self.metrics,
            update=update,
            slots=slots,
            episode_starts=starts,
            **prev,
        )["obs"]
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

    def _end_sample(self, batches: dict[str, SampleBatch], *, agent_steps: int, env_steps: int | None = None) -> None:
        """Log the sample's counters, then call ``on_sample_end`` (RLlib's order: the callback may
        ``metrics_logger.peek("num_env_steps_sampled")``: the steps since the runner's metrics were last
        handed to the algorithm, as in RLlib). Reported each iteration under ``env_runners/`` (summed
        over the runners)."""
        if env_steps is None:  # rollout_length steps of every copy
            env_steps = self.num_envs * int(self.config.rollout_length)
        self._last_env_steps, self._last_agent_steps = env_steps, agent_steps
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
        self.metrics.log_value(NUM_AGENT_STEPS_SAMPLED, agent_steps, reduce="sum")
        self.callbacks.on_sample_end(env_runner=self, metrics_logger=self.metrics, samples=batches)

    def _agent_steps_of_last_sample(self) -> int:
        return self._last_agent_steps

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load module weights (module id -> RLModule state) into the inference copy."""
        self.module.set_state(dict(weights))

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

    def stop(self) -> None:
        """Release the env copies: RLlib's name for :meth:`close` (its fixtures call it at teardown).

        ``MultiAgentEnvRunner`` inherits it and closes its own env copies through its ``close()``.
        """
        self.close()


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


register_old_paths(EnvRunner)
