"""RLlib's ``rllib/examples/connectors/frame_stacking.py``, ported to cairn.

Ported from ray-project/ray at commit 06ec0d1879f053a2db827cf2d8bb762239ab40a2: observation
frame stacking done by two connector pieces, ``FrameStackingEnvToModule`` in the env-to-module
pipeline and ``FrameStackingLearner`` in the learner pipeline, instead of a gymnasium wrapper.

Every line that differs from RLlib's, and why:

* ``from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule`` and
  ``from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner`` ->
  ``cairn.rl.connectors.env_to_module`` / ``cairn.rl.connectors.learner``.
* ``_make_env_to_module_connector``, ``_make_learner_connector`` and ``_env_creator`` are
  closures over the arguments as RLlib writes them, in ``main()`` (RLlib: under ``if __name__ ==
  "__main__":``); ``tune.register_env`` -> ``register_env`` from ``cairn.rl.env.multi_agent_env``.
  A checkpoint records only that they existed (issue 39). In cairn's learner the
  ``FrameStackingLearner`` has nothing to do (the batches already hold the env runner's
  stacks); cairn accepts it because it is paired with the env-to-module piece.
* Atari Pong (``wrap_atari_for_new_api_stack``, ``ale_py``, CNN ``conv_filters``) ->
  CartPole with cairn's default MLP, registered as ``"cartpole-env"`` (RLlib: ``"atari-env"``):
  Atari is not installed here, and cairn's default module is an MLP. CartPole's ``(4,)``
  observations stack to ``(4 * num_frames,)`` (RLlib's
  ``(w, h, 1)`` frames to ``(w, h, num_frames)``: cairn concatenates along the last axis).
  ``clip_rewards`` and the Atari ``env_config`` go with it; ``--use-gym-wrapper-framestacking``
  -> ``use_gym_wrapper_framestacking`` (gymnasium's ``FrameStackObservation`` + flattening).
* ``--num-agents`` dropped: cairn's multi-agent env runner does not call connector factories
  yet (its per-module pipelines come with the multi-agent part of issue 27).
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``;
  ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` -> ``main(...)``.
* ``lr=0.00015 * (args.num_gpus or 1)`` -> ``lr=0.00015``: cairn trains on CPU;
  ``kl_coeff`` dropped (cairn's PPO has no KL penalty), ``vf_clip_param=10.0`` kept; ``model_config_dict``
  -> ``{"vf_share_layers": True, "fcnet_hiddens": [32]}`` (the conv filters, ``post_fcnet_hiddens``
  and ``uses_new_env_runners`` go with the images); ``num_envs_per_env_runner=2`` kept; the train batch
  (``train_batch_size_per_learner=256``) and ``num_epochs`` are main() arguments: a CI-sized run.

Run it::

    python examples/rllib/frame_stacking.py
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.connectors.env_to_module import FrameStackingEnvToModule
from cairn.rl.connectors.learner import FrameStackingLearner
from cairn.rl.env.multi_agent_env import register_env


class _FlatFrameStack(gym.Wrapper[Any, Any, Any, Any]):
    """gymnasium's frame stacking wrapper with the frames flattened (CartPole's stack for an MLP)."""

    def __init__(self, env: gym.Env[Any, Any], num_frames: int) -> None:
        stacked = gym.wrappers.FrameStackObservation(env, num_frames)
        super().__init__(gym.wrappers.FlattenObservation(stacked))


def main(
    iterations: int = 2,
    num_frames: int = 4,
    use_gym_wrapper_framestacking: bool = False,
    train_batch_size: int = 256,
    num_epochs: int = 10,
) -> Any:
    """Train ``iterations`` times; return the last result and the env runner's first batch of observations."""

    # Define our custom connector pipelines.
    def _make_env_to_module_connector(env: Any) -> FrameStackingEnvToModule:
        # Create the env-to-module connector. We return an individual connector piece
        # here, which cairn integrates into a pipeline (before its observation filter).
        return FrameStackingEnvToModule(num_frames=num_frames, multi_agent=False)

    def _make_learner_connector(input_observation_space: Any, input_action_space: Any) -> FrameStackingLearner:
        # Create the learner connector (in cairn, a confirmation of the env-to-module stacking).
        return FrameStackingLearner(num_frames=num_frames, multi_agent=False)

    # Create a CartPole setup (w/o framestacking in it, unless the gym wrapper does it).
    def _env_creator(cfg: dict[str, Any]) -> gym.Env[Any, Any]:
        env = gym.make("CartPole-v1", **cfg)
        # Perform framestacking either through ConnectorV2 or right here through
        # the observation wrapper.
        return _FlatFrameStack(env, num_frames) if use_gym_wrapper_framestacking else env

    register_env("cartpole-env", _env_creator)

    base_config = (
        PPOConfig()
        .environment("cartpole-env")
        .env_runners(
            # ... our frame stacking env-to-module connector.
            env_to_module_connector=(None if use_gym_wrapper_framestacking else _make_env_to_module_connector),
            num_envs_per_env_runner=2,
        )
        .training(
            # Use our frame stacking learner connector.
            learner_connector=(None if use_gym_wrapper_framestacking else _make_learner_connector),
            entropy_coeff=0.01,
            lr=0.00015,
            grad_clip=100.0,
            grad_clip_by="global_norm",
            train_batch_size_per_learner=train_batch_size,
        )
        .rl_module(model_config_dict={"vf_share_layers": True, "fcnet_hiddens": [32]})
    )

    # PPO specific settings.
    base_config.training(
        num_epochs=num_epochs,
        minibatch_size=min(64, train_batch_size),
        lambda_=0.95,
        clip_param=0.1,
        vf_clip_param=10.0,
    )

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        observation_shape = tuple(algo.env_runner.observation_space.shape)
        frames = algo.env_runner.get_state()["env_to_module_connector"].get("FrameStackingEnvToModule", {})
        return {"result": result, "observation_shape": observation_shape, "frames": frames.get("frames", np.zeros(0))}
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
