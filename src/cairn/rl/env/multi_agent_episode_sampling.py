"""RLlib's episode-returning ``MultiAgentEnvRunner.sample(num_timesteps=, num_episodes=, ...)``.

cairn's multi-agent runner samples the algorithm's batches (``sample()`` without
arguments). Called the RLlib way, with a count or one of RLlib's options, it hands the
call to a :class:`MultiAgentEpisodeSampler`: env copies of its own (as
:class:`~cairn.rl.env.single_agent_env_runner.SingleAgentEnvRunner` has), the runner's
modules and policy mapping, and :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode`
results, one per game: finished games first, then the chunks of the games still running
(their ``env_t_started`` continues the earlier chunk and each agent's chunk is a ``cut()``
of its earlier one). Each step, the agents the env gave an observation act; an agent that
acted and gets no observation in the next step keeps its action (and the rewards it gets
meanwhile) until its next observation, as RLlib's episodes do with a hanging action; rewards
an agent gets before its first observation go into its first step's reward.

What differs from RLlib (docs/rllib_parity.md): its episodes in flight are not part of the
runner's checkpoint; modules act on the raw observations (the connector pipelines and
stateful modules are the batch sampler's); steps are counted per env step
(``count_steps_by="env_steps"``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.env.episode_sampling import RunnerEpisode, act, env_action, sample_plan
from cairn.rl.env.multi_agent_env import ALL_AGENTS, AgentID, EpisodeInfo, MultiAgentEnv, make_multi_agent_env
from cairn.rl.env.multi_agent_episode import MultiAgentEpisode

__all__ = ["MultiAgentEpisodeSampler"]

MapAgent = Callable[[AgentID, EpisodeInfo], str]
"""``(agent id, episode) -> module id``, checked (the runner's mapping and its space check)."""


class _Game:
    """One env copy's game in flight: its episode chunk, hanging actions and early rewards."""

    def __init__(self, episode: MultiAgentEpisode, number: int) -> None:
        self.episode = episode
        self.number = number
        self.observations: dict[AgentID, Any] = {}
        self.hanging: dict[AgentID, tuple[Any, dict[str, Any]]] = {}
        self.rewards: defaultdict[AgentID, float] = defaultdict(float)
        self.done_agents: set[AgentID] = set()


class MultiAgentEpisodeSampler:
    """Samples ``MultiAgentEpisode`` s from env copies of its own (see the module docstring).

    Args:
        config: The runner's config (``env``, ``env_config``, ``num_envs_per_env_runner``,
            ``rollout_length``, ``seed``, ``explore``).
        module: The runner's modules now (each :meth:`sample` call gives them again: modules come
            and go); a stateful one is refused when it acts.
        map_agent: The runner's policy mapping, checked against the agents' spaces.
        worker_index: The runner's index (seeds differ per index).
    """

    def __init__(self, config: AlgorithmConfig, module: MultiRLModule, map_agent: MapAgent, worker_index: int) -> None:
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
        game = _Game(MultiAgentEpisode(f"{self.worker_index}-{index}-{self._numbers}"), self._numbers)
        obs, infos = self.envs[index].reset(seed=self._env_seed + self._numbers)
        game.observations = dict(obs)
        for agent, observation in obs.items():
            self._start_agent(game, index, agent, observation, dict(infos.get(agent, {})))
        return game

    def _start_agent(self, game: _Game, index: int, agent: AgentID, observation: Any, info: dict[str, Any]) -> None:
        seed = np.random.SeedSequence([int(self.config.seed), 4099, self.worker_index, game.number]).generate_state(1)
        info_for_mapping = EpisodeInfo(
            id_=game.episode.id_,
            seed=int(seed[0]),
            env_index=index,
            worker_index=self.worker_index,
            module_ids=tuple(self.module.keys()),
        )
        game.episode.agent_episodes[agent] = RunnerEpisode(
            game.episode.id_,
            observation=observation,
            info=info,
            t_started=0,
            env_index=index,
            agent_id=agent,
            module_id=self.map_agent(agent, info_for_mapping),
        )

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
        steps, episodes_wanted = sample_plan(self.config, self.num_envs, num_timesteps, num_episodes)
        explore = bool(self.config.explore) if explore is None else bool(explore)
        if episodes_wanted is not None or force_reset or not self._games:
            self._games = [self._new_game(i) for i in range(self.num_envs)]
        done: list[MultiAgentEpisode] = []
        taken = 0
        while (episodes_wanted is None and taken < int(steps or 0)) or (
            episodes_wanted is not None and len(done) < episodes_wanted
        ):
            for index in range(self.num_envs):
                self._step(index, done, explore=explore, random_actions=random_actions)
            taken += self.num_envs
        if episodes_wanted is not None:
            self._games = []  # RLlib: timesteps after episodes start from a reset
            return done[:episodes_wanted]
        running = [game.episode for game in self._games if len(game.episode) > 0]
        for game in self._games:
            if len(game.episode) > 0:
                game.episode = self._continuation(game.episode)
        return done + running

    @staticmethod
    def _continuation(episode: MultiAgentEpisode) -> MultiAgentEpisode:
        successor = MultiAgentEpisode(episode.id_, env_t_started=episode.env_t)
        successor.agent_episodes = {
            agent: chunk.cut() for agent, chunk in episode.agent_episodes.items() if not chunk.is_done
        }
        return successor

    def _actions(
        self, game: _Game, index: int, *, explore: bool, random_actions: bool
    ) -> dict[AgentID, tuple[Any, dict[str, Any]]]:
        """The action (and module outputs) of each agent the env gave an observation."""
        acting = [agent for agent in game.observations if agent not in game.done_agents]
        out: dict[AgentID, tuple[Any, dict[str, Any]]] = {}
        by_module: defaultdict[str, list[AgentID]] = defaultdict(list)
        for agent in acting:
            by_module[str(game.episode.agent_episodes[agent].module_id)].append(agent)
        for module_id, agents in by_module.items():
            if random_actions:
                for agent in agents:
                    space = self.envs[index].get_action_space(agent)
                    space.seed(int(self._rng.integers(2**31)))
                    out[agent] = (space.sample(), {})
                continue
            observations = [game.observations[agent] for agent in agents]
            actions, rows = act(self.module, module_id, observations, explore=explore, generator=self._generator)
            for agent, action, row in zip(agents, actions, rows, strict=True):
                out[agent] = (action, row)
        return out

    def _step(self, index: int, done: list[MultiAgentEpisode], *, explore: bool, random_actions: bool) -> None:
        game = self._games[index]
        env = self.envs[index]
        acted = self._actions(game, index, explore=explore, random_actions=random_actions)
        for agent, pair in acted.items():
            game.hanging[agent] = pair
        env_actions = {agent: env_action(env.get_action_space(agent), action) for agent, (action, _) in acted.items()}
        obs, rewards, terminateds, truncateds, infos = env.step(env_actions)
        game.episode.add_env_step()
        for agent, reward in rewards.items():
            game.rewards[agent] += float(reward)
        for agent, observation in obs.items():
            info = dict(infos.get(agent, {}))
            chunk = game.episode.agent_episodes.get(agent)
            if agent not in game.hanging:  # a first observation (the agent joins the game)
                if chunk is None:
                    self._start_agent(game, index, agent, observation, info)
                continue
            action, outputs = game.hanging.pop(agent)
            assert isinstance(chunk, RunnerEpisode)  # an agent with a hanging action has acted: it has one
            chunk.record(
                observation,
                action,
                game.rewards.pop(agent, 0.0),
                info,
                terminated=bool(terminateds.get(agent, False)),
                truncated=bool(truncateds.get(agent, False)),
                outputs=outputs,
            )
            if chunk.is_done:
                game.done_agents.add(agent)
        for agent, chunk in game.episode.agent_episodes.items():  # an agent that ended without an observation
            if agent not in obs and (terminateds.get(agent, False) or truncateds.get(agent, False)):
                game.done_agents.add(agent)
                game.hanging.pop(agent, None)
                chunk.is_terminated = chunk.is_terminated or bool(terminateds.get(agent, False))
                chunk.is_truncated = chunk.is_truncated or bool(truncateds.get(agent, False))
        game.observations = dict(obs)
        if terminateds.get(ALL_AGENTS, False) or truncateds.get(ALL_AGENTS, False):
            game.episode.is_terminated = bool(terminateds.get(ALL_AGENTS, False))
            game.episode.is_truncated = not game.episode.is_terminated
            done.append(game.episode)
            self._games[index] = self._new_game(index)
