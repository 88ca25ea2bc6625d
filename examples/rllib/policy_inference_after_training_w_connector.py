"""RLlib's ``rllib/examples/inference/policy_inference_after_training_w_connector.py``, ported to cairn.

Compute actions in production with an already trained LSTM policy: restore the env
runner's env-to-module and module-to-env connector pipelines and the RLModule from a
checkpoint, and run an env loop that keeps a ``SingleAgentEpisode`` up to date, so that
the pipelines feed the module its own previous ``STATE_OUT`` at every step.

Ported from ray-project/ray (``rllib/examples/inference/``). Every line that differs from
RLlib's, and why:

* Imports: ``ray.rllib`` -> ``cairn.rl`` (the same module paths: ``connectors.env_to_module``,
  ``connectors.module_to_env``, ``core``, ``core.columns``, ``env.single_agent_episode``,
  ``examples.envs.classes.stateless_cartpole``, ``utils.metrics``); ``register_env`` from
  ``cairn.rl.env.multi_agent_env``, ``get_trainable_cls`` from ``cairn.rl.algorithms.catalog``;
  ``try_import_torch`` and ``tree`` (dm_tree) dropped: torch is imported directly and the
  ONNX branch is gone (below).
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` (a Tune run with
  a checkpoint every iteration, best result by return) -> ``main(...)``: train ``iterations``
  times (or until ``stop_reward``) and save the last checkpoint with ``save_to_path``; its
  arguments size the run (RLlib's defaults: ``num_epochs=6``, ``lr=0.0003``,
  ``vf_loss_coeff=0.01``, an LSTM with RLlib's cell size).
* ``--use-onnx-for-inference`` dropped: RLlib's branch exports the module's ``forward`` with
  ``torch.onnx.export``; cairn exports a policy with its connectors as one file
  (``cairn export CKPT --format onnx``, docs/deploy.md), which refuses recurrent modules.
* The loop is RLlib's, line for line, with ``seed`` for the resets (so a test can replay it);
  ``main`` returns the episode returns and the env-to-module pipeline it used.

Run it::

    python examples/rllib/policy_inference_after_training_w_connector.py
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from cairn.rl.algorithms.catalog import get_trainable_cls
from cairn.rl.connectors.env_to_module import EnvToModulePipeline
from cairn.rl.connectors.module_to_env import ModuleToEnvPipeline
from cairn.rl.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_LEARNER,
    COMPONENT_LEARNER_GROUP,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
    COMPONENT_RL_MODULE,
    DEFAULT_MODULE_ID,
)
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.env.single_agent_episode import SingleAgentEpisode
from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole
from cairn.rl.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN


def _env_creator(cfg: dict[str, Any]) -> StatelessCartPole:
    return StatelessCartPole(cfg)


register_env("stateless-cart", _env_creator)


def main(
    iterations: int = 100,
    *,
    stop_reward: float = 200.0,
    num_episodes_during_inference: int = 10,
    explore_during_inference: bool = False,
    train_batch_size: int = 4000,
    num_epochs: int = 6,
    lstm_cell_size: int = 256,
    checkpoint_dir: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Train an LSTM policy, restore it with its connectors, and run the inference loop."""
    base_config = (
        get_trainable_cls("PPO")
        .get_default_config()
        .environment("stateless-cart")
        .training(
            num_epochs=num_epochs,
            lr=0.0003,
            vf_loss_coeff=0.01,
            train_batch_size_per_learner=train_batch_size,
        )
        # Add an LSTM setup to the default RLModule used.
        .rl_module(model_config=DefaultModelConfig(use_lstm=True, lstm_cell_size=lstm_cell_size))
    )

    print("Training LSTM-policy until desired reward/timesteps/iterations. ...")
    # cairn: a temporary folder only without checkpoint_dir, removed before main returns
    scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="policy_inference_w_connector_")
    checkpoint_dir = checkpoint_dir or scratch.name
    algo = base_config.build_algo()
    try:
        for _ in range(iterations):
            result = algo.train()
            if result[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN] >= stop_reward:
                break
        checkpoint_path = str(algo.save_to_path(os.path.join(checkpoint_dir, "checkpoint")))
    finally:
        algo.stop()

    print(
        f"Training completed (R={result[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]}). Creating an env-loop for "
        "inference ..."
    )

    print("Env ...", end="")
    env = _env_creator(base_config.env_config)
    print(" ok")

    # Create the env-to-module pipeline from the checkpoint.
    print("Restore env-to-module connector from checkpoint ...", end="")
    env_to_module = EnvToModulePipeline.from_checkpoint(
        os.path.join(checkpoint_path, COMPONENT_ENV_RUNNER, COMPONENT_ENV_TO_MODULE_CONNECTOR)
    )
    print(" ok")

    print("Restore RLModule from checkpoint ...", end="")
    # Create RLModule from a checkpoint.
    rl_module = RLModule.from_checkpoint(
        os.path.join(
            checkpoint_path, COMPONENT_LEARNER_GROUP, COMPONENT_LEARNER, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
        )
    )
    print(" ok")

    # For the module-to-env pipeline, we will use the convenient config utility.
    print("Restore module-to-env connector from checkpoint ...", end="")
    module_to_env = ModuleToEnvPipeline.from_checkpoint(
        os.path.join(checkpoint_path, COMPONENT_ENV_RUNNER, COMPONENT_MODULE_TO_ENV_CONNECTOR)
    )
    print(" ok")

    # Now our setup is complete:
    # [gym.Env] -> env-to-module -> [RLModule] -> module-to-env -> [gym.Env] ... repeat
    num_episodes = 0
    returns: list[float] = []

    obs, _ = env.reset(seed=seed)
    episode = SingleAgentEpisode(
        observations=[obs],
        observation_space=env.observation_space,
        action_space=env.action_space,
    )

    while num_episodes < num_episodes_during_inference:
        shared_data: dict[str, Any] = {}
        input_dict = env_to_module(
            episodes=[episode],  # ConnectorV2 pipelines operate on lists of episodes.
            rl_module=rl_module,
            explore=explore_during_inference,
            shared_data=shared_data,
        )
        # No exploration.
        if not explore_during_inference:
            rl_module_out = rl_module.forward_inference(input_dict)
        # W/ exploration.
        else:
            rl_module_out = rl_module.forward_exploration(input_dict)

        to_env = module_to_env(
            batch=rl_module_out,
            episodes=[episode],  # ConnectorV2 pipelines operate on lists of episodes.
            rl_module=rl_module,
            explore=explore_during_inference,
            shared_data=shared_data,
        )
        # Send the computed action to the env. Note that the RLModule and the
        # connector pipelines work on batched data (B=1 in this case), whereas the Env
        # is not vectorized here, so we need to use `action[0]`.
        action = to_env.pop(Columns.ACTIONS)[0]
        obs, reward, terminated, truncated, _ = env.step(action)
        # Keep our `SingleAgentEpisode` instance updated at all times.
        episode.add_env_step(
            obs,
            action,
            float(reward),
            terminated=terminated,
            truncated=truncated,
            # Same here: [0] b/c RLModule output is batched (w/ B=1).
            extra_model_outputs={k: v[0] for k, v in to_env.items()},
        )

        # Is the episode `done`? -> Reset.
        if episode.is_done:
            print(f"Episode done: Total reward = {episode.get_return()}")
            returns.append(episode.get_return())
            obs, _ = env.reset(seed=seed + len(returns))
            episode = SingleAgentEpisode(
                observations=[obs],
                observation_space=env.observation_space,
                action_space=env.action_space,
            )
            num_episodes += 1

    print(f"Done performing action inference through {num_episodes} Episodes")
    if scratch is not None:
        scratch.cleanup()
    return {"checkpoint": checkpoint_path, "returns": returns, "env_to_module": env_to_module, "module": rl_module}


if __name__ == "__main__":
    main()
