"""RLlib's ``rllib/examples/multi_agent/different_spaces_for_agents.py``, ported to cairn.

Ported from ray-project/ray at commit 18c4a277879ea3cc3ed8a64a7c2ca7ecbf9a4adc: a
multi-agent env whose agents have different observation and action spaces
(``agent0``: ``Box(10,)`` and ``Discrete(2)``, ``agent1``: ``Box(20,)`` and ``Discrete(3)``).
The spaces of each module are not given: they are inferred from the env's per-agent
spaces and the policy mapping function (each agent mapped with a dummy episode, as
RLlib does), so ``main0`` gets ``agent0``'s spaces and ``main1`` ``agent1``'s. Only
``main0`` trains.

Every line that differs from RLlib's, and why:

* ``BasicMultiAgentMultiSpaces.reset``/``step`` draw observations with the env's seeded
  ``np_random`` (``super().reset(seed=seed)``), not ``space.sample()`` (each space has an
  RNG of its own that nobody seeds): a run is reproducible and a restored run goes on
  exactly only with the env's own RNG.
* The episode ends after ``max_episode_len`` steps (``env_config``, default 100):
  RLlib's env never ends an episode (its ``terminateds``/``truncateds`` sets stay empty),
  so no episode return would ever be reported.
* ``super().__init__()`` comes first in ``__init__`` (RLlib calls it last; cairn's
  ``MultiAgentEnv`` sets nothing the subclass sets).
* ``policy_mapping_fn=lambda aid, episode, **kw: f"main{aid[-1]}"`` as RLlib writes it
  (a checkpoint records only that it existed; a new process's load asks for it again).
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``;
  ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` ->
  ``main(iterations, train_batch_size)``.

Run it::

    python examples/rllib/different_spaces_for_agents.py
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from example_output import print_iteration

import cairn
from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.env.multi_agent_env import MultiAgentEnv


@cairn.register
class BasicMultiAgentMultiSpaces(MultiAgentEnv):
    """A simple multi-agent example environment where agents have different spaces.

    agent0: obs=Box(10,), act=Discrete(2)
    agent1: obs=Box(20,), act=Discrete(3)

    The logic of the env doesn't really matter for this example. The point of this env
    is to show how to use multi-agent envs, in which the different agents utilize
    different obs- and action spaces.
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.agents = ["agent0", "agent1"]
        self.possible_agents = list(self.agents)
        self.max_episode_len = int((config or {}).get("max_episode_len", 100))
        self.num_steps = 0

        self.terminateds: set[str] = set()
        self.truncateds: set[str] = set()

        # Provide full (preferred format) observation- and action-spaces as Dicts
        # mapping agent IDs to the individual agents' spaces.
        self.observation_spaces = {
            "agent0": gym.spaces.Box(low=-1.0, high=1.0, shape=(10,)),
            "agent1": gym.spaces.Box(low=-1.0, high=1.0, shape=(20,)),
        }
        self.action_spaces = {
            "agent0": gym.spaces.Discrete(2),
            "agent1": gym.spaces.Discrete(3),
        }

    def _sample(self, agent: str) -> np.ndarray:  # type: ignore[type-arg]
        shape = self.get_observation_space(agent).shape or ()
        return self.np_random.uniform(-1.0, 1.0, size=shape).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Every agent gets a random observation."""
        gym.Env.reset(self, seed=seed)
        self.terminateds = set()
        self.truncateds = set()
        self.num_steps = 0
        return {i: self._sample(i) for i in self.agents}, {}

    def step(  # type: ignore[override]  # dicts, as MultiAgentEnv.step
        self, action_dict: dict[Any, Any]
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """Random observations, zero rewards; the episode is truncated after ``max_episode_len`` steps."""
        obs, rew, terminated, truncated, info = {}, {}, {}, {}, {}
        self.num_steps += 1
        for i, _action in action_dict.items():
            obs[i] = self._sample(i)
            rew[i] = 0.0
            terminated[i] = False
            truncated[i] = self.num_steps >= self.max_episode_len
            info[i] = {}
            if truncated[i]:
                self.truncateds.add(i)
        terminated["__all__"] = len(self.terminateds) == len(self.agents)
        truncated["__all__"] = len(self.truncateds) == len(self.agents)
        return obs, rew, terminated, truncated, info


def main(iterations: int = 10, train_batch_size: int = 1024, max_episode_len: int = 100) -> dict[str, Any]:
    """Train ``iterations`` times; return the last result and each module's spaces."""
    base_config = (
        PPOConfig()
        .environment(env=BasicMultiAgentMultiSpaces, env_config={"max_episode_len": max_episode_len})
        .training(train_batch_size=train_batch_size)
        .multi_agent(
            # Use a simple set of policy IDs. Spaces for the individual policies
            # are inferred automatically using reverse lookup via the
            # `policy_mapping_fn` and the env provided spaces for the different
            # agents.
            policies={"main0", "main1"},
            # Simple mapping fn, mapping agent0 to main0 and agent1 to main1.
            policy_mapping_fn=lambda aid, episode, **kw: f"main{aid[-1]}",
            # Only train main0.
            policies_to_train=["main0"],
        )
    )

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        spaces = {
            module_id: (algo.get_module(module_id).observation_space, algo.get_module(module_id).action_space)
            for module_id in ("main0", "main1")
        }
        return {"result": result, "spaces": spaces}
    finally:
        algo.stop()


if __name__ == "__main__":
    import different_spaces_for_agents  # run the module, not __main__ (the config names its env class)

    different_spaces_for_agents.main()
