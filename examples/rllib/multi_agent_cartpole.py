"""RLlib's ``rllib/examples/multi_agent/multi_agent_cartpole.py``, ported to cairn.

Ported from ray-project/ray at commit 6d0bbd667d2626d4c18809e8bc4a8300bf75b7f1 ("Simple
example of setting up an agent-to-module mapping function"): ``--num-agents`` copies of
CartPole, agent ``i`` played by module ``p{i}``.

Every line that differs from RLlib's, and why:

* ``from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole`` ->
  ``from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole``;
  ``from ray.tune.registry import register_env`` ->
  ``from cairn.rl.env.multi_agent_env import register_env``.
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()`` (RLlib's default
  ``--algo``): cairn has no Tune registry of algorithms.
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` (a Tune run)
  -> ``main(iterations, num_agents)``: ``build_algo()`` and ``train()`` in a loop.
* ``policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}"`` as RLlib writes it (a checkpoint
  records only that it existed; a new process's ``from_checkpoint`` asks for it again).
* ``num_envs_per_env_runner=20`` -> 2, a main() argument: a CI-sized run.

Run it::

    python examples/rllib/multi_agent_cartpole.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole


def main(iterations: int = 2, num_agents: int = 2, num_envs_per_env_runner: int = 2) -> dict[str, Any]:
    """Train ``iterations`` times; return the last result."""
    # Register our environment with tune.
    if num_agents > 0:
        register_env(
            "env",
            lambda _: MultiAgentCartPole(config={"num_agents": num_agents}),
        )

    base_config = (
        PPOConfig()
        .environment("env" if num_agents > 0 else "CartPole-v1")
        .env_runners(
            num_envs_per_env_runner=num_envs_per_env_runner,
        )
    )

    # Add a simple multi-agent setup.
    if num_agents > 0:
        base_config.multi_agent(
            policies={f"p{i}" for i in range(num_agents)},
            policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}",
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
