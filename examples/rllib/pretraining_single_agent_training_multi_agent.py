"""RLlib's ``rllib/examples/rl_modules/pretraining_single_agent_training_multi_agent.py``, ported to cairn.

Ported from ray-project/ray at commit 00f8d99993b29b4d3fcbd688ef60c6c7c729df82: pre-train a
single-agent PPO on CartPole, then train ``num_agents`` agents on ``MultiAgentCartPole``,
each with its own module, where ``policy_0`` starts from the pre-trained module
(``load_state_path``) and the others start fresh.

Every line that differs from RLlib's, and why:

* Imports: ``ray.rllib`` -> ``cairn.rl`` for ``PPOConfig``, ``RLModuleSpec``,
  ``MultiRLModuleSpec``, ``MultiAgentCartPole``; ``PPOTorchRLModule``
  (``ray.rllib.algorithms.ppo.torch.ppo_torch_rl_module``) -> ``DefaultPPORLModule``
  (``cairn.rl.algorithms.ppo.default_ppo_rl_module``); ``PPOCatalog`` and ``catalog_class=``
  dropped (cairn has no catalogs: a module builds its own layers); ``register_env`` from
  ``cairn.rl.env.multi_agent_env``.
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` (and the
  ``setattr(args, ...)`` juggling of stop criteria between the two runs) ->
  ``main(pretraining_iterations, iterations)``: a loop of ``train()`` per run, and
  ``save_to_path`` at the end of the pre-training (RLlib's ``checkpoint_at_end=True``).
* ``load_state_path=module_chkpt_path`` (the algorithm's checkpoint) ->
  ``os.path.join(module_chkpt_path, "learner_group", "learner", "rl_module", "default_policy")``:
  cairn's ``load_state_path`` names an RLModule checkpoint, which is that folder of the
  algorithm's (RLlib's layout too).
* Not a difference, but what cairn adds: the pre-training's ``MeanStdFilter`` state travels
  with ``load_state_path`` (the checkpoint's ``env_runner/env_to_module_connector``), so the
  main run's observation filter starts from it and ``policy_0`` sees observations normalised
  as in its pre-training (docs/rl.md, "Your own module").
* Added ``.multi_agent(policies=..., policy_mapping_fn=policy_mapping_fn)`` to the main run:
  cairn needs the module ids and the agent -> module mapping (agent ``"i"`` ->
  ``policy_i``); RLlib's script gives neither, and its default mapping would send every
  agent to ``"default_policy"``, a module its spec does not have.
* ``env.close()`` added after reading the spaces.

Run it::

    python examples/rllib/pretraining_single_agent_training_multi_agent.py
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import gymnasium as gym
from example_output import print_iteration

import cairn
from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole


@cairn.register
def policy_mapping_fn(agent_id: str, *args: Any, **kwargs: Any) -> str:
    """Agent ``i`` -> module ``policy_i`` (cairn: the mapping RLlib's script leaves out)."""
    return f"policy_{agent_id}"


def main(
    pretraining_iterations: int = 2, iterations: int = 2, num_agents: int = 2, checkpoint_dir: str | None = None
) -> dict[str, Any]:
    """Pre-train, then train the agents; return the checkpoint and the main run's first weights."""
    # Ensure that the user has set the number of agents.
    if num_agents == 0:
        raise ValueError(
            "This pre-training example script requires at least 1 agent. "
            "Try setting the command line argument `--num-agents` to the "
            "number of agents you want to use."
        )

    # Define out pre-training single-agent algorithm. We will use the same module
    # configuration for the pre-training and the training.
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .rl_module(
            # Use a different number of hidden units for the pre-trained module.
            model_config={"fcnet_hiddens": [64]},
        )
    )

    # Run the pre-training.
    algo = config.build_algo()
    try:
        for _ in range(pretraining_iterations):
            algo.train()
        # Get the checkpoint path.
        # cairn: a temporary folder only without checkpoint_dir, removed before main returns
        scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="cairn_pretraining_")
        module_chkpt_path = str(algo.save_to_path(checkpoint_dir or scratch.name))
    finally:
        algo.stop()

    # Create a new MultiRLModule using the pre-trained module for policy 0.
    env = gym.make("CartPole-v1")
    module_specs = {}
    for i in range(num_agents):
        module_specs[f"policy_{i}"] = RLModuleSpec(
            module_class=DefaultPPORLModule,
            observation_space=env.observation_space,
            action_space=env.action_space,
            model_config={"fcnet_hiddens": [32]},
        )

    # Swap in the pre-trained module for policy 0.
    module_specs["policy_0"] = RLModuleSpec(
        module_class=DefaultPPORLModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config={"fcnet_hiddens": [64]},
        # Note, we load here the module directly from the checkpoint.
        load_state_path=os.path.join(module_chkpt_path, "learner_group", "learner", "rl_module", "default_policy"),
    )
    env.close()
    multi_rl_module_spec = MultiRLModuleSpec(rl_module_specs=module_specs)

    # Register our environment with tune if we use multiple agents.
    register_env(
        "multi-agent-carpole-env",
        lambda _: MultiAgentCartPole(config={"num_agents": num_agents}),
    )

    # Configure the main (multi-agent) training run.
    config = (
        PPOConfig()
        .environment("multi-agent-carpole-env" if num_agents > 0 else "CartPole-v1")
        .multi_agent(policies=list(module_specs), policy_mapping_fn=policy_mapping_fn)
        .rl_module(rl_module_spec=multi_rl_module_spec)
    )

    # Run the main training run.
    algo = config.build_algo()
    try:
        start_weights = {m: algo.get_module(m).get_state() for m in sorted(module_specs)}
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
    finally:
        algo.stop()
    if scratch is not None:
        scratch.cleanup()
    return {"checkpoint_path": module_chkpt_path, "start_weights": start_weights, "last_result": result}


if __name__ == "__main__":
    import pretraining_single_agent_training_multi_agent as example  # run the module, not __main__

    example.main()
