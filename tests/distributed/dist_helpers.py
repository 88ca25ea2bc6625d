"""Helpers of the distributed tests: small configs, and views into the remote actors."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from cairn import _reader
from cairn.rl import PPO, PPOConfig
from cairn.testing import assert_states_equal

S3_SECRET = "cairn-dist-secret-5f0c9b"
"""The secret of the ``s3_filesystem`` fixture (moto takes any): distinctive, so that a test can look for its bytes."""


def small_config(**overrides: Any) -> PPOConfig:
    """A PPO config that trains in milliseconds per iteration."""
    base = PPOConfig(
        env="CartPole-v1",
        seed=5,
        num_envs_per_env_runner=2,
        rollout_length=32,
        minibatch_size=32,
        num_epochs=2,
        model_config={"hidden_sizes": [16, 16]},
        observation_filter="MeanStdFilter",  # these tests check the filter's checkpointing (not the default)
    )
    return dataclasses.replace(base, **overrides)


def files_of(path: str | Path) -> set[str]:
    """Relative paths of every file of a checkpoint tree."""
    root = Path(path)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def learner_state(algo: PPO) -> dict[str, Any]:
    """The learner's state (learner 0's when remote): weights, optimizers, RNG, counters."""
    state: dict[str, Any] = algo.learner_group.get_state()["learner"]
    return state


def assert_runners_on_learner_weights(algo: PPO) -> None:
    """Every sampling runner holds the learner's current weights, at the latest broadcast version."""
    weights = algo.learner_group.get_weights()
    remote = algo.env_runner_group.remote
    if remote is None:
        assert_states_equal(algo.env_runner.module.get_state(), weights)
        return
    for version, module_state in remote.get_module_states():
        assert version == remote.weights_version
        assert_states_equal(module_state, weights)


def filter_states(algo: PPO) -> list[dict[str, Any]]:
    """The MeanStdFilter state of the local runner, then of each remote runner."""
    states = [algo.env_runner.env_to_module["MeanStdFilter"].get_state()]
    if algo.env_runner_group.remote is not None:
        states += [
            s["env_to_module_connector"]["MeanStdFilter"] for s in algo.env_runner_group.remote.get_connector_states()
        ]
    return states


def no_leftovers(parent: str | Path) -> list[str]:
    """Hidden staging folders a save left behind in ``parent``."""
    return [name for name in os.listdir(parent) if ".cairn-tmp-" in name]


def assert_same_states(a: str, b: str) -> None:
    """Every folder of checkpoint ``a`` holds the same state as that of ``b``."""
    folders_a = dict(_reader.iter_folders(_reader.open_checkpoint(a, None)))
    folders_b = dict(_reader.iter_folders(_reader.open_checkpoint(b, None)))
    assert folders_a.keys() == folders_b.keys()
    for name, reader in folders_a.items():
        assert_states_equal(reader.state(False), folders_b[name].state(False))
