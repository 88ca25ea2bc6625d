"""RLlib's ``rllib/examples/multi_agent/custom_heuristic_policy.py``, ported to cairn.

Ported from the version of ray-project/ray that imports ``MultiRLModuleSpec`` and
``ray.rllib.examples.utils`` (the newest stored; commit 0e1bad6b... is an older one
with RLlib's former spec names): two agents on ``MultiAgentCartPole``, one played by a
PPO module that learns (``"learnable_policy"``), one by a hand-coded ``RandomRLModule``
that is never trained.

Every line that differs from RLlib's, and why:

* Imports: ``ray.rllib`` -> ``cairn.rl`` for ``PPOConfig``, ``MultiRLModuleSpec``,
  ``RLModuleSpec`` and ``RandomRLModule`` (same module paths:
  ``cairn.rl.examples.rl_modules.classes.random_rlm``, a parameterless ``TorchRLModule``
  written as RLlib's, drawing with the env runner's checkpointed RNG); ``MultiAgentCartPole``
  from ``cairn.rl.examples.envs.classes.multi_agent``; ``register_env`` from
  ``cairn.rl.env.multi_agent_env``.
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` -> ``main(iterations)``.
* ``policy_mapping_fn=lambda agent_id, *args, **kwargs: [...][agent_id % 2]`` as RLlib
  writes it (issue 39). ``MultiAgentCartPole``'s agent ids are ints, as RLlib's.

Run it::

    python examples/rllib/custom_heuristic_policy.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole
from cairn.rl.examples.rl_modules.classes.random_rlm import RandomRLModule


def main(iterations: int = 2, num_agents: int = 2) -> dict[str, Any]:
    """Train ``iterations`` times; return the last result."""
    assert num_agents == 2, "Must set --num-agents=2 when running this script!"

    # Simple environment with n independent cartpole entities.
    register_env(
        "multi_agent_cartpole",
        lambda _: MultiAgentCartPole({"num_agents": num_agents}),
    )

    base_config = (
        PPOConfig()
        .environment("multi_agent_cartpole")
        .multi_agent(
            policies={"learnable_policy", "random"},
            # Map to either random behavior or PPO learning behavior based on
            # the agent's ID.
            policy_mapping_fn=lambda agent_id, *args, **kwargs: [
                "learnable_policy",
                "random",
            ][agent_id % 2],
            # We need to specify this here, b/c the `forward_train` method of
            # `RandomRLModule` (ModuleID="random") throws a not-implemented error.
            policies_to_train=["learnable_policy"],
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    "learnable_policy": RLModuleSpec(),
                    "random": RLModuleSpec(module_class=RandomRLModule),
                }
            ),
        )
    )

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        return result
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
