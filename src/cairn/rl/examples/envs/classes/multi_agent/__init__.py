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

from cairn.rl.env.multi_agent_env import MultiAgentSingleEnvCopies

__all__ = ["MultiAgentCartPole", "MultiAgentPendulum", "MultiAgentSingleEnvCopies"]


class MultiAgentCartPole(MultiAgentSingleEnvCopies):
    """RLlib's ``MultiAgentCartPole``: one ``CartPole-v1`` per agent."""

    ENV_ID = "CartPole-v1"


class MultiAgentPendulum(MultiAgentSingleEnvCopies):
    """RLlib's ``MultiAgentPendulum``: one ``Pendulum-v1`` per agent."""

    ENV_ID = "Pendulum-v1"
