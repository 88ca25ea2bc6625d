"""PettingZoo's parallel API as a :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv` (RLlib's adapter).

A PettingZoo ``ParallelEnv`` already speaks in agent dicts; the adapter adds
what the MultiAgentEnv interface has beyond it: ``"__all__"`` in
``terminateds``/``truncateds`` (set when no agent is left), the
``observation_spaces``/``action_spaces`` dicts, and ``possible_agents``.
Name a wrapped env in a config through :func:`~cairn.rl.env.multi_agent_env.register_env`::

    from pettingzoo.classic import rps_v2
    from cairn.rl.env.multi_agent_env import register_env
    from cairn.rl.env.pettingzoo_env import ParallelPettingZooEnv

    register_env("rps", lambda env_config: ParallelPettingZooEnv(rps_v2.parallel_env(**env_config)))
    config = PPOConfig(env="rps", ...)

This module does not import PettingZoo (``pip install 'cairn-rl[rl]'`` brings
it); the wrapped env is used through its methods.

Exact resume. A PettingZoo env exposes no state, but its episodes are
reproducible: the same reset seed and the same actions give the same
episode (PettingZoo's own ``seed_test`` checks it). So the adapter seeds every
reset itself, with a seed drawn from its ``np_random`` (which cairn saves), and
its saved state is the running episode's seed and the actions taken in it; a
restore resets the wrapped env with that seed and replays the actions. A
checkpoint therefore resumes mid-episode, bit for bit, for any game whose
dynamics depend only on its seed and the actions (true of PettingZoo's shipped
games). A restore costs replaying at most one episode per env copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rl.env.env_state import register_env_state_handler
from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv
from cairn.state_checks import Count

_SEED = Count(high=2**31 - 1)
"""An episode's seed (what ``reset(seed=)`` takes from a saved episode)."""

__all__ = ["ParallelPettingZooEnv"]


class ParallelPettingZooEnv(MultiAgentEnv):
    """A PettingZoo ``ParallelEnv`` with the MultiAgentEnv interface.

    Args:
        env: The PettingZoo parallel environment (``pettingzoo.ParallelEnv``).

    Raises:
        TypeError: ``env`` lacks the parallel API (``possible_agents``,
            ``observation_space(agent)``, ``action_space(agent)``, ``reset``, ``step``).
    """

    def __init__(self, env: Any) -> None:
        missing = [
            name
            for name in ("possible_agents", "observation_space", "action_space", "reset", "step")
            if not hasattr(env, name)
        ]
        if missing:
            raise TypeError(
                f"ParallelPettingZooEnv wraps a PettingZoo ParallelEnv; {type(env).__qualname__} has no {missing}. "
                "For an AEC env, convert it first: pettingzoo.utils.conversions.aec_to_parallel(env)."
            )
        self.par_env = env
        self.possible_agents = [str(agent) for agent in env.possible_agents]
        self.observation_spaces = {agent: env.observation_space(agent) for agent in self.possible_agents}
        self.action_spaces = {agent: env.action_space(agent) for agent in self.possible_agents}
        self.agents = []
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self._episode_seed: int | None = None
        self._episode_actions: list[dict[str, Any]] = []
        self._replayable = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset the wrapped env with a seed drawn from this adapter's ``np_random``.

        ``seed`` seeds ``np_random`` (as for any gymnasium env); without it the
        adapter's generator goes on. Either way the wrapped env gets an explicit
        seed, so that the episode can be replayed (see the module docs).
        """
        gym.Env.reset(self, seed=seed)
        episode_seed = int(self.np_random.integers(2**31))
        obs, infos = self.par_env.reset(seed=episode_seed, options=options)
        self._episode_seed = episode_seed
        self._episode_actions = []
        self._replayable = options is None  # options can be anything: they are not saved
        self.agents = list(self.par_env.agents)
        return dict(obs), dict(infos)

    def step(  # type: ignore[override]  # MultiAgentEnv's dict signature
        self, action_dict: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        """Step the wrapped env; ``"__all__"`` is set once no agent is left."""
        self._episode_actions.append({str(agent): np.array(action, copy=True) for agent, action in action_dict.items()})
        obs, rewards, terminateds, truncateds, infos = self.par_env.step(dict(action_dict))
        self.agents = list(self.par_env.agents)
        terminateds, truncateds = dict(terminateds), dict(truncateds)
        over = not self.agents
        # PettingZoo ends an episode by removing every agent; all terminated is a game's end, else a cut.
        all_terminated = over and bool(terminateds) and all(bool(v) for v in terminateds.values())
        terminateds[ALL_AGENTS] = all_terminated
        truncateds[ALL_AGENTS] = over and not all_terminated
        return dict(obs), dict(rewards), terminateds, truncateds, dict(infos)

    def close(self) -> None:
        """Close the wrapped env."""
        self.par_env.close()

    def get_episode_state(self) -> dict[str, Any]:
        """The running episode as its reset seed and the actions taken since (the saved env state).

        Raises:
            ValueError: The episode was reset with ``options``, which cannot be saved.
        """
        if self._episode_seed is None or not self._replayable:
            raise ValueError(
                f"The episode of {type(self.par_env).__qualname__} cannot be saved: it was "
                + ("never reset." if self._episode_seed is None else "reset with options, which are not saved.")
            )
        return {"seed": self._episode_seed, "actions": [dict(step) for step in self._episode_actions]}

    def set_episode_state(self, state: Any) -> None:
        """Replay a state from :meth:`get_episode_state`: reset with its seed, then take its actions.

        Each step's actions are checked first (the agents alive then, each action in its
        agent's space): the state may come from a file.

        Raises:
            ValueError: The state does not describe an episode of this environment.
        """
        where = f"the saved episode of {type(self.par_env).__qualname__}"
        if not isinstance(state, Mapping) or not _SEED.fits(state.get("seed")):
            raise ValueError(
                f"{where} has no int 'seed' from 0 to 2**31 - 1; the checkpoint was written by other code."
            )
        seed, actions = int(state["seed"]), state.get("actions")
        if not isinstance(actions, list):
            raise ValueError(f"{where} has no list of actions; the checkpoint was written by other code.")
        self.par_env.reset(seed=seed)
        self.agents = list(self.par_env.agents)
        self._episode_seed, self._episode_actions, self._replayable = seed, [], True
        for number, step in enumerate(actions):
            if not isinstance(step, Mapping) or set(step) != set(self.agents):
                acting = sorted(map(str, step))[:8] if isinstance(step, Mapping) else type(step).__name__
                raise ValueError(
                    f"{where}: step {number} acts for {acting}, but the agents then are {self.agents}. "
                    "The checkpoint does not fit this environment."
                )
            for agent, action in step.items():
                space = self.action_spaces[agent]
                if not space.contains(np.asarray(action).astype(space.dtype)):
                    raise ValueError(
                        f"{where}: step {number} gives {agent!r} the action {action!r:.80}, outside {space}."
                    )
            self.step(dict(step))  # records the step again


register_env_state_handler(
    ParallelPettingZooEnv,
    lambda env: env.get_episode_state(),
    lambda env, state: env.set_episode_state(state),
)
