"""RLlib's connector pipelines on cairn (issue 27 items 1-2): factories, frame stacking, flattening, user pieces.

The exact-resume test trains PPO with FlattenObservations + FrameStackingEnvToModule +
MeanStdFilter on a Dict-observation env with episodes in flight at the save.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from cairn.registry import Unrecorded
from cairn.rl import PPO, DQNConfig, PPOConfig
from cairn.rl.connectors.env_to_module import FlattenObservations, FrameStackingEnvToModule, MeanStdFilter
from cairn.rl.connectors.learner import FrameStackingLearner
from cairn.rl.env.env_runner import EnvRunner
from cairn.testing import assert_states_equal
from connector_helpers import ADD_STEP, AddEpisodeStep, ScaleActions, WrongSpace, flatten_and_stack, with_spaces


def config(env: str = "CartPole-v1", **settings: Any) -> PPOConfig:
    settings.setdefault("observation_filter", "MeanStdFilter")  # the pipelines here end in the filter
    return PPOConfig(
        env=env,
        seed=5,
        num_envs_per_env_runner=2,
        rollout_length=16,
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        **settings,
    )


def stacking(num_frames: int = 3) -> Any:
    return functools.partial(FrameStackingEnvToModule, num_frames=num_frames)


def test_frame_stacking_on_cartpole_the_module_sees_stacks_reset_at_episode_starts() -> None:
    cfg = config(observation_filter=None).env_runners(env_to_module_connector=stacking(3))
    assert cfg.env_to_module_connector == {
        "ref": "cairn.rl.connectors.env_to_module.frame_stacking:FrameStackingEnvToModule",
        "kwargs": {"num_frames": 3},
    }
    runner = EnvRunner(cfg.env_runners(rollout_fragment_length=40))
    assert runner.observation_space.shape == (12,)
    assert runner.module_specs["default_policy"].observation_space.shape == (12,)
    first = np.array(runner._obs, copy=True)
    batch = runner.sample_batches()["default_policy"]
    obs = batch["obs"]  # [T, N, 12]: oldest frame first
    np.testing.assert_array_equal(obs[0, :, :8], 0.0)  # the first episode has no older frames
    np.testing.assert_array_equal(obs[0, :, 8:], first)
    ended = batch["terminateds"] | batch["truncateds"]
    assert ended[:-1].any(), "CartPole ends some episode within 40 steps of random actions"
    for t in range(obs.shape[0] - 1):
        for slot in range(2):
            if ended[t, slot]:  # the next episode's first stack holds no frame of the ended one
                np.testing.assert_array_equal(obs[t + 1, slot, :8], 0.0)
            else:  # within an episode, each stack is the last one shifted by a frame
                np.testing.assert_array_equal(obs[t + 1, slot, :8], obs[t, slot, 4:])


def test_next_obs_and_final_values_continue_the_stack_the_module_saw() -> None:
    cfg = DQNConfig(
        env="CartPole-v1", seed=2, num_envs_per_env_runner=2, rollout_length=40, observation_filter=None
    ).env_runners(env_to_module_connector=stacking(3))
    runner = EnvRunner(cfg)
    batch = runner.sample_batches()["default_policy"]
    obs, next_obs = batch["obs"], batch["next_obs"]
    ended = batch["terminateds"] | batch["truncateds"]
    assert ended[:-1].any()
    np.testing.assert_array_equal(next_obs[:, :, :8], obs[:, :, 4:])  # the same episode's frames, ended or not
    going_on = ~ended[:-1]
    np.testing.assert_array_equal(next_obs[:-1][going_on], obs[1:][going_on])  # what the module saw next
    # The stack of the episode that ended (final_obs) is a look: the next call starts the new episode afresh.
    assert not np.array_equal(next_obs[:-1][ended[:-1]], obs[1:][ended[:-1]])


def test_multi_copies_stack_per_agent_and_the_multi_agent_runner_stacks_per_module() -> None:
    cfg = config(
        "multi:CartPole-v1", num_agents=2, policies=("p0", "p1"), policy_mapping={"agent_0": "p0", "agent_1": "p1"}
    )
    runner = EnvRunner(cfg.env_runners(env_to_module_connector=stacking(2)))
    batches = runner.sample_batches()
    assert batches["p0"]["obs"].shape == (16, 2, 8) and batches["p1"]["obs"].shape == (16, 2, 8)
    from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
    from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole

    ma = config(
        f"{MultiAgentCartPole.__module__}:MultiAgentCartPole",
        policies=("p0", "p1"),
        policy_mapping={0: "p0", 1: "p1"},
    )
    # The multi-agent runner builds one pipeline per module: each module sees its agents' stacked frames.
    ma_runner = MultiAgentEnvRunner(ma.env_runners(env_to_module_connector=stacking(2)))
    assert ma_runner.module_specs["p0"].observation_space.shape == (8,)
    ma_batches = ma_runner.sample_batches()
    assert ma_batches["p0"]["obs"].shape[-1] == 8
    # RLlib's sample() feeds the modules through pipelines of its own too (stacks of 8 from the env's 4; raw rows
    # of 4 would not fit the modules), and the batch sampler samples on after it.
    episodes = ma_runner.sample(num_timesteps=5, random_actions=False)
    assert 5 <= sum(len(e) for e in episodes) <= 5 + ma_runner.num_envs
    assert episodes[0].agent_episodes[0].get_observations(0).shape == (4,)  # the episodes keep the env's observations
    assert ma_runner.sample_batches()["p0"]["obs"].shape[1:] == (1, 8)


def test_flatten_observations_on_a_dict_env_matches_gymnasium_flatten() -> None:
    cfg = config("CairnDictObs-v0", observation_filter=None).env_runners(env_to_module_connector=FlattenObservations)
    runner = EnvRunner(cfg)
    space = runner.env.single_observation_space
    assert runner.observation_space == gym.spaces.Box(
        gym.spaces.flatten_space(space).low.astype(np.float32),
        gym.spaces.flatten_space(space).high.astype(np.float32),
        dtype=np.float32,
    )
    raw = {k: np.array(v, copy=True) for k, v in runner._obs.items()}
    obs = runner.sample_batches()["default_policy"]["obs"]
    for slot in range(2):
        row = {k: v[slot] for k, v in raw.items()}
        np.testing.assert_array_equal(obs[0, slot], gym.spaces.flatten(space, row).astype(np.float32))


def test_flatten_observations_on_tuple_and_discrete_spaces() -> None:
    runner = EnvRunner(config("CairnTupleObs-v0").env_runners(env_to_module_connector=FlattenObservations))
    assert runner.observation_space.shape == (5,)  # one-hot of Discrete(4), then Box(1)
    assert runner.env_to_module.connectors[-1].name == "MeanStdFilter"  # the default filter, after the user's piece
    batch = runner.sample_batches()["default_policy"]
    assert batch["obs"].shape == (16, 2, 5)

    piece = FlattenObservations()
    space = gym.spaces.Tuple((gym.spaces.Discrete(3, start=1), gym.spaces.MultiDiscrete([2, 3])))
    assert piece.set_input_spaces(space, gym.spaces.Discrete(2)).shape == (8,)
    rows = (np.array([1, 3]), np.array([[0, 2], [1, 0]]))
    out = piece(rl_module=None, batch={"obs": rows}, episodes=None)["obs"]
    for i in range(2):
        np.testing.assert_array_equal(out[i], gym.spaces.flatten(space, (rows[0][i], rows[1][i])))


def test_a_dict_space_without_flattening_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="FlattenObservations"):
        EnvRunner(config("CairnDictObs-v0"))


def test_a_user_connector_with_state_and_rllib_factory_signatures(tmp_path: Path) -> None:
    cfg = config().env_runners(env_to_module_connector=ADD_STEP)
    algo = PPO(cfg)
    try:
        assert algo.env_runner.observation_space.shape == (5,)
        names = [c.name for c in algo.env_runner.env_to_module.connectors]
        assert names == ["AddEpisodeStep", "MeanStdFilter"]  # user pieces first, then the filter (RLlib's order)
        algo.train()
        steps = algo.env_runner.get_state()["env_to_module_connector"]["AddEpisodeStep"]["steps"]
        assert steps.shape == (2,) and steps.min() >= 1
        path = algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        piece = restored.env_runner.env_to_module["AddEpisodeStep"]
        assert isinstance(piece, AddEpisodeStep) and piece.scale == 0.5
        np.testing.assert_array_equal(piece.steps, steps)
    finally:
        restored.stop()

    runner = EnvRunner(
        config("CairnDictObs-v0", observation_filter=None).env_runners(env_to_module_connector=with_spaces)
    )
    env, spaces, device = with_spaces.seen  # type: ignore[attr-defined]
    assert env is runner.env and device == "cpu" and spaces["__env__"][0] == runner.env.single_observation_space


def test_cairn_evaluate_runs_a_frame_stacked_module_through_the_saved_pipelines(tmp_path: Path) -> None:
    from cairn.cli.evaluate import _load_filter, evaluate_module
    from cairn.rl import ConnectorPipeline, RLModule

    # The module-to-env piece sends action 0 whatever the module chose (factor 0).
    zero = functools.partial(ScaleActions, factor=0.0)
    algo = PPO(config().env_runners(env_to_module_connector=stacking(3), module_to_env_connector=zero))
    try:
        algo.train()
        path = algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    path = Path(path)
    pipeline = ConnectorPipeline.from_checkpoint(path / "env_runner" / "env_to_module_connector")
    assert [c.name for c in pipeline.connectors] == ["FrameStackingEnvToModule", "MeanStdFilter"]
    count = pipeline["MeanStdFilter"].get_state()["count"]
    module = RLModule.from_checkpoint(path / "learner_group" / "learner" / "rl_module" / "default_policy")
    returns = evaluate_module(module, "CartPole-v1", episodes=2, seed=0, obs_filter=pipeline)
    assert len(returns) == 2 and min(returns) >= 1.0
    assert pipeline["MeanStdFilter"].get_state()["count"] == count  # the filter stayed frozen
    # With the saved module-to-env pipeline (what cairn evaluate loads), the env gets what the piece
    # makes of the module's actions: always 0, so each episode returns what pushing left returns.
    to_env = _load_filter(str(path), "module_to_env_connector")
    assert to_env is not None and [c.name for c in to_env.connectors] == ["ScaleActions"]
    env, pushing_left = gym.make("CartPole-v1"), []
    for episode in range(2):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(0)
            total, done = total + float(reward), terminated or truncated
        pushing_left.append(total)
    assert evaluate_module(module, "CartPole-v1", episodes=2, seed=0, obs_filter=pipeline, action_pipeline=to_env) == (
        pushing_left
    )


def test_lambdas_and_closures_are_kept_live_and_bad_factories_are_refused_with_what_to_write() -> None:
    # Issue 39: RLlib's lambda runs unchanged; the config keeps it, a checkpoint records only its names.
    stacked = config().env_runners(env_to_module_connector=lambda env: FrameStackingEnvToModule(num_frames=4))
    ref = stacked.env_to_module_connector["ref"]
    assert isinstance(ref, Unrecorded) and ref.role == "env_to_module_connector" and "<lambda>" in ref.qualname
    assert EnvRunner(stacked).observation_space.shape == (16,)

    def local_factory(env: Any) -> Any:
        return FlattenObservations()

    kept = config().env_runners(env_to_module_connector=local_factory).env_to_module_connector
    assert kept == {"ref": Unrecorded("env_to_module_connector", __name__, local_factory.__qualname__), "kwargs": {}}
    with pytest.raises(ValueError, match="plain data"):
        config().env_runners(env_to_module_connector=functools.partial(FlattenObservations, agent_ids={1, 2}))
    with pytest.raises(ValueError, match="positional"):
        config().env_runners(env_to_module_connector=functools.partial(FrameStackingEnvToModule, None))
    with pytest.raises(ValueError, match="from 1 to 1024"):
        FrameStackingEnvToModule(num_frames=10**9)  # a hostile recorded config must not allocate gigabytes
    wrong = EnvRunner(config().env_runners(env_to_module_connector=WrongSpace))
    with pytest.raises(ValueError, match="recompute_output_observation_space"):
        wrong.sample_batches()
    # A recorded reference to something that is no connector (a hostile config) is refused when resolved.
    bad = config()
    bad.env_to_module_connector = {"ref": "numpy:load", "kwargs": {}}
    with pytest.raises(Exception, match="numpy"):
        EnvRunner(bad)


def test_module_to_env_pieces_run_before_the_action_clipping() -> None:
    runner = EnvRunner(
        config("Pendulum-v1").env_runners(module_to_env_connector=functools.partial(ScaleActions, factor=10.0))
    )
    assert [c.name for c in runner.module_to_env.connectors] == ["ScaleActions", "ClipActions"]
    actions = np.array([[0.05], [0.5], [-1.0]], np.float32)
    out = runner.module_to_env(rl_module=runner.module, batch={"actions": actions}, episodes=None, slots=np.arange(3))
    np.testing.assert_allclose(out["actions"], [[0.5], [2.0], [-2.0]])  # scaled, then clipped to Pendulum's [-2, 2]
    assert runner.sample_batches()["default_policy"]["actions"].shape == (16, 2, 1)
    assert runner.metrics.peek("scaled_actions") == 16 * 2  # the runner hands its metrics logger to every piece


def test_a_module_to_env_factory_is_called_with_env_and_spaces_as_rllib_calls_it() -> None:
    seen: list[tuple[Any, dict[str, Any]]] = []

    def two_arguments(env: Any, spaces: dict[str, Any]) -> ScaleActions:  # RLlib's (env, spaces): no device
        seen.append((env, spaces))
        return ScaleActions(factor=1.0)

    runner = EnvRunner(config("Pendulum-v1").env_runners(module_to_env_connector=two_arguments))
    ((env, spaces),) = seen
    assert env is runner.env and spaces["__env_single__"][1] == runner.env.single_action_space
    assert [c.name for c in runner.module_to_env.connectors] == ["ScaleActions", "ClipActions"]


def test_rllib_api_single_agent_runner_feeds_its_module_through_the_pipelines() -> None:
    from cairn.rl.env.single_agent_env_runner import SingleAgentEnvRunner

    cfg = config("CairnDictObs-v0", observation_filter=None).env_runners(
        env_to_module_connector=flatten_and_stack, num_envs_per_env_runner=2
    )
    runner = SingleAgentEnvRunner(config=cfg)
    flat = int(gym.spaces.flatdim(runner.env.single_observation_space))
    assert runner.module is not None
    assert runner.module["default_policy"].observation_space.shape == (3 * flat,)  # built for the stacked rows
    episodes = runner.sample(num_timesteps=6, random_actions=False)
    assert sum(len(e) for e in episodes) == 6
    assert isinstance(episodes[0].get_observations(0), dict)  # the episodes keep the env's own observations
    runner.stop()


def test_frame_stacking_learner_is_accepted_only_paired_with_the_same_stacking() -> None:
    learner = functools.partial(FrameStackingLearner, num_frames=3)
    EnvRunner(config().env_runners(env_to_module_connector=stacking(3)).training(learner_connector=learner))
    with pytest.raises(ValueError, match="num_frames=3"):
        EnvRunner(config().env_runners(env_to_module_connector=stacking(2)).training(learner_connector=learner))
    with pytest.raises(ValueError, match="env_to_module_connector"):
        EnvRunner(config().training(learner_connector=ADD_STEP))


def test_mean_std_filter_at_rllibs_path_replaces_the_default_filter() -> None:
    runner = EnvRunner(
        config().env_runners(env_to_module_connector=functools.partial(MeanStdFilter, multi_agent=False))
    )
    assert [c.name for c in runner.env_to_module.connectors] == ["MeanStdFilter"]
    assert runner.env_to_module["MeanStdFilter"].shape == (4,)


def exact_resume_config() -> PPOConfig:
    return (
        config("CairnDictObs-v0")
        .env_runners(env_to_module_connector=flatten_and_stack)
        .training(learner_connector=functools.partial(FrameStackingLearner, num_frames=3))
    )


def test_exact_resume_with_frame_stacking_flattening_and_a_filter(tmp_path: Path) -> None:
    straight = PPO(exact_resume_config())
    try:
        straight.train()
        straight.train()
        path = straight.save_to_path(tmp_path / "mid")
        frames = straight.env_runner.get_state()["env_to_module_connector"]["FrameStackingEnvToModule"]["frames"]
        assert np.abs(frames).sum() > 0  # episodes in flight, with frames to carry over
        result = straight.train()
        expected = straight.get_state()
    finally:
        straight.stop()
    resumed = PPO.from_checkpoint(path)
    try:
        again = resumed.train()
        assert_states_equal(resumed.get_state(), expected)  # weights, optimizer, connector states, envs, RNGs
        assert again["env_runners/episode_return_mean"] == result["env_runners/episode_return_mean"]
    finally:
        resumed.stop()


RESUME_SCRIPT = r"""
import sys
import connector_helpers  # registers the env; the factory's module, imported as a program would
from cairn.rl import PPO

algo = PPO.from_checkpoint(sys.argv[1])
algo.train()
algo.save_to_path(sys.argv[2])
algo.stop()
"""


def test_exact_resume_in_a_new_process(tmp_path: Path) -> None:
    straight = PPO(exact_resume_config())
    try:
        straight.train()
        straight.train()
        path = straight.save_to_path(tmp_path / "mid")
        straight.train()
        expected = straight.get_state()
    finally:
        straight.stop()
    tests = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tests.parent / "src"), str(tests), env.get("PYTHONPATH", "")])
    final = tmp_path / "final"
    subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(path), str(final)], check=True, env=env, timeout=300)
    resumed = PPO.from_checkpoint(final)
    try:
        assert_states_equal(resumed.get_state(), expected)
    finally:
        resumed.stop()
