"""MultiAgentEnvRunner: samples :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv` environments.

The runner steps ``num_envs_per_env_runner`` copies of the environment. Each
step, the agents that were given an observation act; their observations go
through the ``env_to_module_connector`` together, each agent's module (named
for the episode by ``policy_mapping_fn(agent_id, episode)``, called once per
agent per episode, and again when its module is removed mid-episode, see
:meth:`MultiAgentEnvRunner.remove_module`) samples its action, and each copy is stepped with its
agents' actions. A copy whose episode ends (``"__all__"``) is reset at once.

Every agent builds its own trajectory. A transition is complete when the
agent acts again or its episode ends, so the reward of a transition is all
the reward the agent got in between (in turn-based games the other player's
move comes between). :meth:`sample` returns the transitions completed during
the call, per module, as one time-major column ``[T, 1, ...]`` of agent
trajectories one after the other: where a trajectory stops inside the batch
(the agent's episode ended, or it goes on in the next call), ``terminateds``
or ``truncateds`` says so and ``final_vf`` holds the value to bootstrap from,
so that GAE (:func:`~cairn.rl.utils.gae.compute_gae`) runs per agent
trajectory. Transitions still open are kept for the next call.

Exact resume: the state holds, besides the base runner's counters, RNG,
windows and connectors, each copy's environment state (when a handler is
registered for its class, see :mod:`cairn.rl.env.env_state`), its current
observations, policy mapping, open transitions and returns. Without a
handler, the checkpoint says that episodes restart on restore.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.env_runner import EnvRunner, ModuleRemoval, SampleBatch
from cairn.rl.env.env_state import env_state_mismatch, get_env_state, set_env_state, supports_env_state
from cairn.rl.env.episodes import SingleAgentEpisode, agent_episodes_from_state, agent_episodes_state
from cairn.rl.env.multi_agent_env import (
    ALL_AGENTS,
    EpisodeInfo,
    MultiAgentEnv,
    make_multi_agent_env,
    resolve_policy_mapping_fn,
)

__all__ = ["MultiAgentEnvRunner"]

# (obs, action, action_logp, vf_pred, reward, terminated, truncated, final_vf) of one agent step.
_Row = tuple[npt.NDArray[Any], npt.NDArray[Any], float, float, float, bool, bool, float]


class _Trajectory:
    """The completed rows of one agent in one episode, collected during one sample() call."""

    def __init__(self, module_id: str) -> None:
        self.module_id = module_id
        self.rows: list[_Row] = []


class MultiAgentEnvRunner(EnvRunner):
    """Samples a multi-agent environment; one module per agent per episode.

    All agents must share one observation space and one action space (the
    modules are built from them, and one observation filter serves all agents).

    Args:
        config: The algorithm's config; ``env`` names a
            :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv`, and
            ``policy_mapping_fn`` (or ``policy_mapping``, or a single policy)
            maps agents to modules.
        worker_index: Index of this runner in its group; seeds differ per index.

    Raises:
        ValueError: Agents with different spaces, no way to map agents to
            modules, or an env that is no multi-agent environment.
    """

    STATE_VERSION = 1

    # Turn-based episodes: an agent's next observation comes after the others acted; not sampled yet.
    samples_next_obs: ClassVar[bool] = False

    def __init__(self, config: AlgorithmConfig, *, worker_index: int = 0) -> None:
        self.config = config
        self.worker_index = int(worker_index)
        num_envs = int(config.num_envs_per_env_runner)
        if num_envs < 1:
            raise ValueError(f"num_envs_per_env_runner must be >= 1, got {num_envs}.")
        self.num_envs = num_envs
        self.envs: list[MultiAgentEnv] = [make_multi_agent_env(config.env, config.env_config) for _ in range(num_envs)]
        first = self.envs[0]
        self.possible_agents = [str(agent) for agent in first.possible_agents]
        observation_space = first.get_observation_space(self.possible_agents[0])
        action_space = first.get_action_space(self.possible_agents[0])
        for agent in self.possible_agents[1:]:
            if first.get_observation_space(agent) != observation_space or first.get_action_space(agent) != action_space:
                raise ValueError(
                    f"env={config.env!r}: agent {agent!r} has other spaces than {self.possible_agents[0]!r} "
                    f"({first.get_observation_space(agent)}, {first.get_action_space(agent)} vs {observation_space}, "
                    f"{action_space}); the MultiAgentEnvRunner builds every module from one pair of spaces."
                )
        self.env_id = config.env
        seeds = self._init_sampling(config, observation_space, action_space)
        self._multi_agent = True
        self._mapping_fn = self._resolve_mapping(config)
        self.policy_mapping = self._static_mapping()
        """Agent id -> module id for every episode when no ``policy_mapping_fn`` decides per
        episode (``config.policy_mapping``, or every agent to the only policy); empty when a
        function maps agents. ``Algorithm.add_module`` records it, keeping the mapping in effect."""
        self.env_state_saved = supports_env_state(first)
        self._episode_numbers = [0] * num_envs
        self._mappings: list[dict[str, str]] = [{} for _ in range(num_envs)]
        self._pending: list[dict[str, dict[str, Any]]] = [{} for _ in range(num_envs)]
        self._agent_returns: list[dict[str, float]] = [{} for _ in range(num_envs)]
        self._agent_steps: list[dict[str, int]] = [{} for _ in range(num_envs)]
        self._obs_dicts: list[dict[str, Any]] = []
        for index, env in enumerate(self.envs):
            obs, _ = env.reset(seed=int(seeds[0]) + index)
            self._obs_dicts.append(dict(obs))
        self._open: dict[tuple[int, str], _Trajectory] = {}
        self._closed: list[_Trajectory] = []
        self._last_agent_steps = 0
        self._agent_episodes: dict[tuple[int, Any], SingleAgentEpisode] = {}
        """(env copy, agent) -> the episode object its hooks see (when a callback overrides an episode hook)."""

    # ------------------------------------------------------------------ policy mapping

    def _resolve_mapping(self, config: AlgorithmConfig) -> Callable[[str, EpisodeInfo], str]:
        if config.policy_mapping_fn is not None:
            return resolve_policy_mapping_fn(str(config.policy_mapping_fn))
        policies = tuple(config.policies)
        if config.policy_mapping is not None:
            static = dict(config.policy_mapping)

            def by_table(agent_id: str, episode: EpisodeInfo) -> str:
                if agent_id not in static:
                    raise ValueError(f"policy_mapping has no entry for agent {agent_id!r} of env={config.env!r}.")
                return static[agent_id]

            return by_table
        if len(policies) != 1:
            raise ValueError(
                f"policies={list(policies)} has several module ids: set policy_mapping_fn (or policy_mapping) to "
                "say which module each agent uses."
            )

        def only(agent_id: str, episode: EpisodeInfo) -> str:
            return policies[0]

        return only

    def _static_mapping(self) -> dict[str, str]:
        """:attr:`policy_mapping` for the current config."""
        if self.config.policy_mapping_fn is not None:
            return {}
        if self.config.policy_mapping is not None:
            return dict(self.config.policy_mapping)
        if len(self.config.policies) == 1:
            return dict.fromkeys(self.possible_agents, self.config.policies[0])
        return {}

    def _map_agent(
        self, env_index: int, agent: str, mapping_fn: Callable[[str, EpisodeInfo], str], module_ids: tuple[str, ...]
    ) -> str:
        """The module ``mapping_fn`` picks for ``agent`` in copy ``env_index``'s current episode.

        The episode's seed depends only on the runner, the copy and the episode
        number, so the same call picks the same module after a restore.
        """
        number = self._episode_numbers[env_index]
        seed = np.random.SeedSequence([self.config.seed, 31337, self.worker_index, env_index, number])
        episode = EpisodeInfo(
            id_=f"{self.worker_index}-{env_index}-{number}",
            seed=int(seed.generate_state(1)[0]),
            env_index=env_index,
            worker_index=self.worker_index,
            module_ids=module_ids,
        )
        module_id = mapping_fn(agent, episode)
        if module_id not in module_ids:
            raise ValueError(
                f"policy_mapping_fn={self.config.policy_mapping_fn!r} mapped agent {agent!r} to {module_id!r}, "
                f"which is not one of the modules {list(module_ids)}."
            )
        return str(module_id)

    def _module_for(self, env_index: int, agent: str) -> str:
        mapping = self._mappings[env_index]
        if agent not in mapping:
            mapping[agent] = self._map_agent(env_index, agent, self._mapping_fn, tuple(self.module.keys()))
        return mapping[agent]

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """As :meth:`EnvRunner.add_module`; new episodes map agents with ``config``'s ``policy_mapping_fn``.

        Episodes in flight keep the mapping they have.
        """
        mapping_fn = self._resolve_mapping(config)
        super().add_module(module_id, spec, config=config)
        self._mapping_fn = mapping_fn
        self.policy_mapping = self._static_mapping()

    def _plan_removal(self, module_id: str, config: AlgorithmConfig) -> ModuleRemoval:
        """Drop the inference copy of ``module_id`` at once, also while episodes that use it run.

        New episodes map agents with ``config``'s ``policy_mapping_fn``. Agents
        of episodes in flight that act with ``module_id`` are re-mapped now with
        that function (the same episode seed as for a new mapping, so a restored
        runner agrees) and act with their new module from their next action on.
        Their open transitions and the rows of their trajectories not yet
        returned by :meth:`sample` were collected with ``module_id`` and are
        dropped: they would train a module that no longer exists, and the new
        module did not choose those actions (PPO needs its own log-probabilities).
        Their episode returns keep counting: an agent's return covers its whole
        episode and is reported under the module it ends with.

        The new mappings are computed here, before anything changes (the
        removal applies exactly them, even for a mapping function that draws
        at random).

        Raises:
            ValueError: ``config``'s mapping maps an agent of an episode in
                flight to ``module_id`` or to no module (nothing is changed then;
                pass a mapping that leaves ``module_id`` out).
        """
        mapping_fn = self._resolve_mapping(config)
        remaining = tuple(m for m in self.module if m != module_id)
        remapped: dict[tuple[int, str], str] = {}
        for e, mapping in enumerate(self._mappings):
            for agent, m in mapping.items():
                if m == module_id:
                    try:
                        remapped[(e, agent)] = self._map_agent(e, agent, mapping_fn, remaining)
                    except ValueError as error:
                        raise ValueError(
                            f"Module {module_id!r} cannot be removed: agent {agent!r} of the episode in flight in env "
                            f"copy {e} acts with it and must be re-mapped, but {error} Pass a "
                            "new_agent_to_module_mapping_fn that maps agents to the remaining modules."
                        ) from error
        return ModuleRemoval(module_id, config, remapped=remapped, mapping_fn=mapping_fn)

    def _apply_removal(self, removal: ModuleRemoval) -> None:
        """Re-map the agents as planned, drop the removed module's open rows, then forget the module."""
        module_id = removal.module_id
        for (e, agent), new_module in removal.remapped.items():
            self._mappings[e][agent] = new_module
            self._pending[e].pop(agent, None)
        # Empty between sample() calls (trajectories live within one); the removed module's rows never reach _collect.
        self._open = {key: t for key, t in self._open.items() if t.module_id != module_id}
        self._closed = [t for t in self._closed if t.module_id != module_id]
        super()._apply_removal(removal)
        self._mapping_fn = removal.mapping_fn
        self.policy_mapping = self._static_mapping()

    # ------------------------------------------------------------------ sampling

    def _forward(
        self, filtered: npt.NDArray[np.float32], modules: list[str]
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        count = len(modules)
        if isinstance(self.action_space, gym.spaces.Discrete):
            actions: npt.NDArray[Any] = np.zeros(count, dtype=np.int64)
        else:
            actions = np.zeros((count, *(self.action_space.shape or ())), dtype=np.float32)
        logp = np.zeros(count, dtype=np.float32)
        values = np.zeros(count, dtype=np.float32)
        obs = torch.from_numpy(filtered)
        chosen = np.asarray(modules)
        for module_id in self.module:  # a fixed order: the action RNG is drawn module by module
            rows = np.flatnonzero(chosen == module_id)
            if rows.size:
                out = self.module[module_id].forward_exploration({"obs": obs[rows]}, generator=self._generator)
                actions[rows] = out["actions"].numpy()
                logp[rows] = out["action_logp"].numpy()
                values[rows] = out["vf_preds"].numpy()
        return actions, logp, values

    def _final_value(self, module_id: str, final_obs: Any) -> float:
        raw = np.asarray(final_obs, dtype=np.float32)[None]
        filtered = self.env_to_module(raw, update=False)
        return float(self.module[module_id].compute_values({"obs": torch.from_numpy(filtered)})[0])

    def _complete(self, env_index: int, agent: str, *, terminated: bool, truncated: bool, final_vf: float) -> None:
        """Turn the agent's open transition into a row of its trajectory."""
        pending = self._pending[env_index].pop(agent)
        key = (env_index, agent)
        trajectory = self._open.get(key)
        if trajectory is None:
            trajectory = self._open[key] = _Trajectory(self._mappings[env_index][agent])
        trajectory.rows.append(
            (
                pending["obs"],
                pending["action"],
                float(pending["logp"]),
                float(pending["vf"]),
                float(pending["reward"]),
                terminated,
                truncated,
                final_vf,
            )
        )
        if terminated or truncated:
            self._closed.append(self._open.pop(key))

    def _step_env(self, env_index: int, actions: dict[str, Any]) -> int:
        """Step copy ``env_index``; close what ended; reset it if its episode ended. Returns episodes ended."""
        env = self.envs[env_index]
        obs, rewards, terminateds, truncateds, _ = env.step(actions)
        pending = self._pending[env_index]
        returns = self._agent_returns[env_index]
        for agent, reward in rewards.items():
            returns[agent] = returns.get(agent, 0.0) + float(reward)
            if agent in pending:
                pending[agent]["reward"] += float(reward)
        all_terminated = bool(terminateds.get(ALL_AGENTS, False))
        all_done = all_terminated or bool(truncateds.get(ALL_AGENTS, False))
        candidates = [*pending, *[a for a in (*terminateds, *truncateds) if a != ALL_AGENTS and a not in pending]]
        ended: list[str] = []
        for agent in dict.fromkeys(candidates):
            terminated = all_terminated or bool(terminateds.get(agent, False))
            truncated = not terminated and (all_done or bool(truncateds.get(agent, False)))
            if not (terminated or truncated):
                continue
            ended.append(agent)
            if agent in pending:
                final_vf = 0.0
                if truncated and agent in obs:
                    final_vf = self._final_value(self._mappings[env_index][agent], obs[agent])
                self._complete(env_index, agent, terminated=terminated, truncated=truncated, final_vf=final_vf)
            if agent in self._agent_steps[env_index]:
                self._agent_episode_hook("on_episode_end", env_index, agent, done=True)
                self._record_episode(
                    returns.get(agent, 0.0), self._agent_steps[env_index].pop(agent), self._mappings[env_index][agent]
                )
            returns.pop(agent, None)
        if all_done:
            for agent in list(pending):  # an agent the env forgot to end
                self._complete(env_index, agent, terminated=all_terminated, truncated=not all_terminated, final_vf=0.0)
            self._episode_numbers[env_index] += 1
            self._mappings[env_index] = {}
            self._agent_returns[env_index] = {}
            self._agent_steps[env_index] = {}
            next_obs, _ = env.reset()
            self._obs_dicts[env_index] = dict(next_obs)
        else:
            self._obs_dicts[env_index] = {agent: o for agent, o in obs.items() if agent not in ended}
        return len(ended)

    def sample(self) -> dict[str, SampleBatch]:
        """Step every env copy ``rollout_length`` times.

        Returns:
            Module id -> the module's completed transitions, as a
            :data:`~cairn.rl.env.env_runner.SampleBatch` of shape ``[T, 1, ...]``
            (see the module docstring); modules without one are left out.
        """
        self._begin_sample()
        self._episodes_this_iteration = 0
        self.last_episodes = []
        agent_steps = 0
        for _ in range(int(self.config.rollout_length)):
            acting = [(e, agent) for e in range(self.num_envs) for agent in self._obs_dicts[e]]
            actions_per_env: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
            if acting:
                raw = np.stack([np.asarray(self._obs_dicts[e][agent], dtype=np.float32) for e, agent in acting])
                filtered = self.env_to_module(raw, update=True)
                modules = [self._module_for(e, agent) for e, agent in acting]
                actions, logp, values = self._forward(filtered, modules)
                env_actions = self.module_to_env(actions, update=True)
                for i, (e, agent) in enumerate(acting):
                    if agent in self._pending[e]:
                        self._complete(e, agent, terminated=False, truncated=False, final_vf=0.0)
                    self._pending[e][agent] = {
                        "obs": filtered[i],
                        "action": np.asarray(actions[i]),
                        "logp": float(logp[i]),
                        "vf": float(values[i]),
                        "reward": 0.0,
                    }
                    if agent not in self._agent_steps[e]:  # the agent's first action of this episode
                        self._agent_steps[e][agent] = 0
                        self._agent_episode_hook("on_episode_start", e, agent, done=False)
                    self._agent_steps[e][agent] += 1
                    env_action = env_actions[i]
                    actions_per_env[e][agent] = int(env_action) if np.ndim(env_action) == 0 else env_action
            for e in range(self.num_envs):
                self._step_env(e, actions_per_env[e])
            if self._step_hook:
                for e, agent in acting:
                    if agent in self._agent_steps[e]:  # its episode goes on
                        self._agent_episode_hook("on_episode_step", e, agent, done=False)
            agent_steps += len(acting)
            self.num_env_steps_sampled_lifetime += self.num_envs
            self.num_agent_steps_sampled_lifetime += len(acting)
        self._last_agent_steps = agent_steps
        batches = self._collect()
        self._end_sample(batches, agent_steps=agent_steps)
        return batches

    def _agent_episode_hook(self, hook: str, env_index: int, agent: str, *, done: bool) -> None:
        """Call the callbacks' ``hook`` for one agent's episode in env copy ``env_index``.

        As the metrics do, each agent's part of a game is an episode of its own: it
        starts with the agent's first action and ends when the agent is done.
        """
        if not self._episode_hooks:  # no callback overrides an episode hook
            return
        episode = self._agent_episodes.get((env_index, agent))
        if episode is None:  # its custom_data lives until the agent's episode ends (and in checkpoints)
            episode = SingleAgentEpisode(
                f"{self.worker_index}-{env_index}-{self._episode_numbers[env_index]}-{agent}",
                env_index=env_index,
                agent_id=agent,
                module_id=self._mappings[env_index][agent],
                keep_history=False,
            )
            self._agent_episodes[(env_index, agent)] = episode
        episode.module_id = self._mappings[env_index][agent]
        episode.set_summary(
            episode_return=float(self._agent_returns[env_index].get(agent, 0.0)),
            length=int(self._agent_steps[env_index].get(agent, 0)),
            is_done=done,
        )
        getattr(self.callbacks, hook)(
            episode=episode,
            env_runner=self,
            metrics_logger=self.metrics,
            env=self.envs[env_index],
            env_index=env_index,
            rl_module=self.module,
        )
        if done:
            del self._agent_episodes[(env_index, agent)]

    def _collect(self) -> dict[str, SampleBatch]:
        """The rows completed so far, per module; open trajectories end in a cut with their bootstrap value."""
        per_module: dict[str, list[_Row]] = {}
        trajectories = [*self._closed, *self._open.values()]
        for (env_index, agent), trajectory in self._open.items():
            if trajectory.rows:
                # The agent acted again (that completed its last row): bootstrap from that value.
                obs, action, logp, vf, reward, _, _, _ = trajectory.rows[-1]
                bootstrap = float(self._pending[env_index][agent]["vf"])
                trajectory.rows[-1] = (obs, action, logp, vf, reward, False, True, bootstrap)
        for trajectory in trajectories:
            per_module.setdefault(trajectory.module_id, []).extend(trajectory.rows)
        self._closed = []
        self._open = {}
        batches: dict[str, SampleBatch] = {}
        for module_id in self.module:
            rows = per_module.get(module_id)
            if not rows:
                continue
            column = list(zip(*rows, strict=True))
            batches[module_id] = {
                "obs": np.stack(column[0]).astype(np.float32)[:, None],
                "actions": np.stack(column[1])[:, None],
                "action_logp": np.asarray(column[2], dtype=np.float32)[:, None],
                "vf_preds": np.asarray(column[3], dtype=np.float32)[:, None],
                "rewards": np.asarray(column[4], dtype=np.float64)[:, None],
                "terminateds": np.asarray(column[5], dtype=np.bool_)[:, None],
                "truncateds": np.asarray(column[6], dtype=np.bool_)[:, None],
                "final_vf": np.asarray(column[7], dtype=np.float32)[:, None],
                "bootstrap_vf": np.zeros(1, dtype=np.float32),
            }
        return batches

    def _agent_steps_of_last_sample(self) -> int:
        return self._last_agent_steps

    # ------------------------------------------------------------------ Checkpointable

    def _env_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"saved": self.env_state_saved, "env": self.config.env, "num_envs": self.num_envs}
        if self.env_state_saved:
            state["sub_envs"] = [get_env_state(env) for env in self.envs]
            state["episodes"] = [
                {
                    "number": self._episode_numbers[e],
                    "obs": {agent: np.array(o, copy=True) for agent, o in self._obs_dicts[e].items()},
                    "mapping": dict(self._mappings[e]),
                    "pending": {
                        agent: {
                            "obs": np.array(p["obs"], copy=True),
                            "action": np.array(p["action"], copy=True),
                            "logp": p["logp"],
                            "vf": p["vf"],
                            "reward": p["reward"],
                        }
                        for agent, p in self._pending[e].items()
                    },
                    "returns": dict(self._agent_returns[e]),
                    "steps": dict(self._agent_steps[e]),
                }
                for e in range(self.num_envs)
            ]
            state["episode_api"] = agent_episodes_state(self._agent_episodes)  # custom_data of episodes in flight
        return state

    def _set_env_state(self, env_state: Mapping[str, Any]) -> None:
        episodes = list(env_state.get("episodes", ()))
        sub_states = list(env_state.get("sub_envs", ()))
        fits = (
            bool(env_state.get("saved"))
            and self.env_state_saved
            and env_state.get("env") == self.config.env
            and int(env_state.get("num_envs", -1)) == self.num_envs
            and len(episodes) == self.num_envs
            and len(sub_states) == self.num_envs
            and all(env_state_mismatch(env, sub) is None for env, sub in zip(self.envs, sub_states, strict=True))
            and all(
                isinstance(ep, Mapping) and all(m in self.module for m in dict(ep.get("mapping", {})).values())
                for ep in episodes
            )
        )
        if not fits:
            self.episodes_restarted = True
            return
        for env, sub_state in zip(self.envs, sub_states, strict=True):
            set_env_state(env, sub_state)
        for e, episode in enumerate(episodes):
            self._episode_numbers[e] = int(episode["number"])
            self._obs_dicts[e] = {str(agent): np.array(o, copy=True) for agent, o in episode["obs"].items()}
            self._mappings[e] = {str(agent): str(m) for agent, m in episode["mapping"].items()}
            self._pending[e] = {
                str(agent): {
                    "obs": np.array(p["obs"], dtype=np.float32, copy=True),
                    "action": np.array(p["action"], copy=True),
                    "logp": float(p["logp"]),
                    "vf": float(p["vf"]),
                    "reward": float(p["reward"]),
                }
                for agent, p in episode["pending"].items()
            }
            self._agent_returns[e] = {str(agent): float(r) for agent, r in episode["returns"].items()}
            self._agent_steps[e] = {str(agent): int(n) for agent, n in episode["steps"].items()}
        self._agent_episodes = agent_episodes_from_state(env_state.get("episode_api", []))
        self.episodes_restarted = False

    def close(self) -> None:
        """Close the environments."""
        for env in self.envs:
            env.close()
