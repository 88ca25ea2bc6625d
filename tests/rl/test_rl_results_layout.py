"""train()'s result in RLlib's nested layout, RLlib's key constants, the old flat names, Algorithm methods."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest
import torch
from rl_helpers import small_config

import cairn
import cairn._metrics
import cairn.rl.core as core
from cairn.rl import PPO
from cairn.rl.algorithms import algorithm_config
from cairn.rl.algorithms.results import ResultDict
from cairn.rl.env import multi_agent_env
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.utils import metrics as m
from cairn.testing import assert_states_equal, states_equal


def tiny(**overrides: object) -> PPO:
    return PPO(
        small_config(
            rollout_length=16, minibatch_size=16, num_epochs=1, model_config={"hidden_sizes": [8]}, **overrides
        )
    )


def test_train_returns_rllibs_nested_result_under_rllibs_key_constants() -> None:
    algo = tiny()
    try:
        algo.train()
        result = algo.train()
    finally:
        algo.stop()
    assert isinstance(result, ResultDict) and isinstance(result, dict)
    runners = result[m.ENV_RUNNER_RESULTS]
    assert runners[m.NUM_ENV_STEPS_SAMPLED] == 2 * 16
    assert runners[m.NUM_ENV_STEPS_SAMPLED_LIFETIME] == result[m.NUM_ENV_STEPS_SAMPLED_LIFETIME] == 2 * 2 * 16
    assert runners[m.NUM_AGENT_STEPS_SAMPLED_LIFETIME] == 2 * 2 * 16
    assert runners[m.NUM_EPISODES_LIFETIME] >= runners[m.NUM_EPISODES] > 0  # CartPole ends in 8..~40 steps at first
    assert runners[m.EPISODE_RETURN_MIN] <= runners[m.EPISODE_RETURN_MEAN] <= runners[m.EPISODE_RETURN_MAX]
    assert runners[m.EPISODE_LEN_MEAN] == runners[m.EPISODE_RETURN_MEAN]  # CartPole: +1 a step
    assert runners[m.MODULE_EPISODE_RETURNS_MEAN] == {core.DEFAULT_MODULE_ID: runners[m.EPISODE_RETURN_MEAN]}
    assert runners[m.AGENT_EPISODE_RETURNS_MEAN] == {core.DEFAULT_AGENT_ID: runners[m.EPISODE_RETURN_MEAN]}
    learner = result[m.LEARNER_RESULTS][core.DEFAULT_MODULE_ID]
    assert {"total_loss", "policy_loss", "vf_loss", "entropy", "lr"} <= set(learner)
    assert learner[m.NUM_MODULE_STEPS_TRAINED] == 2 * 16
    assert result[m.LEARNER_RESULTS][m.ALL_MODULES][m.NUM_MODULE_STEPS_TRAINED] == 2 * 16
    assert result[m.TIMERS][m.TRAINING_ITERATION_TIMER] > 0
    assert result[m.TRAINING_ITERATION] == 2 and result[m.NUM_TRAINING_STEP_CALLS_PER_ITERATION] == 1
    assert m.EVALUATION_RESULTS not in result  # no evaluation configured
    # RLlib's fault-tolerance counts (no remote runners here) and the settings, as JSON data.
    assert result["fault_tolerance"] == {"num_healthy_workers": 0, "num_remote_worker_restarts": 0}
    assert result["config"]["rollout_length"] == 16 and result["config"]["env"] == "CartPole-v1"
    assert json.loads(json.dumps(result["config"])) == result["config"]
    assert not any(k.startswith("config/") for k in result.flatten())  # settings, not metrics
    assert not any(k.startswith("config/") for k in cairn._metrics.jsonable_metrics(result))
    # The strings are RLlib's (ray.rllib.utils.metrics / ray.rllib.core).
    assert (m.ENV_RUNNER_RESULTS, m.LEARNER_RESULTS, m.EVALUATION_RESULTS, m.ALL_MODULES) == (
        "env_runners",
        "learners",
        "evaluation",
        "__all_modules__",
    )


def test_min_sample_timesteps_per_iteration_repeats_the_training_step() -> None:
    algo = PPO(
        small_config(rollout_length=16, minibatch_size=16, num_epochs=1, model_config={"hidden_sizes": [8]}).reporting(
            min_sample_timesteps_per_iteration=50
        )
    )
    try:
        result = algo.train()
    finally:
        algo.stop()
    # Two training steps of 2 envs x 16 steps reach 50 env steps; their trained steps add up.
    assert result[m.NUM_TRAINING_STEP_CALLS_PER_ITERATION] == 2
    assert result[m.ENV_RUNNER_RESULTS][m.NUM_ENV_STEPS_SAMPLED] == result[m.NUM_ENV_STEPS_SAMPLED_LIFETIME] == 64
    assert result[m.LEARNER_RESULTS][core.DEFAULT_MODULE_ID][m.NUM_MODULE_STEPS_TRAINED] == 64
    assert result[m.LEARNER_RESULTS][m.ALL_MODULES][m.NUM_MODULE_STEPS_TRAINED] == 64
    with pytest.raises(ValueError, match="min_sample_timesteps_per_iteration must be a non-negative int"):
        PPO(small_config(min_sample_timesteps_per_iteration=-1))


def test_multi_agent_results_are_per_module() -> None:
    algo = tiny(
        env="multi:CartPole-v1", num_agents=2, policies=("p0", "p1"), policy_mapping={"agent_0": "p0", "agent_1": "p1"}
    )
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert set(result[m.LEARNER_RESULTS]) == {"p0", "p1", m.ALL_MODULES}
    all_modules = result[m.LEARNER_RESULTS][m.ALL_MODULES][m.NUM_MODULE_STEPS_TRAINED]
    assert all_modules == sum(result[m.LEARNER_RESULTS][p][m.NUM_MODULE_STEPS_TRAINED] for p in ("p0", "p1"))
    runners = result[m.ENV_RUNNER_RESULTS]
    assert set(runners[m.MODULE_EPISODE_RETURNS_MEAN]) == {"p0", "p1"}
    assert m.AGENT_EPISODE_RETURNS_MEAN not in runners  # cairn keeps no per-agent window: no invented value
    assert "env_runner/p0/episode_return_mean" not in result  # the name before issue 37


def test_one_name_per_value_paths_and_serialisation() -> None:
    algo = tiny()
    try:
        result = algo.train()
    finally:
        algo.stop()
    runners = result["env_runners"]
    assert result["env_runners/episode_return_mean"] == runners["episode_return_mean"]
    assert result["env_runners/num_env_steps_sampled"] == 32
    assert result["num_env_steps_sampled_lifetime"] == runners["num_env_steps_sampled_lifetime"] == 32
    assert result["learners/default_policy/lr"] == result["learners"]["default_policy"]["lr"]
    assert result["timers/training_iteration"] > 0
    # The names before issue 37 are gone from results (old files are translated on read instead).
    for old in ("episode_return_mean", "num_env_steps_sampled", "learner/default_policy/lr", "perf/iteration_time_s"):
        assert old not in result
    assert result.get("no/such/path", 7) == 7 and result.get("num_episodes") is None
    with pytest.raises(KeyError):
        result["no_such_metric"]
    flat = result.flatten()
    assert flat["env_runners/episode_return_mean"] == runners["episode_return_mean"]
    assert not any(k.startswith(("learner/", "env_runner/")) for k in flat)
    assert not any(k.startswith(("timers/", "perf/")) for k in result.flatten(wall_clock=False))
    # A plain dict for JSON, deepcopy and pickling (Ray, Tune).
    assert json.loads(json.dumps(result)) == json.loads(json.dumps(dict(result)))
    for twin in (copy.deepcopy(result), pickle.loads(pickle.dumps(result)), result.copy()):
        assert (
            isinstance(twin, ResultDict)
            and twin == result
            and twin["env_runners/episode_return_mean"] == result["env_runners/episode_return_mean"]
        )


def test_component_constants_name_the_checkpoints_folders(tmp_path: Path) -> None:
    assert core.DEFAULT_MODULE_ID == algorithm_config.DEFAULT_MODULE_ID
    assert core.DEFAULT_AGENT_ID == multi_agent_env.DEFAULT_AGENT_ID
    algo = tiny(evaluation_interval=1, evaluation_duration=1)
    try:
        algo.train()
        names = [name for name, _ in algo.get_checkpointable_components()]
        path = Path(algo.save_to_path(tmp_path / "ckpt"))
    finally:
        algo.stop()
    assert names == [core.COMPONENT_ENV_RUNNER, core.COMPONENT_LEARNER_GROUP, core.COMPONENT_EVAL_ENV_RUNNER]
    for folder in (
        (core.COMPONENT_ENV_RUNNER, core.COMPONENT_ENV_TO_MODULE_CONNECTOR),
        (core.COMPONENT_ENV_RUNNER, core.COMPONENT_MODULE_TO_ENV_CONNECTOR),
        (core.COMPONENT_EVAL_ENV_RUNNER, core.COMPONENT_ENV_TO_MODULE_CONNECTOR),
        (core.COMPONENT_LEARNER_GROUP, core.COMPONENT_LEARNER, core.COMPONENT_RL_MODULE, core.DEFAULT_MODULE_ID),
    ):
        assert path.joinpath(*folder).is_dir(), folder


def test_env_runner_counters_in_algo_metrics_are_exact_after_a_restore(tmp_path: Path) -> None:
    key = (m.ENV_RUNNER_RESULTS, m.NUM_ENV_STEPS_SAMPLED_LIFETIME)
    algo = tiny()
    try:
        algo.train()
        algo.train()
        assert algo.metrics.peek(key) == algo.env_runner.num_env_steps_sampled_lifetime == 64
        assert (
            algo.metrics.peek((m.ENV_RUNNER_RESULTS, m.NUM_EPISODES_LIFETIME)) == algo.env_runner.num_episodes_lifetime
        )
        path = algo.save_to_path(tmp_path / "ckpt")
        restored = PPO.from_checkpoint(path)
        try:
            assert restored.metrics.peek(key) == 64 and restored.iteration == 2
            assert algo.train().flatten(wall_clock=False) == restored.train().flatten(wall_clock=False)
            assert restored.metrics.peek(key) == 96
        finally:
            restored.cleanup()
    finally:
        algo.stop()


def module_level_steps(runner: EnvRunner) -> int:
    """What foreach_env_runner calls (a function by reference: it could go to remote runners too)."""
    return runner.num_env_steps_sampled_lifetime


def test_restore_iteration_cleanup_foreach_env_runner_and_get_module(tmp_path: Path) -> None:
    algo = tiny()
    other = tiny(seed=11)
    try:
        algo.train()
        path = algo.save_to_path(tmp_path / "ckpt")
        assert algo.iteration == algo.training_iteration == 1
        other.restore(path)  # RLlib's restore(path) = restore_from_path
        assert other.iteration == 1
        assert states_equal(other.get_state(), algo.get_state())
        assert algo.foreach_env_runner(module_level_steps) == [32]
        assert algo.foreach_env_runner(lambda runner: runner.worker_index) == [0]  # local runners take any function
        # A "module:function" string names a function through the allow-list (issue 33), as a checkpoint would.
        with pytest.raises(cairn.UnsafeCheckpointError, match="not on cairn's allow-list"):
            algo.foreach_env_runner(f"{__name__}:module_level_steps")
        cairn.register(module_level_steps)
        assert algo.foreach_env_runner(f"{__name__}:module_level_steps") == [32]
        # get_module with a local learner: the live module the learner trains.
        module = algo.get_module()
        assert module is algo.learner_group.learner.module[core.DEFAULT_MODULE_ID]
        with torch.no_grad():
            for p in module.parameters():
                p.zero_()
        zeroed = algo.get_module().get_state()
        assert_states_equal(algo.learner_group.get_weights()[core.DEFAULT_MODULE_ID], zeroed)
    finally:
        algo.cleanup()
        algo.cleanup()  # idempotent, as stop()
        other.stop()


def test_get_trainable_cls_names_cairns_algorithms() -> None:
    from cairn.rl import DQN, SAC, PPOConfig
    from cairn.rl.algorithms.catalog import get_trainable_cls

    assert get_trainable_cls("PPO") is PPO and get_trainable_cls("dqn") is DQN and get_trainable_cls("SAC") is SAC
    assert get_trainable_cls("PPO").get_default_config() == PPOConfig()
    with pytest.raises(ValueError, match="No algorithm 'APPO'"):
        get_trainable_cls("APPO")


def test_logged_rows_carry_one_name_each_and_old_rows_read_under_it(tmp_path: Path) -> None:
    from cairn.cli.metrics_log import jsonable, read_metrics
    from cairn.cli.plot import MAIN_METRIC, SMALL_METRICS, build_panels

    algo = tiny(
        env="multi:CartPole-v1", num_agents=2, policies=("p0", "p1"), policy_mapping={"agent_0": "p0", "agent_1": "p1"}
    )
    try:
        rows = [jsonable(algo.train()) for _ in range(2)]
    finally:
        algo.stop()
    row = rows[-1]
    assert "learners/p0/entropy" in row and "env_runners/episode_return_mean" in row
    assert "env_runners/module_episode_returns_mean/p1" in row
    assert not [k for k in row if k.split("/")[0] in ("learner", "env_runner", "episode_return_mean")]
    assert "env_runners" not in row  # flat: no nested dicts in a metrics row
    (panel,) = build_panels([rows], ["entropy"], required=1)
    assert panel.modules == ["p0", "p1"]  # one curve per module
    # Rows cairn wrote before issue 37: old names only (before issue 28), both names (issue 28 on).
    old = {"training_iteration": 1, "num_env_steps_sampled_lifetime": 8, "episode_return_mean": 9.0}
    old |= {"learner/p0/entropy": 0.5, "env_runner/p0/episode_return_mean": 4.0, "perf/iteration_time_s": 2.0}
    both = {"training_iteration": 2, "num_env_steps_sampled_lifetime": 16, "episode_return_mean": 1.0}
    both |= {"env_runners/episode_return_mean": 11.0, "learner/p0/entropy": 0.4, "learners/p0/entropy": 0.4}
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (old, both)))
    first, second = read_metrics(str(tmp_path))
    assert first == {
        "training_iteration": 1,
        "num_env_steps_sampled_lifetime": 8,
        "env_runners/episode_return_mean": 9.0,
        "learners/p0/entropy": 0.5,
        "env_runners/module_episode_returns_mean/p0": 4.0,
        "timers/training_iteration": 2.0,
    }
    assert second["env_runners/episode_return_mean"] == 11.0 and "learner/p0/entropy" not in second
    main, entropy = build_panels([[first, second]], [MAIN_METRIC, *SMALL_METRICS], required=1)
    assert [p.points for p in main.curves] == [[(8.0, 9.0), (16.0, 11.0)]] and entropy.modules == ["p0"]
