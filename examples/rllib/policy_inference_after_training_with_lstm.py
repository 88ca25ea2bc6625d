"""RLlib's ``rllib/examples/inference/policy_inference_after_training_with_lstm.py``, ported to cairn.

Compute actions with a trained LSTM policy in a plain env loop (FrozenLake-v1), carrying
the recurrent state from step to step and resetting it (and the previous action and
reward, when the model reads them) at the end of every episode.

Ported from ray-project/ray (``rllib/examples/inference/``). RLlib's script is written for
its old API stack (``Algorithm.compute_single_action(observation, state, prev_action,
prev_reward)``, ``algo.get_policy().model.get_initial_state()``), which RLlib's new stack
and cairn do not have. Every line that differs from RLlib's, and why:

* Imports: ``ray.rllib`` -> ``cairn.rl``; Tune (``tune.Tuner``, ``air.RunConfig``,
  ``CheckpointConfig``) gone: cairn is not a tuner, so ``main(...)`` trains ``iterations``
  times (or until ``stop_reward``) and saves the last checkpoint with ``save_to_path``.
* ``config["model"] = {"use_lstm": True, "lstm_use_prev_action": ..., "lstm_use_prev_reward": ...}``
  -> ``DefaultModelConfig(use_lstm=True)`` and, for the previous action and reward, RLlib's
  new-stack connector piece ``PrevActionsPrevRewards``; FrozenLake's Discrete observations
  are one-hot encoded by ``FlattenObservations`` (the new stack's way).
* ``Algorithm.from_checkpoint(checkpoint)`` is kept (the algorithm restores whole); the
  action comes from cairn's one-call policy, ``Policy(algo.get_module(), ...)`` with the
  algorithm's own connector pipelines, loaded from the same checkpoint
  (``Policy.from_checkpoint`` is the short form):
  ``algo.compute_single_action(observation=obs, state=state, prev_action=prev_a,
  prev_reward=prev_r, explore=...)`` -> ``policy.compute_single_action(obs, reward=prev_r,
  explore=...)``: the policy carries the state and the previous action itself (from the
  episode it keeps), so the ``state = state_out`` / ``prev_a = a`` bookkeeping becomes
  ``policy.reset()`` when an episode ends.
* ``seed`` seeds the resets (so a test can replay the loop); ``main`` returns the returns
  and the initial state the policy starts each episode from.

Run it::

    python examples/rllib/policy_inference_after_training_with_lstm.py
"""

from __future__ import annotations

import functools
import os
import tempfile
from typing import Any

import gymnasium as gym

from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.connectors.env_to_module import EnvToModulePipeline, FlattenObservations, PrevActionsPrevRewards
from cairn.rl.connectors.module_to_env import ModuleToEnvPipeline
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.inference import Policy
from cairn.rl.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN


def _with_prev_actions_and_rewards(env: Any = None, spaces: Any = None, device: Any = None) -> list[Any]:
    # RLlib's old stack: model={"lstm_use_prev_action": True, "lstm_use_prev_reward": True}.
    return [PrevActionsPrevRewards(n_prev_actions=1, n_prev_rewards=1), FlattenObservations()]


def main(
    iterations: int = 100,
    *,
    prev_action_and_reward: bool = False,
    stop_reward: float = 0.8,
    num_episodes_during_inference: int = 10,
    explore_during_inference: bool = False,
    train_batch_size: int = 4000,
    num_epochs: int = 6,
    lstm_cell_size: int = 256,
    checkpoint_dir: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Train an LSTM policy on FrozenLake, restore the algorithm, and run the inference loop."""
    config = (
        PPOConfig()
        .environment("FrozenLake-v1")
        .env_runners(
            env_to_module_connector=(
                _with_prev_actions_and_rewards if prev_action_and_reward else functools.partial(FlattenObservations)
            )
        )
        .training(train_batch_size_per_learner=train_batch_size, num_epochs=num_epochs)
        .rl_module(model_config=DefaultModelConfig(use_lstm=True, lstm_cell_size=lstm_cell_size))
    )

    print("Training policy until desired reward/timesteps/iterations. ...")
    # cairn: a temporary folder only without checkpoint_dir, removed before main returns
    scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="policy_inference_lstm_")
    checkpoint_dir = checkpoint_dir or scratch.name
    algo = config.build_algo()
    try:
        for _ in range(iterations):
            result = algo.train()
            if result[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN] >= stop_reward:
                break
        checkpoint = str(algo.save_to_path(os.path.join(checkpoint_dir, "checkpoint")))
    finally:
        algo.stop()

    print("Training completed. Restoring new Algorithm for action inference.")
    # Create new Algorithm from the last checkpoint.
    algo = Algorithm.from_checkpoint(checkpoint)
    policy = Policy(
        algo.get_module(),
        EnvToModulePipeline.from_checkpoint(os.path.join(checkpoint, "env_runner", "env_to_module_connector")),
        ModuleToEnvPipeline.from_checkpoint(os.path.join(checkpoint, "env_runner", "module_to_env_connector")),
    )

    # Create the env to do inference in.
    env = gym.make("FrozenLake-v1")
    obs, _ = env.reset(seed=seed)

    # The LSTM's initial internal state (h- and c-states): the policy starts every episode from it.
    init_state = policy.module.get_initial_state()
    prev_r = 0.0

    num_episodes = 0
    episode_return = 0.0
    returns: list[float] = []

    while num_episodes < num_episodes_during_inference:
        # Compute an action (`a`); the policy feeds the LSTM its own previous state.
        a = policy.compute_single_action(obs, reward=prev_r, explore=explore_during_inference)
        # Send the computed action `a` to the env.
        obs, reward, done, truncated, _ = env.step(a)
        episode_return += float(reward)
        # Is the episode `done`? -> Reset.
        if done or truncated:
            returns.append(episode_return)
            obs, _ = env.reset(seed=seed + len(returns))
            num_episodes += 1
            episode_return = 0.0
            policy.reset()
            prev_r = 0.0
        # Episode is still ongoing -> Continue.
        else:
            prev_r = float(reward)

    algo.stop()
    print(f"Done performing action inference through {num_episodes} Episodes")
    if scratch is not None:
        scratch.cleanup()
    return {"checkpoint": checkpoint, "returns": returns, "initial_state": init_state, "policy": policy}


if __name__ == "__main__":
    main()
