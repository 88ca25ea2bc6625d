"""Evaluation runners: RLlib's evaluation(...) config, evaluate(), explore=False, exact resume with them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from rl_helpers import small_config

from cairn.rl import PPO, PPOConfig
from cairn.rl.core import COMPONENT_EVAL_ENV_RUNNER, DEFAULT_MODULE_ID
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    EVALUATION_RESULTS,
    NUM_ENV_STEPS_SAMPLED,
    NUM_EPISODES,
)


def tiny_config(**overrides: object) -> PPOConfig:
    return small_config(
        rollout_length=16, minibatch_size=16, num_epochs=1, model_config={"hidden_sizes": [8]}, **overrides
    )


def test_train_evaluates_every_interval_and_evaluate_runs_one_on_demand() -> None:
    config = tiny_config().evaluation(
        evaluation_interval=2,
        evaluation_duration=3,
        evaluation_duration_unit="episodes",
        evaluation_num_env_runners=0,
        evaluation_config=PPOConfig.overrides(explore=False),
        evaluation_parallel_to_training=False,
    )
    assert config.evaluation_config == {"explore": False} and config.evaluation_interval == 2
    algo = config.build_algo()
    try:
        first = algo.train()
        assert EVALUATION_RESULTS not in first
        second = algo.train()
        evaluation = second[EVALUATION_RESULTS][ENV_RUNNER_RESULTS]
        assert evaluation[NUM_EPISODES] == 3  # exactly the duration: the first 3 episodes that ended
        assert evaluation[NUM_ENV_STEPS_SAMPLED] % (2 * 16) == 0  # whole rounds of rollout_length x envs
        assert evaluation["module_episode_returns_mean"] == {DEFAULT_MODULE_ID: evaluation[EPISODE_RETURN_MEAN]}
        # The evaluation runners' steps are not training steps.
        assert second[ENV_RUNNER_RESULTS]["num_env_steps_sampled_lifetime"] == 2 * 2 * 16
        on_demand = algo.evaluate()
        assert set(on_demand) == {ENV_RUNNER_RESULTS}  # RLlib's: what train() has under "evaluation"
        again = on_demand[ENV_RUNNER_RESULTS]
        assert again[NUM_EPISODES] == 3
        assert (
            again["num_env_steps_sampled_lifetime"]
            == evaluation["num_env_steps_sampled_lifetime"] + again[NUM_ENV_STEPS_SAMPLED]
        )
        assert algo.env_runner.num_env_steps_sampled_lifetime == 2 * 2 * 16  # training runners untouched
    finally:
        algo.stop()


def test_always_attach_evaluation_results_repeats_the_latest_evaluation() -> None:
    config = tiny_config().evaluation(
        evaluation_interval=2, evaluation_duration=1, always_attach_evaluation_results=True
    )
    algo = config.build_algo()
    try:
        assert EVALUATION_RESULTS not in algo.train()  # nothing evaluated yet
        evaluated = algo.train()[EVALUATION_RESULTS]
        assert algo.train()[EVALUATION_RESULTS] == evaluated  # iteration 3 does not evaluate: the latest one
    finally:
        algo.stop()
    with pytest.raises(ValueError, match="always_attach_evaluation_results must be True or False"):
        PPO(tiny_config(always_attach_evaluation_results=1))


def test_timesteps_unit_samples_at_least_the_duration() -> None:
    algo = PPO(
        tiny_config(
            evaluation_num_env_runners=0,
            evaluation_interval=1,
            evaluation_duration=40,
            evaluation_duration_unit="timesteps",
        )
    )
    try:
        evaluation = algo.evaluate()[ENV_RUNNER_RESULTS]
    finally:
        algo.stop()
    assert evaluation[NUM_ENV_STEPS_SAMPLED] == 64  # 2 rounds of 2 envs x 16 steps: the first >= 40


def test_explore_false_acts_with_forward_inference() -> None:
    greedy = EnvRunner(tiny_config(explore=False, observation_filter=None))
    exploring = EnvRunner(tiny_config(observation_filter=None))
    try:
        for runner, expect_greedy in ((greedy, True), (exploring, False)):
            batch = runner.sample_batches()[DEFAULT_MODULE_ID]
            module = runner.module[DEFAULT_MODULE_ID]
            obs = torch.from_numpy(batch["obs"].reshape(-1, 4))
            argmax = module.forward_inference({"obs": obs})["actions"].numpy()
            same = np.array_equal(argmax, batch["actions"].reshape(-1))
            assert same is expect_greedy  # a fresh policy is near uniform: sampled actions differ somewhere
    finally:
        greedy.close()
        exploring.close()


def test_exact_resume_with_evaluation_runners(tmp_path: Path) -> None:
    config = tiny_config(evaluation_interval=1, evaluation_duration=2, evaluation_config={"explore": False})
    straight = PPO(config)
    try:
        straight.train()
        path = straight.save_to_path(tmp_path / "mid")
        expected = [straight.train().flatten(wall_clock=False) for _ in range(2)]
        expected.append(straight.evaluate().flatten())
    finally:
        straight.stop()
    assert (Path(path) / COMPONENT_EVAL_ENV_RUNNER).is_dir()
    assert all("evaluation/env_runners/episode_return_mean" in r for r in expected[:2])
    resumed = PPO.from_checkpoint(path)
    try:
        got = [resumed.train().flatten(wall_clock=False) for _ in range(2)]
        got.append(resumed.evaluate().flatten())
    finally:
        resumed.stop()
    assert got == expected


def test_evaluation_settings_are_checked_before_anything_changes() -> None:
    config = tiny_config()
    before = dataclasses.replace(config)
    for settings, match in (
        ({"evaluation_parallel_to_training": True}, "not in parallel"),
        ({"evaluation_duration": "auto"}, "evaluates after the training step"),
        ({"evaluation_interval": 2, "evaluation_config": {"train_batch_size": 64}}, "do not train"),
        ({"evaluation_config": {"explore": "no"}}, "explore must be True or False"),
        ({"evaluation_duration_unit": "hours"}, "'episodes' or 'timesteps'"),
        ({"evaluation_config": {"num_env_runners": 2}}, "cannot change"),
        ({"evaluation_config": {"model_config": {"fcnet_hiddens": [4]}}}, "cannot change"),
        ({"evaluation_config": {"use_worker_filter_stats": True}}, "drop their own"),
        ({"evaluation_config": {"update_worker_filter_stats": 0}}, "drop their own"),
    ):
        with pytest.raises(ValueError, match=match):
            config.evaluation(**settings)
        assert config == before
    with pytest.raises(TypeError, match="has no setting 'no_such_thing'"):
        config.evaluation(evaluation_config={"no_such_thing": 1})
    # RLlib's use_worker_filter_stats=False is what cairn's evaluation runners do: taken, and nothing recorded.
    taken = tiny_config().evaluation(evaluation_config={"explore": False, "use_worker_filter_stats": False})
    assert taken.evaluation_config == {"explore": False}
    with pytest.raises(ValueError, match="only as True"):
        tiny_config().env_runners(use_worker_filter_stats=False)
    algo = PPO(tiny_config())
    try:
        with pytest.raises(ValueError, match="no evaluation runners"):
            algo.evaluate()
    finally:
        algo.stop()


def test_modules_added_and_removed_while_evaluating() -> None:
    from cairn.rl import RLModuleSpec

    algo = PPO(
        tiny_config(
            env="multi:CartPole-v1",
            num_agents=2,
            policies=("p0", "p1"),
            policy_mapping={"agent_0": "p0", "agent_1": "p1"},
            evaluation_interval=1,
            evaluation_duration=2,
        )
    )
    try:
        algo.train()
        algo.add_module("p2", RLModuleSpec())
        assert "p2" in algo.eval_env_runner.module_specs  # the evaluation runners act with every module
        evaluation = algo.train()[EVALUATION_RESULTS][ENV_RUNNER_RESULTS]
        assert set(evaluation["module_episode_returns_mean"]) <= {"p0", "p1"}  # p2 plays no agent
        algo.remove_module("p2")
        assert "p2" not in algo.eval_env_runner.module_specs
        assert algo.evaluate()[ENV_RUNNER_RESULTS][NUM_EPISODES] == 2
    finally:
        algo.stop()


def test_dqn_with_greedy_evaluation_resumes_exactly(tmp_path: Path) -> None:
    from cairn.rl import DQN, DQNConfig

    config = DQNConfig(
        env="CartPole-v1", rollout_length=8, num_envs_per_env_runner=1, model_config={"hidden_sizes": [8]}
    ).evaluation(
        evaluation_interval=1,
        evaluation_duration=16,
        evaluation_duration_unit="timesteps",
        evaluation_config={"explore": False},
    )
    straight = DQN(config)
    try:
        straight.train()
        path = straight.save_to_path(tmp_path / "mid")
        expected = [straight.train().flatten(wall_clock=False) for _ in range(2)]
    finally:
        straight.stop()
    assert expected[-1]["evaluation/env_runners/num_env_steps_sampled"] == 16
    resumed = DQN.from_checkpoint(path)
    try:
        assert [resumed.train().flatten(wall_clock=False) for _ in range(2)] == expected
    finally:
        resumed.stop()


def test_on_evaluate_start_and_end_run_as_class_hooks_then_functions() -> None:
    """RLlib's evaluation hooks: start before, end after each evaluation, from train() and evaluate();
    what on_evaluate_end adds to evaluation_metrics is in the returned results."""
    from episode_callbacks_helpers import EvaluationHooks, fn_evaluate_end, fn_evaluate_start

    EvaluationHooks.order.clear()
    config = (
        tiny_config(callbacks_class=EvaluationHooks)
        .evaluation(evaluation_interval=1, evaluation_duration=2)
        .callbacks(on_evaluate_start=fn_evaluate_start, on_evaluate_end=fn_evaluate_end)
    )
    assert config.callbacks_on_evaluate_start == ["episode_callbacks_helpers:fn_evaluate_start"]
    algo = PPO(config)
    try:
        result = algo.train()
        evaluation = result[EVALUATION_RESULTS]
        assert evaluation["return_seen_by_hook"] == evaluation[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]
        on_demand = algo.evaluate()
        assert on_demand["return_seen_by_hook"] == on_demand[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]
        assert EvaluationHooks.order == ["class_start", "class_end"] * 2
        assert algo.metrics.peek("evaluations_started") == 2
    finally:
        algo.stop()
