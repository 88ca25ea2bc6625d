"""RLlib's ``rllib/examples/inference/policy_inference_after_training.py``, ported to cairn.

The simplest way to compute actions with a trained policy: restore the RLModule (the
policy network) from a checkpoint and run a plain gymnasium loop (CartPole-v1), without
connectors or env runners.

Ported from ray-project/ray (``rllib/examples/inference/``). Every line that differs from
RLlib's, and why:

* Imports: ``ray.rllib`` -> ``cairn.rl``; ``try_import_torch`` -> ``import torch``;
  ``convert_to_numpy`` and ``softmax`` (``ray.rllib.utils.numpy``) -> ``.numpy()`` and a
  two-line :func:`softmax` here; ``get_trainable_cls`` from ``cairn.rl.algorithms.catalog``.
* ``--enable-new-api-stack`` dropped (cairn has only the new stack).
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` -> ``main(...)``:
  train ``iterations`` times (or until ``stop_reward``), then ``save_to_path``.
* The module's path: RLlib's script (this version) reads ``<ckpt>/learner/module_state/
  default_policy``, its old layout; the new stack's (and cairn's) is
  ``<ckpt>/learner_group/learner/rl_module/default_policy``.
* The config is RLlib's default PPO config: no observation filter (cairn's configs follow
  RLlib's defaults), so the module alone acts on raw observations as it learned. A module
  trained behind a ``MeanStdFilter`` needs it: see the ``_w_connector`` script and
  docs/deploy.md.
* The loop is RLlib's, with ``seed`` for the resets and a ``numpy.random.Generator`` for the
  sampling (so a test can replay it); ``main`` returns the episode returns.

Run it::

    python examples/rllib/policy_inference_after_training.py
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cairn.rl.algorithms.catalog import get_trainable_cls
from cairn.rl.core import DEFAULT_MODULE_ID
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN


def softmax(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """RLlib's ``ray.rllib.utils.numpy.softmax`` over the last axis."""
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    out: np.ndarray[Any, Any] = e / e.sum(axis=-1, keepdims=True)
    return out


def main(
    iterations: int = 100,
    *,
    env_id: str = "CartPole-v1",
    stop_reward: float = 200.0,
    num_episodes_during_inference: int = 10,
    explore_during_inference: bool = False,
    train_batch_size: int = 4000,
    num_epochs: int = 30,
    checkpoint_dir: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Train a policy, restore its RLModule from the checkpoint, and run the inference loop."""
    base_config = (
        get_trainable_cls("PPO")
        .get_default_config()
        .environment(env_id)
        .training(train_batch_size_per_learner=train_batch_size, num_epochs=num_epochs)
    )

    print("Training policy until desired reward/timesteps/iterations. ...")
    # cairn: a temporary folder only without checkpoint_dir, removed before main returns
    scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="policy_inference_")
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

    print("Training completed. Restoring new RLModule for action inference.")
    # Create new RLModule and restore its state from the last checkpoint.
    rl_module = RLModule.from_checkpoint(
        os.path.join(checkpoint_path, "learner_group", "learner", "rl_module", DEFAULT_MODULE_ID)
    )

    # Create the env to do inference in.
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)

    num_episodes = 0
    episode_return = 0.0
    returns: list[float] = []

    while num_episodes < num_episodes_during_inference:
        # Compute an action using a B=1 observation "batch".
        input_dict = {Columns.OBS: torch.from_numpy(obs).unsqueeze(0)}
        # No exploration.
        if not explore_during_inference:
            rl_module_out = rl_module.forward_inference(input_dict)
        # Using exploration.
        else:
            rl_module_out = rl_module.forward_exploration(input_dict)

        # For discrete action spaces used here, normally, an RLModule "only"
        # produces action logits, from which we then have to sample.
        # However, you can also write custom RLModules that output actions
        # directly, performing the sampling step already inside their
        # `forward_...()` methods.
        logits = rl_module_out[Columns.ACTION_DIST_INPUTS].numpy()
        # Perform the sampling step in numpy for simplicity.
        action = rng.choice(env.action_space.n, p=softmax(logits[0]))
        # Send the computed action `a` to the env.
        obs, reward, terminated, truncated, _ = env.step(action)
        episode_return += float(reward)
        # Is the episode `done`? -> Reset.
        if terminated or truncated:
            print(f"Episode done: Total reward = {episode_return}")
            returns.append(episode_return)
            obs, _ = env.reset(seed=seed + len(returns))
            num_episodes += 1
            episode_return = 0.0

    print(f"Done performing action inference through {num_episodes} Episodes")
    if scratch is not None:
        scratch.cleanup()
    return {"checkpoint": checkpoint_path, "returns": returns, "module": rl_module}


if __name__ == "__main__":
    main()
