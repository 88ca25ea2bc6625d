"""RLlib's ``rllib/examples/multi_agent/multi_agent_pendulum.py``, ported to cairn.

Ported from ray-project/ray at commit 093d61d28a70b3df0ee4ddfd58d7b7763f318f06: PPO on
``--num-agents`` copies of Pendulum, agent ``i`` played by module ``p{i}``.

Every line that differs from RLlib's, and why:

* ``from ray.rllib.examples.envs.classes.multi_agent import MultiAgentPendulum`` ->
  ``from cairn.rl.examples.envs.classes.multi_agent import MultiAgentPendulum``;
  ``from ray.tune.registry import register_env`` -> ``from cairn.rl.env.multi_agent_env import register_env``.
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()`` (RLlib's default
  ``--algo``): cairn has no Tune registry of algorithms.
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` -> ``main(iterations, num_agents)``.
* ``mini_batch_size_per_learner=64`` and ``vf_clip_param=10.0`` are kept as RLlib writes them
  (cairn's builders take RLlib's older name of ``minibatch_size``; cairn's PPO clips the
  value loss as RLlib does when ``vf_clip_param`` is set, and does not by default).
* ``model={"fcnet_activation": "relu"}`` in ``training()`` is dropped: it is RLlib's old API
  stack (cairn refuses it); the same setting is given by the script's
  ``rl_module(model_config_dict={"fcnet_activation": "relu"})``, which stays.
* ``policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}"`` as RLlib writes it (a checkpoint
  records only that it existed; a new process's ``from_checkpoint`` asks for it again).

Run it::

    python examples/rllib/multi_agent_pendulum.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentPendulum


def main(iterations: int = 2, num_agents: int = 2) -> dict[str, Any]:
    """Train ``iterations`` times; return the last result."""
    # Register our environment with tune.
    if num_agents > 0:
        register_env(
            "env",
            lambda _: MultiAgentPendulum(config={"num_agents": num_agents}),
        )

    base_config = (
        PPOConfig()
        .environment("env" if num_agents > 0 else "Pendulum-v1")
        .training(
            train_batch_size_per_learner=512,
            mini_batch_size_per_learner=64,
            lambda_=0.1,
            gamma=0.95,
            lr=0.0003,
            vf_clip_param=10.0,
        )
        .rl_module(
            model_config_dict={"fcnet_activation": "relu"},
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
