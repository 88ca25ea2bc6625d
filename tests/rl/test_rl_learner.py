"""Learner and LearnerGroup: checkpoints, optimizer types after restore, updates."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from rl_helpers import fake_train_batch, small_config

from cairn.errors import IncompatibleCheckpointError
from cairn.rl import DefaultPPORLModule, Learner, LearnerGroup, LinearSchedule, PPOConfig, PPOLearner, RLModuleSpec
from cairn.rl.core.learner.learner import PiecewiseSchedule, lr_schedule_for
from cairn.testing import CheckpointableContract, assert_states_equal

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
SPECS = {"default_policy": RLModuleSpec(DefaultPPORLModule, OBS, ACT, {"hidden_sizes": [16]}, seed=0)}


def make_learner() -> Learner:
    return PPOLearner(small_config(), SPECS)


class TestLearnerContract(CheckpointableContract):
    def make(self) -> Learner:
        return make_learner()

    def mutate(self, obj: Learner) -> None:  # type: ignore[override]
        obj.update({"default_policy": fake_train_batch()})


class TestLearnerGroupContract(CheckpointableContract):
    def make(self) -> LearnerGroup:
        return LearnerGroup(small_config(), SPECS)

    def mutate(self, obj: LearnerGroup) -> None:  # type: ignore[override]
        obj.update({"default_policy": fake_train_batch()})


def test_update_metrics_and_counters() -> None:
    learner = make_learner()
    metrics = learner.update({"default_policy": fake_train_batch(64)})
    for name in ("policy_loss", "vf_loss", "entropy", "approx_kl", "clip_fraction", "lr"):
        assert f"learners/default_policy/{name}" in metrics
    assert learner.num_module_steps_trained_lifetime["default_policy"] == 64
    # 2 epochs x 2 minibatches of 32
    assert learner.num_updates_lifetime == 4


def test_optimizer_types_after_restore_and_next_step_works(tmp_path: Path) -> None:
    learner = make_learner()
    learner.update({"default_policy": fake_train_batch()})
    path = learner.save_to_path(tmp_path / "learner")
    restored = Learner.from_checkpoint(path)
    optimizer = restored.optimizers["default_policy"]
    group = optimizer.param_groups[0]
    assert type(group["betas"]) is tuple and all(type(b) is float for b in group["betas"])
    assert type(group["lr"]) is float and type(group["eps"]) is float
    for param_state in optimizer.state.values():
        assert isinstance(param_state["step"], torch.Tensor)
        assert isinstance(param_state["exp_avg"], torch.Tensor)
        assert isinstance(param_state["exp_avg_sq"], torch.Tensor)
    # The optimizer's state is keyed by the restored module's own parameters.
    params = list(restored.module["default_policy"].parameters())
    assert set(optimizer.state) == set(params)
    # The next step works and equals the original learner's next step.
    batch = {"default_policy": fake_train_batch(64)}
    m1 = learner.update(batch)
    m2 = restored.update(batch)
    assert m1 == m2
    assert_states_equal(learner.get_state(), restored.get_state())


def test_normalizes_foreign_optimizer_state() -> None:
    learner = make_learner()
    learner.update({"default_policy": fake_train_batch()})
    state = learner.get_state(not_components="rl_module")
    group = state["optimizers"]["default_policy"]["param_groups"][0]
    group["betas"] = [torch.tensor(0.9), np.float64(0.999)]  # as some tools write them
    group["lr"] = torch.tensor(1e-3)
    learner.set_state(state)
    restored_group = learner.optimizers["default_policy"].param_groups[0]
    assert restored_group["betas"] == (pytest.approx(0.9), 0.999)
    assert all(type(b) is float for b in restored_group["betas"])
    learner.update({"default_policy": fake_train_batch()})


def test_optimizer_state_that_does_not_fit(tmp_path: Path) -> None:
    learner = make_learner()
    learner.update({"default_policy": fake_train_batch()})
    other_specs = {"default_policy": RLModuleSpec(DefaultPPORLModule, OBS, ACT, {"hidden_sizes": [16, 16]}, seed=0)}
    other = PPOLearner(small_config(), other_specs)
    state = learner.get_state(not_components="rl_module")
    with pytest.raises(IncompatibleCheckpointError, match="default_policy"):
        other.set_state(state)


def test_linear_schedule() -> None:
    s = LinearSchedule(1.0, 0.0, 100)
    assert s.value(0) == 1.0 and s.value(50) == 0.5 and s.value(1000) == 0.0
    assert LinearSchedule(2.0, 0.0, None).value(10**9) == 2.0


def test_piecewise_schedule_is_linear_between_its_points_and_keeps_the_last_value() -> None:
    s = PiecewiseSchedule([[0, 1e-3], [100, 1e-4], [300, 3e-4]])
    assert s.value(0) == 1e-3 and s.value(100) == 1e-4 and s.value(10**9) == 3e-4
    assert s.value(50) == pytest.approx(5.5e-4) and s.value(200) == pytest.approx(2e-4)
    assert PiecewiseSchedule([[0, 2e-4]]).value(7) == 2e-4
    scheduled = lr_schedule_for(PPOConfig().training(lr=[[0, 1e-3], [100, 1e-4]]))
    assert isinstance(scheduled, PiecewiseSchedule) and scheduled.value(100) == 1e-4
    assert isinstance(lr_schedule_for(PPOConfig().training(lr=1e-3)), LinearSchedule)


def test_add_and_remove_module() -> None:
    learner = make_learner()
    learner.add_module("extra", RLModuleSpec(DefaultPPORLModule, OBS, ACT, {}, seed=1).build())
    assert set(learner.optimizers) == {"default_policy", "extra"}
    learner.update({"extra": fake_train_batch()})
    learner.remove_module("extra")
    assert set(learner.optimizers) == {"default_policy"}


def test_more_than_one_learner_needs_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ValueError, match=r"pip install 'cairn-rl\[ray\]'"):
        LearnerGroup(small_config(num_learners=2), SPECS)


def test_from_checkpoint_rebuilds_added_and_removed_modules(tmp_path: Path) -> None:
    """add_module / remove_module change what the checkpoint records: from_checkpoint rebuilds exactly those."""
    learner = make_learner()
    learner.add_module("p1", RLModuleSpec(DefaultPPORLModule, OBS, ACT, {"hidden_sizes": [8]}, seed=1).build())
    learner.update({"p1": fake_train_batch()})
    path = learner.save_to_path(tmp_path / "added")
    restored = Learner.from_checkpoint(path)
    assert set(restored.module) == {"default_policy", "p1"}
    assert_states_equal(restored.get_state(), learner.get_state())

    learner.remove_module("default_policy")
    path = learner.save_to_path(tmp_path / "removed")
    restored = Learner.from_checkpoint(path)
    assert set(restored.module) == {"p1"} and set(restored.optimizers) == {"p1"}
    assert_states_equal(restored.get_state(), learner.get_state())


def test_learner_group_add_module_with_overrides_is_recorded(tmp_path: Path) -> None:
    group = LearnerGroup(small_config(lr_anneal_timesteps=None), SPECS)
    spec = RLModuleSpec(observation_space=OBS, action_space=ACT, model_config={"hidden_sizes": [8]}, seed=3)
    with pytest.raises(ValueError, match="does not have"):
        group.add_module("p1", spec, config_overrides={"no_such_setting": 1})
    assert "p1" not in group.learner.module and group.config.algorithm_config_overrides_per_module == {}
    group.add_module("p1", spec, config_overrides={"lr": 1e-3, "num_epochs": 1})
    assert group.learner.optimizers["p1"].param_groups[0]["lr"] == 1e-3
    metrics = group.update({"p1": fake_train_batch(), "default_policy": fake_train_batch()})
    assert metrics["learners/p1/lr"] == 1e-3 and metrics["learners/default_policy/lr"] == small_config().lr
    path = group.save_to_path(tmp_path / "g")
    rebuilt = LearnerGroup.from_checkpoint(path)
    assert set(rebuilt.learner.module.keys()) == {"default_policy", "p1"}
    assert rebuilt.learner.config_for_module("p1").num_epochs == 1
    assert_states_equal(rebuilt.get_state(), group.get_state())
    group.remove_module("p1")
    assert set(LearnerGroup.from_checkpoint(group.save_to_path(tmp_path / "g2")).learner.module.keys()) == {
        "default_policy"
    }
