"""Issue 39 on Ray: a remote env runner gets the config's lambdas as RLlib sends them (Ray's cloudpickle).

They travel with the config, from the driver, never through a file: the mapping function, a
callback, and the env creator a ``register_env`` lambda gave the env's name (the worker never
registered it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

import cairn.rl.env.games
from cairn import MissingCallableError
from cairn.registry import Unrecorded
from cairn.rl import PPO, PPOConfig, register_env


def test_a_remote_runner_calls_a_lambda_env_creator_mapping_fn_and_callback(ray_cluster: Any, tmp_path: Path) -> None:
    side = "0"  # a closure over the driver's variable, as RLlib scripts write them
    # Registered in the driver only: the remote runner builds its env with the creator its config brings.
    register_env("dist-lambda-tictactoe", lambda cfg: cairn.rl.env.games.TicTacToe(cfg))
    config = PPOConfig(
        env="dist-lambda-tictactoe",
        num_env_runners=1,
        num_envs_per_env_runner=2,
        rollout_length=8,
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("learner", "frozen"),
        policy_mapping_fn=lambda agent_id, episode, **kw: "learner" if agent_id.endswith(side) else "frozen",
    ).callbacks(
        on_episode_end=lambda metrics_logger, **kw: metrics_logger.log_value("lambda_episodes", 1, reduce="sum")
    )
    assert isinstance(config.policy_mapping_fn, Unrecorded) and isinstance(config.env_creator, Unrecorded)
    algo = PPO(config)
    try:
        result = algo.train().flatten(wall_clock=False)
        path = algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    assert result["env_runners/lambda_episodes"] > 0  # the lambda ran in the remote runner
    assert {"learner", "frozen"} <= {k.split("/")[2] for k in result if k.startswith("env_runners/module_episode_")}
    with pytest.raises(
        MissingCallableError, match=r"policy_mapping_fn: '\S+<lambda>'.*callbacks_on_episode_end\[0\]"
    ) as err:
        PPO.from_checkpoint(path)  # no Ray actor is started before the error
    assert "env:" not in str(err.value)  # this process registered the env's name: the name brings its creator
