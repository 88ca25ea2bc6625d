"""RLlib's episode-returning ``MultiAgentEnvRunner.sample(num_timesteps=, num_episodes=, ...)``.

cairn's multi-agent runner samples the algorithm's batches with ``sample_batches()``.
Its ``sample(...)`` is RLlib's (bare, too: ``rollout_fragment_length`` steps per env copy)
and hands the call to a :class:`MultiAgentEpisodeSampler`: env copies of its own (as
:class:`~cairn.rl.env.single_agent_env_runner.SingleAgentEnvRunner` has), the runner's
modules and policy mapping, and :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode`
results, one per game: finished games first, then the chunks of the games still running
(``MultiAgentEpisode.cut()``: their ``env_t_started`` continues the earlier chunk). Each
step, the running agents the env gave an observation act, and the episode records the
step by RLlib's rules (hanging actions and rewards, see
:mod:`~cairn.rl.env.multi_agent_episode`). When a callback overrides an episode hook, the hooks
are called per game as RLlib's ``sample()`` calls them (``on_episode_end`` gets the game's earlier
chunks as ``prev_episode_chunks``).

Connector pipelines as RLlib's: each module's env-to-module pipeline runs on its agents' observations
after the reset and after every round of steps (all env copies at once, also for random actions, with
``explore`` and the running episodes), and once more on the last observations of a game that ended
(RLlib's postprocessing of done episodes); the module acts on what it gives, and its module-to-env
pipeline turns the module's actions into the env's (not for random actions). The pipelines are the
sampler's own, built as the batch sampler's are (:meth:`~cairn.rl.env.multi_agent_pipelines.
MultiAgentRunnerPipelines._episode_api_pipelines`).

What differs from RLlib (docs/rllib_parity.md): its episodes in flight are not part of the
runner's checkpoint; one pipeline per module (cairn's multi-agent layout), so a pipeline gets the rows
of its module's agents; stateful modules are the batch sampler's. Steps are env steps, or agent steps with
``count_steps_by="agent_steps"`` (then at most ``num_timesteps`` rounds of env steps).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.env.episode_sampling import act, env_action, sample_plan
from cairn.rl.env.module_pipelines import ModulePipelines
from cairn.rl.env.multi_agent_env import AgentID, EpisodeInfo, MultiAgentEnv, make_multi_agent_env
from cairn.rl.env.multi_agent_episode import MultiAgentEpisode
from cairn.rl.utils.nested import index_rows, stack_rows

__all__ = ["MultiAgentEpisodeSampler"]

MapAgent = Callable[[AgentID, EpisodeInfo], str]
"""``(agent id, episode) -> module id``, checked (the runner's mapping and its space check)."""


EpisodeHook = Callable[..., None]
"""``hook(name, episode, env, env_index, **extra)``: calls the callbacks' episode hook ``name``."""

PipelinesFactory = Callable[[MultiRLModule], tuple[ModulePipelines, ModulePipelines]]
"""``modules -> (env_to_module, module_to_env)``: new pipelines, one per module."""


class _Game:
    """One env copy's game in flight: its episode chunk, the observations its agents act on next, and the
    chunks of it earlier calls returned (``on_episode_end``'s ``prev_episode_chunks``)."""

    def __init__(self, episode: MultiAgentEpisode, observations: dict[AgentID, Any]) -> None:
        self.episode = episode
        self.observations = observations
        self.chunks: list[MultiAgentEpisode] = []
        self.to_module: dict[AgentID, Any] = {}
        """Agent -> the env-to-module pipeline's output for its next action."""
        self.acted: set[AgentID] = set()
        """The agents that acted in this game (for the others, the observation starts their episode)."""


class MultiAgentEpisodeSampler:
    """Samples ``MultiAgentEpisode`` s from env copies of its own (see the module docstring).

    Args:
        config: The runner's config (``env``, ``env_config``, ``num_envs_per_env_runner``,
            ``rollout_length``, ``seed``, ``explore``).
        module: The runner's modules now (each :meth:`sample` call gives them again: modules come
            and go); a stateful one is refused when it acts.
        map_agent: The runner's policy mapping, checked against the agents' spaces.
        worker_index: The runner's index (seeds differ per index).
        hook: Calls the callbacks' episode hooks (RLlib's ``sample()`` calls them per game), or None
            when no callback overrides one.
        pipelines: Builds the sampler's connector pipelines for the modules (again when they change).
        metrics: The runner's ``MetricsLogger`` (the connector pieces get it).
    """

    def __init__(
        self,
        config: AlgorithmConfig,
        module: MultiRLModule,
        map_agent: MapAgent,
        worker_index: int,
        hook: EpisodeHook | None = None,
        *,
        pipelines: PipelinesFactory,
        metrics: Any,
    ) -> None:
        self.hook = hook
        self.metrics = metrics
        self._build_pipelines = pipelines
        self._pipelines: tuple[ModulePipelines, ModulePipelines] | None = None
        self._slot_numbers: dict[tuple[type, AgentID], int] = {}
        self.config = config
        self.module = module
        self.map_agent = map_agent
        self.worker_index = int(worker_index)
        self.num_envs = int(config.num_envs_per_env_runner)
        self.envs: list[MultiAgentEnv] = [
            make_multi_agent_env(config.env, config.env_config) for _ in range(self.num_envs)
        ]
        seeds = np.random.SeedSequence([int(config.seed), 4099, self.worker_index]).generate_state(3)
        self._env_seed = int(seeds[0])
        self._generator = torch.Generator().manual_seed(int(seeds[1]))
        self._rng = np.random.default_rng(int(seeds[2]))
        self._games: list[_Game] = []
        self._numbers = 0

    def _new_game(self, index: int) -> _Game:
        self._numbers += 1
        number = self._numbers
        seed = np.random.SeedSequence([int(self.config.seed), 4099, self.worker_index, number]).generate_state(1)
        info = EpisodeInfo(
            id_=f"{self.worker_index}-{index}-{number}",
            seed=int(seed[0]),
            env_index=index,
            worker_index=self.worker_index,
            module_ids=tuple(self.module.keys()),
        )
        env = self.envs[index]

        def mapping(agent: AgentID, episode: MultiAgentEpisode) -> str:
            return self.map_agent(agent, info)

        episode = MultiAgentEpisode(
            info.id_,
            observation_space=getattr(env, "observation_space", None),
            action_space=getattr(env, "action_space", None),
            agent_to_module_mapping_fn=mapping,
        )
        if self.hook is not None:
            self.hook("on_episode_created", episode, env, index)
        obs, infos = env.reset(seed=self._env_seed + number)
        episode.add_env_reset(observations=obs, infos=infos)
        if self.hook is not None:
            self.hook("on_episode_start", episode, env, index)
        return _Game(episode, dict(obs))

    def sample(
        self,
        module: MultiRLModule,
        *,
        num_timesteps: int | None,
        num_episodes: int | None,
        explore: bool | None,
        random_actions: bool,
        force_reset: bool,
    ) -> list[MultiAgentEpisode]:
        """RLlib's ``sample``: env steps (over all copies) or finished episodes (all started anew).

        Raises:
            SampleRequestError: Both counts given, or a negative one.
        """
        self.module = module
        if self._pipelines is None or list(self._pipelines[0]) != list(module.keys()):  # modules came or went
            self._pipelines = self._build_pipelines(module)
        steps, episodes_wanted = sample_plan(self.config, self.num_envs, num_timesteps, num_episodes)
        explore = bool(self.config.explore) if explore is None else bool(explore)
        if episodes_wanted is not None or force_reset or not self._games:
            self._games = [self._new_game(i) for i in range(self.num_envs)]
            self._run_env_to_module(explore=explore)
        done: list[MultiAgentEpisode] = []
        taken = rounds = 0
        # Counting agent steps (count_steps_by), at most `steps` rounds of env steps: agents that seldom act
        # cannot make the loop endless.
        while (episodes_wanted is None and taken < int(steps or 0) and rounds < int(steps or 0)) or (
            episodes_wanted is not None and len(done) < episodes_wanted
        ):
            for index in range(self.num_envs):
                if self._games[index].episode.is_done:  # its game was the last one wanted: no new one
                    continue
                acted = self._step(
                    index, done, explore=explore, random_actions=random_actions, episodes_wanted=episodes_wanted
                )
                taken += acted if self.config.count_steps_by == "agent_steps" else 1
            rounds += 1
            self._run_env_to_module(explore=explore)  # RLlib: once per step of all env copies
        if episodes_wanted is not None:
            self._games = []  # RLlib: timesteps after episodes start from a reset
            return done[:episodes_wanted]
        running = [game.episode for game in self._games if len(game.episode) > 0]
        for game in self._games:
            if len(game.episode) > 0:
                if self.hook is not None:  # on_episode_end's prev_episode_chunks: what was returned of the game
                    game.chunks.append(game.episode)
                game.episode = game.episode.cut()
        return done + running

    def _actions(
        self, game: _Game, index: int, *, explore: bool, random_actions: bool
    ) -> dict[AgentID, tuple[Any, dict[str, Any]]]:
        """The action (and module outputs) of each running agent the env gave an observation."""
        episodes = game.episode.agent_episodes
        acting = [agent for agent in game.observations if agent in episodes and not episodes[agent].is_done]
        out: dict[AgentID, tuple[Any, dict[str, Any]]] = {}
        by_module: defaultdict[str, list[AgentID]] = defaultdict(list)
        for agent in acting:
            by_module[str(episodes[agent].module_id)].append(agent)
        for module_id, agents in by_module.items():
            if random_actions:
                for agent in agents:
                    space = self.envs[index].get_action_space(agent)
                    space.seed(int(self._rng.integers(2**31)))
                    out[agent] = (space.sample(), {})
                continue
            observations = [game.to_module[agent] for agent in agents]
            if not all(isinstance(o, np.ndarray) for o in observations):
                raise ValueError(
                    "The RLlib-API sample() feeds modules array observations only, and the env-to-module pipeline of "
                    f"module {module_id!r} gives {type(observations[0]).__name__}s: add FlattenObservations() to "
                    "env_to_module_connector, or train with the algorithm, whose runners feed Dict/Tuple observations."
                )
            actions, rows = act(self.module, module_id, observations, explore=explore, generator=self._generator)
            assert self._pipelines is not None  # sample() built them
            env_side = self._pipelines[1][module_id](
                rl_module=self.module,
                batch={"actions": actions},
                episodes=[game.episode],
                explore=explore,
                metrics=self.metrics,
                update=True,
                slots=self._slots([(index, agent) for agent in agents]),
                agent_ids=list(agents),
            )["actions"]
            for k, (agent, row) in enumerate(zip(agents, rows, strict=True)):
                out[agent] = (index_rows(env_side, k), row)
        return out

    def _slots(self, rows: list[tuple[int, AgentID]]) -> npt.NDArray[np.int64]:
        """The connectors' stable row id of each (env copy, agent): agents numbered as they first appear."""
        numbers = [self._slot_numbers.setdefault((type(a), a), len(self._slot_numbers)) for _, a in rows]
        return np.array([n * self.num_envs + index for n, (index, _) in zip(numbers, rows, strict=True)], np.int64)

    def _module_rows(self, games: list[tuple[int, _Game]], *, last: bool) -> dict[str, list[tuple[int, AgentID]]]:
        """Module id -> its agents' rows (env copy, agent) in ``games``: the agents that act next (the env gave
        them an observation and their episode runs), or with ``last`` every agent of the game."""
        rows: defaultdict[str, list[tuple[int, AgentID]]] = defaultdict(list)
        for index, game in games:
            episodes = game.episode.agent_episodes
            agents = list(episodes) if last else [a for a in game.observations if a in episodes]
            for agent in agents:
                if last or not episodes[agent].is_done:
                    rows[str(episodes[agent].module_id)].append((index, agent))
        return rows

    def _run_env_to_module(self, *, explore: bool, done: tuple[int, _Game] | None = None) -> None:
        """Run each module's env-to-module pipeline on its agents' rows: of the running games (their output is
        what the agents act on next), or of the game ``done`` that ended (its agents' last observations, RLlib's
        postprocessing of a done episode; no statistics updated)."""
        assert self._pipelines is not None  # sample() built them
        if done is None:
            games = [(i, game) for i, game in enumerate(self._games) if not game.episode.is_done]
        else:
            games = [done]
        if not games:
            return
        episodes = [game.episode for _, game in games]
        by_index = dict(games)
        for module_id, rows in self._module_rows(games, last=done is not None).items():
            if done is None:
                observations = [by_index[i].observations[a] for i, a in rows]
                starts = np.array([a not in by_index[i].acted for i, a in rows], dtype=np.bool_)
            else:
                observations = [done[1].episode.agent_episodes[a].get_observations(-1) for _, a in rows]
                starts = np.zeros(len(rows), dtype=np.bool_)
            out = self._pipelines[0][module_id](
                rl_module=self.module,
                batch={"obs": _stack(observations)},
                episodes=episodes,
                explore=explore,
                metrics=self.metrics,
                update=done is None,
                slots=self._slots(rows),
                episode_starts=starts,
                agent_ids=[a for _, a in rows],
            )["obs"]
            if done is None:
                for k, (i, agent) in enumerate(rows):
                    by_index[i].to_module[agent] = index_rows(out, k)

    def _step(
        self,
        index: int,
        done: list[MultiAgentEpisode],
        *,
        explore: bool,
        random_actions: bool,
        episodes_wanted: int | None = None,
    ) -> int:
        """Step env copy ``index`` once; returns how many agents acted (its agent steps).

        Once ``episodes_wanted`` games are done, a copy whose game ends starts no new one (RLlib's rule: it would
        never be used; the next ``sample()`` starts every copy anew)."""
        game = self._games[index]
        env = self.envs[index]
        acted = self._actions(game, index, explore=explore, random_actions=random_actions)
        env_actions = {agent: env_action(env.get_action_space(agent), action) for agent, (action, _) in acted.items()}
        obs, rewards, terminateds, truncateds, infos = env.step(env_actions)
        game.episode.add_env_step(
            obs,
            {agent: action for agent, (action, _) in acted.items()},
            rewards,
            infos,
            terminateds=terminateds,
            truncateds=truncateds,
            extra_model_outputs={agent: outputs for agent, (_, outputs) in acted.items()},
        )
        game.observations = dict(obs)
        game.acted.update(acted)
        if self.hook is not None:
            self.hook("on_episode_step", game.episode, env, index)
            if game.episode.is_done:
                self.hook("on_episode_end", game.episode, env, index, prev_episode_chunks=game.chunks)
        if game.episode.is_done:
            self._run_env_to_module(explore=explore, done=(index, game))
            done.append(game.episode)
            if episodes_wanted is None or len(done) < episodes_wanted:
                self._games[index] = self._new_game(index)
        return len(acted)


def _stack(observations: list[Any]) -> Any:
    """One batch of agents' observations: float32 rows, or gymnasium's batched dict/tuple layout."""
    if isinstance(observations[0], dict | tuple):
        return stack_rows(observations)
    return np.stack([np.asarray(o, dtype=np.float32) for o in observations])
