"""RLlib's ``rllib/examples/checkpoints/restore_1_of_n_agents_from_checkpoint.py``, ported to cairn.

Ported from ray-project/ray at commit 0ba68feac5cd9d6612a8ae8694f9ae1359e15bb6: train PPO on
multi-agent Pendulum with one module per agent, checkpoint it, then start a second
experiment whose module ``p0`` starts from the checkpoint's ``p0`` (``load_state_path``)
while the other modules start fresh.

Every line that differs from RLlib's, and why:

* Imports: ``MultiAgentRLModuleSpec`` (``ray.rllib.core.rl_module.marl_module``, RLlib's
  former name) -> ``MultiRLModuleSpec`` from ``cairn.rl.core.rl_module.multi_rl_module``
  (RLlib's current one), ``MultiAgentRLModuleSpec(module_specs=...)`` ->
  ``MultiRLModuleSpec(rl_module_specs=...)``; ``MultiAgentPendulum`` from
  ``cairn.rl.examples.envs.classes.multi_agent``; ``register_env`` from
  ``cairn.rl.env.multi_agent_env``; ``TRAINING_ITERATION`` and the metrics constants: none in cairn.
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``.
* ``mini_batch_size_per_learner=64`` and ``vf_clip_param=10.0`` are kept as RLlib writes them.
* ``policy_mapping_fn=lambda aid, *a, **kw: f"p{aid}"`` as RLlib writes it (issue 39).
* ``run_rllib_example_script_experiment(base_config, args)`` (Tune, ``--checkpoint-freq``) ->
  ``iterations`` calls of ``train()`` and ``save_to_path`` at the end; the best result's
  checkpoint is that one. The second run's stop criteria -> ``iterations`` again.
* ``base_config.get_default_rl_module_spec()`` -> ``RLModuleSpec()`` (cairn fills in the
  algorithm's default module class when it builds the modules; its configs have no
  ``get_default_rl_module_spec``); ``module_spec.model_config_dict = base_config.model_config
  | {"fcnet_activation": "relu"}`` -> ``module_spec.model_config = base_config.model_config |
  {"activation": "relu"}``: a spec's ``model_config`` takes cairn's key names (only the
  ``rl_module()`` builder translates RLlib's ``fcnet_*``).
* ``os.path.join(chkpt_path, "learner", "module_state", "p0")`` (RLlib's old layout) ->
  ``os.path.join(chkpt_path, "learner_group", "learner", "rl_module", "p0")``: RLlib's
  current layout, which cairn's checkpoints have.
* ``module_specs["p0"] = module_spec`` after ``module_spec.load_state_path = ...`` ->
  ``dataclasses.replace(module_spec, load_state_path=...)``: RLlib's script gives every
  policy the same spec object, so setting the path on it makes all of them load ``p0``,
  not only policy 0 as the docstring says.
* The second ``register_env("env", ...)`` stays (cairn's registration lives in the process, too).

Run it::

    python examples/rllib/restore_1_of_n_agents_from_checkpoint.py
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentPendulum


def main(iterations: int = 2, num_agents: int = 2, checkpoint_dir: str | None = None) -> dict[str, Any]:
    """Run both experiments; return the checkpoint, the second algorithm's first weights and its result."""
    # Register our environment with tune.
    if num_agents > 1:
        register_env(
            "env",
            lambda _: MultiAgentPendulum(config={"num_agents": num_agents}),
        )
    else:
        raise ValueError(
            f"`num_agents` must be > 1, but is {num_agents}.Read the script docstring for more information."
        )

    base_config = (
        PPOConfig()
        .environment("env")
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

    # Augment the base config with further settings and train the agents.
    algo = base_config.build_algo()
    try:
        for _ in range(iterations):
            algo.train()
        # cairn: a temporary folder only without checkpoint_dir, removed before main returns
        scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="cairn_restore_1_of_n_")
        chkpt_path = str(algo.save_to_path(checkpoint_dir or scratch.name))
    finally:
        algo.stop()

    # Create an env instance to get the observation and action spaces.
    env = MultiAgentPendulum(config={"num_agents": num_agents})
    # Get the default module spec from the algorithm config.
    module_spec = RLModuleSpec()
    module_spec.model_config = base_config.model_config | {
        "activation": "relu",
    }
    module_spec.observation_space = env.envs[0].observation_space
    module_spec.action_space = env.envs[0].action_space
    env.close()
    # Create the module for each policy, but policy 0.
    module_specs = {}
    for i in range(1, num_agents or 1):
        module_specs[f"p{i}"] = module_spec

    # Now swap in the RLModule weights for policy 0.
    p_0_module_state_path = os.path.join(chkpt_path, "learner_group", "learner", "rl_module", "p0")
    module_specs["p0"] = dataclasses.replace(module_spec, load_state_path=p_0_module_state_path)

    # Create the MARL module.
    marl_module_spec = MultiRLModuleSpec(rl_module_specs=module_specs)
    # Define the MARL module in the base config.
    base_config.rl_module(rl_module_spec=marl_module_spec)
    # We need to re-register the environment when starting a new run.
    register_env(
        "env",
        lambda _: MultiAgentPendulum(config={"num_agents": num_agents}),
    )

    # Run the experiment again with the restored MARL module.
    algo = base_config.build_algo()
    try:
        start_weights = {m: algo.get_module(m).get_state() for m in sorted(module_specs)}
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
    finally:
        algo.stop()
    if scratch is not None:
        scratch.cleanup()
    return {"checkpoint_path": chkpt_path, "start_weights": start_weights, "last_result": result}


if __name__ == "__main__":
    import restore_1_of_n_agents_from_checkpoint as example  # run the module, not __main__

    example.main()
