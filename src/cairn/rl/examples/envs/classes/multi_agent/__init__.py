"""RLlib's multi-agent example environments (``ray.rllib.examples.envs.classes.multi_agent``).

``MultiAgentCartPole`` and ``MultiAgentPendulum`` are RLlib's
``make_multi_agent("CartPole-v1")`` / ``("Pendulum-v1")``: ``env_config["num_agents"]``
(default 1, as RLlib) independent copies of the gymnasium env, agent ``i`` acting in
copy ``i``. Every agent acts every step until its copy's episode ends; the episode
ends when every agent's has (RLlib's ``MultiEnv``). As in RLlib, a config names them
by class (``PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})``),
which cairn records by reference (``"cairn.rl.examples.envs.classes.multi_agent:MultiAgentCartPole"``).

Agent ids are the ints ``0``, ``1``, ... as in RLlib (a mapping function gets the int,
``agent_id % 2`` works; checkpoints keep them ints). What differs from RLlib
(docs/rllib_parity.md): each copy is seeded from the episode's seed (RLlib: every copy
with the same seed), so that the agents do not play the same game.

Their state is saved in checkpoints (a handler registered with
:func:`~cairn.rl.env.env_state.register_env_state_handler`: each copy's state as cairn
saves a gymnasium env, and which agents are done), so episodes in flight resume exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym

from cairn.rl.env.env_state import (
    env_state_mismatch,
    get_env_state,
    register_env_state_handler,
    set_env_state,
)
from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv

__all__ = ["MultiAgentCartPole", "MultiAgentPendulum", "MultiAgentSingleEnvCopies"]


class MultiAgentSingleEnvCopies(MultiAgentEnv):
    """``num_agents`` copies of the gymnasium env :attr:`ENV_ID`, one per agent (RLlib's ``make_multi_agent``).

    Args:
        config: ``num_agents`` (default 1); the other keys go to ``gymnasium.make``.
    """

    ENV_ID: ClassVar[str] = ""
    """The gymnasium id each agent's copy is made from (set by each subclass)."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        settings = dict(config or {})
        num_agents = int(settings.pop("num_agents", 1))
        if num_agents < 1:
            raise ValueError(f"{type(self).__name__} needs num_agents >= 1, got {num_agents}.")
        self.possible_agents: list[int] = list(range(num_agents))  # RLlib's ids: ints
        self.agents = list(self.possible_agents)
        self.envs = {agent: gym.make(self.ENV_ID, **settings) for agent in self.possible_agents}
        self.observation_spaces = {agent: env.observation_space for agent, env in self.envs.items()}
        self.action_spaces = {agent: env.action_space for agent, env in self.envs.items()}
        self._done: set[int] = set()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Reset every copy (each with its own seed drawn from the episode's), all agents act."""
        gym.Env.reset(self, seed=seed)
        self.agents = list(self.possible_agents)
        self._done = set()
        observations: dict[Any, Any] = {}
        infos: dict[Any, Any] = {}
        for agent, env in self.envs.items():
            observations[agent], infos[agent] = env.reset(seed=int(self.np_random.integers(2**31)), options=options)
        return observations, infos

    def step(  # type: ignore[override]  # dicts of rewards and flags, as MultiAgentEnv.step
        self, action_dict: dict[Any, Any]
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """Step the copies of the agents that act; an agent whose copy's episode ended stops acting."""
        observations: dict[Any, Any] = {}
        rewards: dict[Any, Any] = {}
        terminateds: dict[Any, Any] = {}
        truncateds: dict[Any, Any] = {}
        infos: dict[Any, Any] = {}
        for agent, action in action_dict.items():
            obs, reward, terminated, truncated, info = self.envs[agent].step(action)
            observations[agent], rewards[agent], infos[agent] = obs, float(reward), info
            terminateds[agent], truncateds[agent] = bool(terminated), bool(truncated)
            if terminated or truncated:
                self._done.add(agent)
                self.agents.remove(agent)
        # RLlib: the episode ends when every copy's has; "__all__" says how the last one ended.
        all_done = len(self._done) == len(self.possible_agents)
        terminateds[ALL_AGENTS] = all_done and not any(truncateds.values())
        truncateds[ALL_AGENTS] = all_done and any(truncateds.values())
        return observations, rewards, terminateds, truncateds, infos

    def close(self) -> None:
        """Close every copy."""
        for env in self.envs.values():
            env.close()


class MultiAgentCartPole(MultiAgentSingleEnvCopies):
    """RLlib's ``MultiAgentCartPole``: one ``CartPole-v1`` per agent."""

    ENV_ID = "CartPole-v1"


class MultiAgentPendulum(MultiAgentSingleEnvCopies):
    """RLlib's ``MultiAgentPendulum``: one ``Pendulum-v1`` per agent."""

    ENV_ID = "Pendulum-v1"


def _copies_state(env: MultiAgentSingleEnvCopies) -> dict[str, Any]:
    """Each agent's copy (in ``possible_agents`` order), which agents are done, which act."""
    return {
        "copies": [get_env_state(env.envs[agent]) for agent in env.possible_agents],
        "done": [env.possible_agents.index(agent) for agent in sorted(env._done)],
        "agents": [env.possible_agents.index(agent) for agent in env.agents],
    }


def _set_copies_state(env: MultiAgentSingleEnvCopies, state: Any) -> None:
    """Apply :func:`_copies_state`; refuses a state of another number or kind of copies before changing any."""
    n = len(env.possible_agents)
    copies = state.get("copies") if isinstance(state, dict) else None
    done, agents = (state.get("done"), state.get("agents")) if isinstance(state, dict) else (None, None)
    indices = [*(done or []), *(agents or [])] if isinstance(done, list) and isinstance(agents, list) else None
    if (
        not isinstance(copies, list)
        or len(copies) != n
        or indices is None
        or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in indices)
        or any(env_state_mismatch(env.envs[a], c) is not None for a, c in zip(env.possible_agents, copies, strict=True))
    ):
        raise ValueError(
            f"the saved state of {type(env).__qualname__} is not one of {n} copies of {env.ENV_ID} (written by "
            "other code, another num_agents, or tampered with)."
        )
    for agent, copy_state in zip(env.possible_agents, copies, strict=True):
        set_env_state(env.envs[agent], copy_state)
    assert isinstance(done, list) and isinstance(agents, list)  # checked above (indices is not None)
    env._done = {env.possible_agents[i] for i in done}
    env.agents = [env.possible_agents[i] for i in agents]


# Their copies are classic-control envs, whose state cairn saves (CartPole, Pendulum).
register_env_state_handler(MultiAgentCartPole, _copies_state, _set_copies_state)
register_env_state_handler(MultiAgentPendulum, _copies_state, _set_copies_state)
