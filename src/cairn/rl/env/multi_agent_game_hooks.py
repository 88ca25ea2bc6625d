"""The episode hooks of the multi-agent batch sampler: once per game, as RLlib calls them.

RLlib's ``MultiAgentEnvRunner`` hands ``on_episode_created``/``_start``/``_step``/``_end``
one :class:`~cairn.rl.env.multi_agent_episode.MultiAgentEpisode` per game (per env copy's
episode): ``on_episode_created`` for the new object, ``on_episode_start`` before the game's
first step, ``on_episode_step`` after each env step (its last one too), ``on_episode_end``
after the last, with ``prev_episode_chunks`` (the chunks a ``sample()`` returned before: none
here, the episode object is the whole game).
:class:`GameEpisodes` keeps these objects for the runner's batch sampler
(:meth:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner.sample_batches`) when a
callback overrides an episode hook; each agent's part of the game is
``episode.agent_episodes[agent_id]`` (its ``agent_id``, ``module_id``, return and steps),
which is where a callback finds per-agent numbers.

The games in flight are part of the runner's checkpoint (``env/game_episodes``: one episode
state per env copy, or ``None`` where the copy's next game has not started), so that a
restored runner calls the same hooks with the same ``custom_data`` as one that never stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cairn.rl.env.multi_agent_env import AgentID
from cairn.rl.env.multi_agent_episode import MultiAgentEpisode
from cairn.state_checks import corrupt

__all__ = ["GameEpisodes"]

ModuleOf = Callable[[int, AgentID], str]
"""``(env copy, agent) -> module id`` of the copy's current game (the runner's policy mapping)."""


class GameEpisodes:
    """One :class:`MultiAgentEpisode` per env copy's game in flight, and the hooks' calls on them.

    Args:
        num_envs: How many env copies the runner steps.
        worker_index: The runner's index (part of every game id).
        module_of: The runner's policy mapping for a copy's current game.
        call_hook: ``call_hook(hook, episode, env_index, **extra)`` calls the callbacks' ``hook``.
    """

    def __init__(self, num_envs: int, worker_index: int, module_of: ModuleOf, call_hook: Callable[..., None]) -> None:
        self.worker_index = int(worker_index)
        self.module_of = module_of
        self.call_hook = call_hook
        self.episodes: list[MultiAgentEpisode | None] = [None] * int(num_envs)
        """Env copy -> its game's episode, or None before the copy's next game started."""

    def _new(self, env_index: int, number: int) -> MultiAgentEpisode:
        def mapping(agent: AgentID, episode: MultiAgentEpisode) -> str:
            return self.module_of(env_index, agent)

        return MultiAgentEpisode(f"{self.worker_index}-{env_index}-{number}", agent_to_module_mapping_fn=mapping)

    def start(self, env_index: int, number: int, observations: Mapping[AgentID, Any]) -> None:
        """Start copy ``env_index``'s game ``number`` if it has no episode yet: ``on_episode_created``, its
        reset's observations, then ``on_episode_start``."""
        if self.episodes[env_index] is not None:
            return
        episode = self.episodes[env_index] = self._new(env_index, number)
        self.call_hook("on_episode_created", episode, env_index)  # RLlib's order: before the reset's data
        episode.add_env_reset(observations=observations)
        self.call_hook("on_episode_start", episode, env_index)

    def step(
        self,
        env_index: int,
        observations: Mapping[AgentID, Any],
        actions: Mapping[AgentID, Any],
        rewards: Mapping[AgentID, Any],
        infos: Mapping[AgentID, Any],
        terminateds: Mapping[AgentID, bool],
        truncateds: Mapping[AgentID, bool],
    ) -> None:
        """Record one env step of copy ``env_index``'s game, call ``on_episode_step`` and, when the game
        ended, ``on_episode_end`` (then the copy's next game starts at its next step)."""
        episode = self.episodes[env_index]
        if episode is None:  # no hook was overridden when the game started (never: start() comes first)
            return
        episode.add_env_step(
            observations, actions, rewards, infos, terminateds=dict(terminateds), truncateds=dict(truncateds)
        )
        self.call_hook("on_episode_step", episode, env_index)
        if episode.is_done:
            self.call_hook("on_episode_end", episode, env_index, prev_episode_chunks=[])
            self.episodes[env_index] = None

    def remap(self, env_index: int, agent: AgentID, module_id: str) -> None:
        """``agent`` acts with ``module_id`` from now on in copy ``env_index``'s game (its module was removed)."""
        episode = self.episodes[env_index]
        if episode is not None:
            episode.set_module_for(agent, module_id)

    def get_state(self) -> list[dict[str, Any] | None]:
        """The games in flight: each copy's episode state, or None.

        Raises:
            TypeError: A game's ``custom_data`` is no plain data (the message names it).
        """
        return [None if episode is None else episode.get_state() for episode in self.episodes]

    def read_state(
        self, states: Any, agents: Sequence[AgentID], modules: Sequence[str], *, where: str
    ) -> list[MultiAgentEpisode | None]:
        """The episodes :meth:`get_state` recorded, checked: one entry per env copy, each a game in flight
        of this runner's agents and modules. Changes nothing.

        Raises:
            CorruptCheckpointError: Not such a list (the message names the entry).
        """
        if not isinstance(states, list | tuple) or len(states) != len(self.episodes):
            found = f"{len(states)} entries" if isinstance(states, list | tuple) else f"a {type(states).__name__}"
            raise corrupt(where, f"expected one game (or None) per env copy, {len(self.episodes)}; found {found}")
        out: list[MultiAgentEpisode | None] = []
        for env_index, state in enumerate(states):
            if state is None:
                out.append(None)
                continue
            entry = f"{where}/{env_index}"
            try:
                if not isinstance(state, Mapping):
                    raise ValueError(f"a {type(state).__name__}, not a mapping")
                episode = MultiAgentEpisode.from_state(state)
            except ValueError as err:
                raise corrupt(entry, f"is not a game's state ({err})") from err
            strangers = [a for a in episode.agent_episodes if not any(a == b and type(a) is type(b) for b in agents)]
            unknown = [m for a in episode.agent_episodes if (m := episode.module_for(a)) not in modules]
            if strangers or unknown or episode.is_done:
                raise corrupt(
                    entry,
                    f"is a game with agents {strangers!r:.80} or modules {unknown!r:.80} this runner does not have"
                    f"{' (or a game that ended)' if episode.is_done else ''}; a runner's games in flight hold only "
                    "its agents and modules",
                )
            episode.agent_to_module_mapping_fn = self._new(env_index, 0).agent_to_module_mapping_fn
            out.append(episode)
        return out
