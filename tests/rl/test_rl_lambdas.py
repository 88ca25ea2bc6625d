"""Issue 39: configs take lambdas, closures and bound methods as RLlib does; checkpoints record none of them.

In one process a config with lambdas trains, saves and restores into the same live
algorithm; a checkpoint records only that each existed (role, qualname, module); a
new process's ``from_checkpoint`` asks for them by name in one error, and goes on
when they are passed; a forged record cannot make cairn call anything.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import cairn
import cairn.rl.env.games
from cairn import MissingCallableError
from cairn.registry import Unrecorded
from cairn.rl import PPO, PPOConfig
from cairn.rl.connectors.env_to_module import FlattenObservations
from cairn.testing import assert_states_equal

TICTACTOE = f"{cairn.rl.env.games.__name__}:TicTacToe"
SRC = str(Path(cairn.__file__).resolve().parents[1])


class Sides:
    """A bound method as the mapping function (RLlib scripts pass ``self.map`` too)."""

    def __init__(self, learner_side: str) -> None:
        self.learner_side = learner_side

    def map(self, agent_id: str, episode: Any, **kwargs: Any) -> str:
        return "learner" if agent_id.endswith(self.learner_side) else "frozen"


def lambda_config(**overrides: Any) -> PPOConfig:
    """TicTacToe with a bound-method mapping, a closure connector factory and a lambda callback."""
    episodes: list[int] = []

    def make_connectors(env: Any) -> Any:  # a closure: defined in a function
        return [FlattenObservations()]

    config = PPOConfig(
        env=TICTACTOE,
        seed=5,
        num_envs_per_env_runner=2,
        rollout_length=8,
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("learner", "frozen"),
        policy_mapping_fn=Sides("0").map,
        policies_to_train=("learner",),
        env_to_module_connector=make_connectors,
    ).callbacks(on_episode_end=lambda episode, **kw: episodes.append(1))
    return dataclasses.replace(config, **overrides)


def test_lambdas_train_save_and_restore_into_the_live_algorithm(tmp_path: Path) -> None:
    config = lambda_config()
    assert isinstance(config.policy_mapping_fn, Unrecorded)
    assert config.policy_mapping_fn("agent_0", None) == "learner"  # RLlib code calls it itself
    assert isinstance(config.env_to_module_connector["ref"], Unrecorded)
    algo = PPO(config)
    try:
        algo.train()
        path = algo.save_to_path(tmp_path / "ckpt")
        expected = [algo.train().flatten(wall_clock=False) for _ in range(2)]
        algo.restore_from_path(path)  # the live algorithm holds them: nothing is asked
        assert [algo.train().flatten(wall_clock=False) for _ in range(2)] == expected
    finally:
        algo.stop()
    # The checkpoint holds no code: only the records, each with role, module and qualname.
    ctor = (Path(path) / "ctor.json").read_text()
    records = [r for r in _records(json.loads(ctor))]
    roles = sorted((r["role"], r["qualname"]) for r in records)
    assert roles == [
        ("callbacks_on_episode_end", "lambda_config.<locals>.<lambda>"),
        ("env_to_module_connector", "lambda_config.<locals>.make_connectors"),
        ("policy_mapping_fn", "Sides.map"),
    ]
    assert "pickle" not in ctor and "cloudpickle" not in ctor


def _records(tree: Any) -> list[dict[str, Any]]:
    """Every Unrecorded record in a ctor.json tree."""
    found: list[dict[str, Any]] = []
    if isinstance(tree, dict):
        if set(tree) == {"role", "module", "qualname", "index"}:
            found.append(tree)
        for value in tree.values():
            found.extend(_records(value))
    elif isinstance(tree, list):
        for value in tree:
            found.extend(_records(value))
    return found
