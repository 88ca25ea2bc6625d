"""RLlib's own PPO saved and restored through cairn: weights, Adam state, MeanStdFilter statistics, training goes on."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn

# The import the tests need, not the bare package: ray ships ray.rllib in every install, and with
# dm-tree present (a test dependency) it imports, while RLlib's algorithms still need its own extras (scipy).
pytest.importorskip("ray.rllib.algorithms.ppo", reason="RLlib is not installed (pip install 'cairn-rl[rllib]')")

from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.env_to_module import MeanStdFilter

from cairn.integrations import rllib as cairn_rllib
from cairn.testing import assert_states_equal

pytestmark = pytest.mark.usefixtures("ray_cluster")


def mean_std_filter(env: Any = None, spaces: Any = None, device: Any = None) -> MeanStdFilter:
    """A module-level connector factory: recorded by reference, so from_checkpoint needs no config."""
    return MeanStdFilter()


def _config(num_env_runners: int, seed: int, connector: Any = None) -> PPOConfig:
    if connector is None:
        # A lambda travels to remote env runners by value; the tests' module is not importable there.
        connector = lambda env=None, spaces=None, device=None: MeanStdFilter()  # noqa: E731
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=1,
            rollout_fragment_length=64,
            env_to_module_connector=connector,
        )
        .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1, lr=1e-3)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .debugging(seed=seed)
    )


def _learner_state(algo: Any) -> Any:
    state = algo.learner_group.get_state()["learner"]
    return {"rl_module": state["rl_module"], "optimizer": state["optimizer"]}


def _filter_states(algo: Any) -> list[Any]:
    """The MeanStdFilter statistics of the local env runner and of every remote one."""
    local = algo.env_runner.get_state(components="env_to_module_connector")["env_to_module_connector"]
    remote = algo.env_runner_group.foreach_env_runner(
        lambda w: w.get_state(components="env_to_module_connector")["env_to_module_connector"],
        local_env_runner=False,
    )
    return [cairn_rllib.to_cairn_state(s["MeanStdFilter"]) for s in [local, *remote]]


@pytest.mark.parametrize("num_env_runners", [0, 2])
def test_ppo_round_trip_through_cairn(tmp_path: Path, num_env_runners: int) -> None:
    algo = _config(num_env_runners, seed=0).build_algo()
    try:
        algo.train()
        algo.train()
        mgr = cairn.CheckpointManager(tmp_path / "run", keep_last=2)
        path = mgr.save(cairn_rllib.wrap(algo), 2)
        assert not cairn.verify_checkpoint(path)
        saved_learner = _learner_state(algo)
        saved_filters = _filter_states(algo)
        assert saved_filters[0][None]["running_stats"][0]["num_pushes"] > 0
    finally:
        algo.stop()

    fresh = _config(num_env_runners, seed=1).build_algo()
    try:
        fresh.train()  # a different state everywhere, Adam moments included
        cairn_rllib.restore(fresh, path)
        assert_states_equal(_learner_state(fresh), saved_learner)
        # Adam hyperparameters keep their Python types (ray-project/ray#51560).
        group = fresh.learner_group._learner._optimizer_parameters
        optim = next(iter(group))
        assert type(optim.param_groups[0]["betas"]) is tuple
        assert all(type(b) is float for b in optim.param_groups[0]["betas"])
        filters = _filter_states(fresh)
        assert len(filters) == 1 + num_env_runners
        for f in filters:  # the local runner and every remote one have the saved statistics
            stats, expected = f[None]["running_stats"][0], saved_filters[0][None]["running_stats"][0]
            assert stats["num_pushes"] == expected["num_pushes"]
            np.testing.assert_array_equal(stats["mean_array"], expected["mean_array"])
            np.testing.assert_array_equal(stats["sum_sq_diff_array"], expected["sum_sq_diff_array"])
        assert fresh.training_iteration == 2
        result = fresh.train()  # training goes on from the restored state
        assert result["training_iteration"] == 3
        after = _learner_state(fresh)["rl_module"]["default_policy"]
        assert any(not np.array_equal(v, saved_learner["rl_module"]["default_policy"][k]) for k, v in after.items())
    finally:
        fresh.stop()


@dataclass
class Trained:
    """One local PPO (a lambda in its config) trained once, saved by cairn and by RLlib."""

    config: Any
    cairn_path: str
    rllib_path: str
    learner: Any


@pytest.fixture(scope="module")
def trained(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    root = tmp_path_factory.mktemp("trained")
    config = _config(0, seed=0)
    algo = config.build_algo()
    try:
        algo.train()
        yield Trained(
            config=config,
            cairn_path=cairn_rllib.save(algo, root / "cairn"),
            rllib_path=algo.save_to_path(str(root / "rllib")),
            learner=_learner_state(algo),
        )
    finally:
        algo.stop()


def test_from_checkpoint_with_and_without_config(trained: Trained, tmp_path: Path) -> None:
    # The config's lambda could not be recorded: named, never silently dropped.
    with pytest.raises(cairn.IncompatibleCheckpointError, match="_env_to_module_connector"):
        cairn_rllib.from_checkpoint(trained.cairn_path)
    rebuilt = cairn_rllib.from_checkpoint(trained.cairn_path, config=trained.config)
    try:
        assert_states_equal(_learner_state(rebuilt), trained.learner)
    finally:
        rebuilt.stop()

    # With a module-level factory every constructor value is data or a reference: no config needed.
    algo = _config(0, seed=0, connector=mean_std_filter).build_algo()
    try:
        algo.train()
        path = cairn_rllib.save(algo, tmp_path / "ck2")
        weights = _learner_state(algo)
    finally:
        algo.stop()
    rebuilt = cairn_rllib.from_checkpoint(path)
    try:
        assert_states_equal(_learner_state(rebuilt), weights)
        assert rebuilt.train()["training_iteration"] == 2
    finally:
        rebuilt.stop()


def test_allow_pickle_keeps_what_pickle_can_hold(tmp_path: Path) -> None:
    config = _config(0, seed=0, connector=functools.partial(mean_std_filter))  # an object: not data, picklable
    algo = config.build_algo()
    try:
        algo.train()
        safe = cairn_rllib.save(algo, tmp_path / "safe")
        pickled = cairn_rllib.save(algo, tmp_path / "pickled", allow_pickle=True)
        weights = _learner_state(algo)
    finally:
        algo.stop()
    with pytest.raises(cairn.IncompatibleCheckpointError, match="_env_to_module_connector"):
        cairn_rllib.from_checkpoint(safe)
    with pytest.raises(cairn.UnsafeCheckpointError):
        cairn_rllib.from_checkpoint(pickled)
    rebuilt = cairn_rllib.from_checkpoint(pickled, allow_pickle=True)
    try:
        assert_states_equal(_learner_state(rebuilt), weights)
    finally:
        rebuilt.stop()


def test_module_alone_and_cli_tools(trained: Trained) -> None:
    path = trained.cairn_path
    module_path = f"{path}/learner_group/learner/rl_module/default_policy"
    saved = trained.learner["rl_module"]["default_policy"]
    # One RLModule, built from its own folder without an algorithm.
    module = cairn_rllib.from_checkpoint(module_path)
    assert_states_equal(cairn_rllib.to_cairn_state(module.get_state()), saved)
    # A component restored on its own into another algorithm, weights synced to its env runner.
    other = _config(0, seed=5).build_algo()
    try:
        cairn_rllib.restore(other, module_path, component="learner_group/learner/rl_module/default_policy")
        assert_states_equal(other.learner_group.get_state()["learner"]["rl_module"]["default_policy"], saved)
        for key, value in other.env_runner.module.get_state().items():
            np.testing.assert_array_equal(value, saved[key])
    finally:
        other.stop()
    cli = [sys.executable, "-m", "cairn"]
    assert subprocess.run([*cli, "verify", path], capture_output=True).returncode == 0
    out = subprocess.run([*cli, "inspect", path], capture_output=True, text=True, check=True).stdout
    assert "MeanStdFilter" in out and "default_policy" in out
    # cairn evaluate runs cairn's modules: on the bridge's checkpoints it says what to run instead.
    for target in (path, module_path):
        evaluated = subprocess.run([*cli, "evaluate", target, "--episodes", "1"], capture_output=True, text=True)
        assert evaluated.returncode == 1 and len(evaluated.stderr.strip().splitlines()) == 1, evaluated.stderr
        assert "RLlib bridge" in evaluated.stderr and "from_checkpoint" in evaluated.stderr


def test_convert_an_rllib_checkpoint(trained: Trained, tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "cairn"]
    converted = str(tmp_path / "converted")
    refused = subprocess.run([*cli, "convert", "rllib", trained.rllib_path, converted], capture_output=True, text=True)
    assert refused.returncode == 1 and "--allow-pickle" in refused.stderr and "Traceback" not in refused.stderr
    done = subprocess.run(
        [*cli, "convert", "rllib", trained.rllib_path, converted, "--allow-pickle"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "_env_to_module_connector" in done.stdout  # the lambda of the config is named as not kept
    assert subprocess.run([*cli, "verify", converted], capture_output=True).returncode == 0
    inspected = subprocess.run([*cli, "inspect", converted], capture_output=True, text=True, check=True).stdout
    assert "PICKLE" not in inspected and "default_policy" in inspected
    diff = subprocess.run([*cli, "diff", trained.cairn_path, converted], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout  # the same states as cairn's own save of that algorithm

    fresh = _config(0, seed=3).build_algo()
    try:
        cairn_rllib.restore(fresh, converted)
        assert_states_equal(_learner_state(fresh), trained.learner)
        assert fresh.train()["training_iteration"] == 2
    finally:
        fresh.stop()


def test_another_architecture_is_refused_with_a_checkpoint_error(trained: Trained) -> None:
    other = _config(0, seed=0).rl_module(model_config={"fcnet_hiddens": [32]}).build_algo()
    try:
        with pytest.raises(cairn.IncompatibleCheckpointError, match="set_state refused"):
            cairn_rllib.restore(other, trained.cairn_path)
    finally:
        other.stop()


def test_rllib_under_tune_with_cairn_checkpoints(tmp_path: Path) -> None:
    import ray.cloudpickle
    from ray import tune
    from ray.rllib.algorithms.ppo import PPO

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    trainable = cairn_rllib.with_cairn_checkpoints(PPO)
    results = tune.Tuner(
        trainable,
        param_space=_config(0, seed=0),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path / "tune"),
            stop={"training_iteration": 2},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
            verbose=0,
        ),
    ).fit()
    assert not results.errors
    checkpoint = Path(results[0].checkpoint.path)
    assert not list(checkpoint.rglob("*.pkl"))  # no RLlib (nor Tune) pickle in the checkpoint
    assert not cairn.verify_checkpoint(checkpoint / "cairn")
    fresh = _config(0, seed=4).build_algo()
    try:
        cairn_rllib.restore(fresh, checkpoint / "cairn")
        assert fresh.training_iteration == 2
    finally:
        fresh.stop()


def test_convert_a_damaged_rllib_checkpoint_names_it(trained: Trained, tmp_path: Path) -> None:
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(trained.rllib_path, damaged)
    state = damaged / "learner_group" / "learner" / "state.pkl"
    state.write_bytes(state.read_bytes()[:100])
    with pytest.raises(cairn.CorruptCheckpointError, match="damaged"):
        cairn_rllib.convert_checkpoint(damaged, tmp_path / "out", allow_pickle=True)
    assert not (tmp_path / "out").exists()
    with pytest.raises(cairn.CheckpointNotFoundError):
        cairn_rllib.convert_checkpoint(tmp_path / "nothing", tmp_path / "out", allow_pickle=True)
