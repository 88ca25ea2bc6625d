"""EnvRunner: checkpoints that continue sampling exactly, and unsavable envs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rl_helpers import CounterEnv, small_config

from cairn.rl import EnvRunner, EnvRunnerGroup, register_env_state_handler
from cairn.rl.env.env_state import _HANDLERS
from cairn.testing import CheckpointableContract, assert_states_equal


class TestEnvRunnerContract(CheckpointableContract):
    def make(self) -> EnvRunner:
        return EnvRunner(small_config(rollout_length=16))

    def mutate(self, obj: EnvRunner) -> None:  # type: ignore[override]
        obj.sample_batches()


class TestPendulumEnvRunnerContract(CheckpointableContract):
    def make(self) -> EnvRunner:
        return EnvRunner(small_config(env="Pendulum-v1", rollout_length=16))

    def mutate(self, obj: EnvRunner) -> None:  # type: ignore[override]
        obj.sample_batches()


def assert_batches_equal(a: dict, b: dict) -> None:  # type: ignore[type-arg]
    assert a.keys() == b.keys()
    for module_id in a:
        assert_states_equal(a[module_id], b[module_id])


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0"])
def test_restored_runner_samples_exactly_the_same(env: str, tmp_path: Path) -> None:
    # A long rollout crosses episode ends (CartPole) and time limits (Pendulum: 200 steps).
    runner = EnvRunner(small_config(env=env, rollout_length=120))
    runner.sample_batches()
    path = runner.save_to_path(tmp_path / "runner")
    restored = EnvRunner.from_checkpoint(path)
    assert not restored.episodes_restarted
    for _ in range(2):
        assert_batches_equal(runner.sample_batches(), restored.sample_batches())
    assert_states_equal(runner.get_metrics(), restored.get_metrics())
    assert_states_equal(runner.get_state(), restored.get_state())


def test_batch_layout() -> None:
    runner = EnvRunner(small_config(rollout_length=10))
    batch = runner.sample_batches()["default_policy"]
    assert batch["obs"].shape == (10, 2, 4) and batch["obs"].dtype == np.float32
    assert batch["actions"].shape == (10, 2) and batch["bootstrap_vf"].shape == (2,)
    assert runner.num_env_steps_sampled_lifetime == 20
    filt = runner.env_to_module["MeanStdFilter"]
    assert filt.get_state()["count"] == 20


def test_unsavable_env_records_that_episodes_restart(tmp_path: Path) -> None:
    runner = EnvRunner(small_config(env="CairnCounter-v0", rollout_length=5))
    runner.sample_batches()
    assert runner.get_metadata()["episodes_restart_on_restore"] is True
    assert runner.get_state()["env"]["saved"] is False
    path = runner.save_to_path(tmp_path / "r")
    restored = EnvRunner.from_checkpoint(path)
    assert restored.episodes_restarted
    # Everything else is restored: counters, filter statistics, RNG.
    assert restored.num_env_steps_sampled_lifetime == runner.num_env_steps_sampled_lifetime
    assert_states_equal(restored.env_to_module.get_state(), runner.env_to_module.get_state())


def test_registered_handler_makes_an_env_savable(tmp_path: Path) -> None:
    register_env_state_handler(CounterEnv, get=lambda env: {"t": env.t}, set=lambda env, s: setattr(env, "t", s["t"]))
    try:
        runner = EnvRunner(small_config(env="CairnCounter-v0", rollout_length=5))
        runner.sample_batches()
        restored = EnvRunner.from_checkpoint(runner.save_to_path(tmp_path / "r"))
        assert not restored.episodes_restarted
        assert_batches_equal(runner.sample_batches(), restored.sample_batches())
    finally:
        _HANDLERS.pop(CounterEnv, None)


def test_state_of_other_env_count_restarts_episodes(tmp_path: Path) -> None:
    runner = EnvRunner(small_config(rollout_length=5))
    runner.sample_batches()
    other = EnvRunner(small_config(rollout_length=5, num_envs_per_env_runner=3))
    other.restore_from_path(runner.save_to_path(tmp_path / "r"))
    assert other.episodes_restarted
    assert other.num_env_steps_sampled_lifetime == runner.num_env_steps_sampled_lifetime


def test_group_interface() -> None:
    group = EnvRunnerGroup(small_config(rollout_length=4))
    assert group.num_env_runners == 1
    (batches,) = group.sample_batches()
    assert "default_policy" in batches
    assert group.get_metrics()["num_env_steps_sampled_lifetime"] == 8
    assert group.remote is None  # num_env_runners=0: no Ray (remote runners: tests/distributed)
    group.close()
