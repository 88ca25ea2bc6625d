"""The saved state of an env runner: counters, the action RNG, episode windows, and the episodes in flight.

:class:`EnvRunnerState` holds :class:`~cairn.rl.env.env_runner.EnvRunner`'s ``get_state`` /
``check_state`` / ``set_state``: what a state holds, how each of its values is checked before
anything is applied (a refused state leaves the runner as it was), and how it is applied.
:class:`~cairn.rl.env.multi_agent_runner_state.MultiAgentRunnerState` extends it with the
multi-agent runner's episodes in flight. The runner's attributes it reads are set by the
runner's ``__init__`` (declared below for the type checker).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.env.env_state import (
    env_state_mismatch,
    env_state_problem,
    get_env_state,
    set_env_state,
)
from cairn.rl.env.episodes import EpisodeTracker
from cairn.rl.env.runner_state_checks import (
    PEER_OWN_KEYS,
    PEER_STATES_KEY,
    episode_windows,
    module_memory,
    runner_local_states,
    slot_rows,
    tracker_state,
)
from cairn.rl.utils._util import Names
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger
from cairn.rl.utils.metrics.metrics_logger import read_state as read_metrics_state
from cairn.rl.utils.nested import (
    from_state,
    same_layout,
    to_state,
)
from cairn.state_checks import ArrayField, Count, Schema, check_state_tree, corrupt, count, mapping, numeric_leaves
from cairn.torch import generator_state

__all__ = ["EnvRunnerState"]


class EnvRunnerState(Checkpointable):
    """``get_state`` / ``check_state`` / ``set_state`` of :class:`~cairn.rl.env.env_runner.EnvRunner`."""

    # What the runner's __init__ (and _init_sampling) sets, and this state reads and writes.
    config: AlgorithmConfig
    env: gym.vector.SyncVectorEnv
    env_state_saved: bool
    num_slots: int
    slot_agents: list[str]
    slot_modules: list[str]
    module: MultiRLModule
    env_to_module: ConnectorPipeline
    module_to_env: ConnectorPipeline
    metrics: MetricsLogger
    episode_tracker: EpisodeTracker | None
    episodes_restarted: bool
    num_env_steps_sampled_lifetime: int
    num_agent_steps_sampled_lifetime: int
    num_episodes_lifetime: int
    _generator: torch.Generator
    _obs: npt.NDArray[Any]
    _episode_starts: npt.NDArray[np.bool_]
    _episode_returns: npt.NDArray[np.float64]
    _episode_lengths: npt.NDArray[np.int64]
    _episodes_started: bool
    _episodes_this_iteration: int
    _recent_returns: deque[float]
    _recent_lengths: deque[int]
    _recent_module_returns: dict[str, deque[float]]
    _passes_prev: bool
    _prev_actions: npt.NDArray[Any]
    _prev_rewards: npt.NDArray[np.float32]
    _initial_states: dict[str, dict[str, torch.Tensor]]
    _module_states: dict[str, dict[str, torch.Tensor]]
    _module_slots: dict[str, npt.NDArray[Any]]
    _new_episode_tracker: Callable[[Mapping[str, Any]], EpisodeTracker | None]

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
        """Refuse a hostile or damaged state before a restore changes anything (:mod:`.runner_state_checks`).

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
        read["counters"] = _COUNTERS.read(state.get("counters", {}), where=f"{where}/counters")
        rng = mapping(state.get("rng", {}), where=f"{where}/rng")
        if "torch" in rng:
            read["rng"] = generator_state(self._generator, rng["torch"], where=f"{where}/rng/torch")
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
                missing or of another shape.
            CorruptCheckpointError: Previous actions or rewards that are not finite numbers.
        """
        states = self._restored_module_states(env_state.get("module_states", {}))
        prev = None
        if self._passes_prev:
            if "prev_actions" not in env_state or "prev_rewards" not in env_state:
                raise IncompatibleCheckpointError(
                    f"{self.checkpoint_label}/env holds no prev_actions and prev_rewards (each slot's last action and "
                    "reward, which PrevActionsPrevRewards reads): the checkpoint was written without that piece."
                )
            read = Schema(
                {
                    "prev_actions": ArrayField("fiu", shape=self._prev_actions.shape, finite=True),
                    "prev_rewards": ArrayField("fiu", shape=self._prev_rewards.shape, finite=True),
                },
                unfit="prev_actions and prev_rewards are each slot's last action and reward, which "
                "PrevActionsPrevRewards reads: the checkpoint was written with another number of envs or actions.",
            ).read(env_state, where=f"{self.checkpoint_label}/env")
            prev = (read["prev_actions"].astype(self._prev_actions.dtype), read["prev_rewards"].astype(np.float32))
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
                module without its states, other names or shapes (:func:`.runner_state_checks.module_memory`).
            CorruptCheckpointError: Non-numeric arrays, NaN or infinite values.
        """
        where = "env_runner/env/module_states"
        if not isinstance(saved, Mapping) or set(saved) != set(self._initial_states):
            found = sorted(map(str, saved)) if isinstance(saved, Mapping) else type(saved).__name__
            raise IncompatibleCheckpointError(
                f"{where} holds states of {found}, but this runner's stateful modules are "
                f"{sorted(self._initial_states)}: the checkpoint was written with other modules (restore it with the "
                "modules it was written with) or altered."
            )
        return {
            module_id: module_memory(
                saved[module_id],
                initial,
                rows=(len(self._module_slots[module_id]),),
                module_id=module_id,
                where=f"{where}/{module_id}",
            )
            for module_id, initial in self._initial_states.items()
        }


_COUNTERS = Schema(
    dict.fromkeys(
        (
            "num_env_steps_sampled_lifetime",
            "num_agent_steps_sampled_lifetime",
            "num_episodes_lifetime",
            "num_episodes",
        ),
        count,
    )
)
"""The runner's counters: each a count, each optional (a state without one keeps the runner's)."""


def _is_int(value: Any, expected: int) -> bool:
    """Whether ``value`` is the int ``expected`` (a NaN or a str is not; nothing is converted)."""
    return Count(expected, expected).fits(value)
