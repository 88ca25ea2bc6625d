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
* ``policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}"`` -> the module-level function
  :func:`policy_mapping_fn` (same body): cairn records the mapping function in the
  checkpoint by reference (``"multi_agent_cartpole:policy_mapping_fn"``) and never
  pickles it, so it cannot be a lambda.
* ``num_envs_per_env_runner=20`` -> 2, a main() argument: a CI-sized run.

Run it::

    python examples/rllib/multi_agent_cartpole.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration

import cairn
from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole


@cairn.register
def policy_mapping_fn(aid: str, *a: Any, **kw: Any) -> str:
    """Agent ``i`` -> module ``p{i}`` (RLlib's lambda, at module level)."""
    return f"p{aid}"


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
            policy_mapping_fn=policy_mapping_fn,
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
    # Run the module, not __main__: the config records policy_mapping_fn as
    # "multi_agent_cartpole:policy_mapping_fn", which a restoring program can find.
    import multi_agent_cartpole

    multi_agent_cartpole.main()
