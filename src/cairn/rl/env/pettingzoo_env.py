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
it); the wrapped env is used through its methods. PettingZoo environments
have no saved state in cairn, so checkpoints say that episodes restart on
restore (register a handler with :func:`cairn.rl.register_env_state_handler`
for ``ParallelPettingZooEnv`` subclasses that can save theirs).
"""

from __future__ import annotations

from typing import Any

from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv

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

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset the wrapped env (seeded when ``seed`` is given)."""
        obs, infos = self.par_env.reset(seed=seed, options=options)
        self.agents = list(self.par_env.agents)
        return dict(obs), dict(infos)

    def step(  # type: ignore[override]  # MultiAgentEnv's dict signature
        self, action_dict: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        """Step the wrapped env; ``"__all__"`` is set once no agent is left."""
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
