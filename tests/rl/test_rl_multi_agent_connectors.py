"""Connector pipelines in the multi-agent runner: per-module FlattenObservations / frame stacking / filters.

Agents with different spaces (a Dict agent and a Box agent) each get their module's
pipeline, built by the connectors' builders from the agents' spaces; the module is
built for the pipeline's output; frame stacks are kept per (env copy, agent) and
resume exactly.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from agent_spaces_helpers import DictAndBoxEnv, flatten_d_and_stack
from cairn.rl import PPO, PPOConfig
from cairn.rl.connectors.env_to_module import FlattenObservations, FrameStackingEnvToModule
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
from cairn.testing import assert_states_equal
from connector_helpers import ScaleActions

ENV = f"{DictAndBoxEnv.__module__}:DictAndBoxEnv"


def config(factory: Any = flatten_d_and_stack, **overrides: Any) -> PPOConfig:
    base = PPOConfig(
        env=ENV,
        seed=11,
        num_envs_per_env_runner=2,
        rollout_length=8,  # episodes of 5 steps: iterations end mid-episode
        minibatch_size=8,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("md", "mb"),
        policy_mapping={"d": "md", "b": "mb"},
    )
    return dataclasses.replace(base, **overrides).env_runners(env_to_module_connector=factory)


def train_results(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def test_a_dict_agent_and_a_box_agent_train_with_flattening_and_stacking_and_resume_exactly(tmp_path: Path) -> None:
    """FlattenObservations(multi_agent=True, agent_ids=["d"]) flattens only the Dict agent's observations,
    FrameStackingEnvToModule stacks both; each module is built for its pipeline's output, and a checkpoint
    taken mid-episode resumes bit for bit (frame stacks, filters, episodes)."""
    algo = PPO(config())
    runner = algo.env_runner
    assert algo.get_module("md").observation_space.shape == (15,)  # (3 one-hot + 2) * 3 frames
    assert algo.get_module("mb").observation_space.shape == (9,)  # Box(3,) unflattened, * 3 frames
    # The Box agent "b" is not in agent_ids: its observations pass FlattenObservations unchanged.
    assert (
        runner.env_to_module["mb"]["FlattenObservations"].observation_space == DictAndBoxEnv().observation_spaces["b"]
    )
    train_results(algo, 1)
    stacks = runner.env_to_module["md"]["FrameStackingEnvToModule"].get_state()
    assert len(stacks["slots"]) == 2 and np.abs(stacks["frames"]).sum() > 0  # one row per env copy of agent "d"
    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    try:
        assert not restored.env_runner.episodes_restarted
        assert restored.get_module("md").observation_space.shape == (15,)
        assert train_results(algo, 2) == train_results(restored, 2)
        assert_states_equal(algo.get_state(), restored.get_state())
    finally:
        algo.stop()
        restored.stop()


def test_each_agents_frame_stack_starts_with_its_episode() -> None:
    """The rows of one module's forward pass are (env copy, agent) pairs: each keeps its own stack, cleared
    (zeros) when the agent's episode starts, so the last frames of an ended episode never enter the next."""
    runner = MultiAgentEnvRunner(config(observation_filter=None, rollout_length=5))  # episodes of exactly 5 steps
    try:
        for _ in range(2):  # the second call's episodes follow ended ones in the same env copies
            obs = runner.sample_batches()["mb"]["obs"][:, 0]  # 2 trajectories of 5 rows (env copy 0, then 1)
            assert obs.shape == (10, 9)
            for start in (0, 5):
                assert not obs[start, :6].any() and obs[start, 6:].any()  # only the episode's first frame
                assert not obs[start + 1, :3].any()
                np.testing.assert_array_equal(obs[start + 1, 3:6], obs[start, 6:])  # the stack moves on
                np.testing.assert_array_equal(obs[start + 2, :6], obs[start + 1, 3:])
            assert not np.array_equal(obs[0, 6:], obs[5, 6:])  # two env copies, two histories
    finally:
        runner.close()


def test_flatten_observations_agent_ids_are_refused_where_they_cannot_hold() -> None:
    """agent_ids needs multi_agent=True and ids; a module serving listed and unlisted agents is refused when it is
    built, and a row of an agent treated otherwise (a mapping made per episode) when it comes."""
    with pytest.raises(ValueError, match="multi_agent=True"):
        FlattenObservations(agent_ids=["d"])
    with pytest.raises(ValueError, match="list of agent ids"):
        FlattenObservations(multi_agent=True, agent_ids="d")
    piece = FlattenObservations(multi_agent=True, agent_ids=["d", 1])
    with pytest.raises(ValueError, match="listed agents \\['d'\\] and the unlisted \\['1'\\]"):
        piece.serve_agents(["d", "1"])  # the int 1 is listed, the str "1" is not
    piece.serve_agents([1])
    space = gym.spaces.Dict({"x": gym.spaces.Discrete(2)})
    assert piece.set_input_spaces(space, gym.spaces.Discrete(2)) == gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    batch = {"obs": {"x": np.array([1, 0])}}
    with pytest.raises(ValueError, match="agent 'e' acts with it"):
        piece(rl_module=None, batch=batch, episodes=None, agent_ids=[1, "e"])
    out = piece(rl_module=None, batch=batch, episodes=None, agent_ids=[1, 1])
    np.testing.assert_array_equal(out["obs"], [[0.0, 1.0], [1.0, 0.0]])


def test_a_dict_agent_without_flattening_is_refused_naming_the_piece() -> None:
    """Flattening only agent "b" leaves agent "d"'s Dict observations to its module: refused at build time."""
    with pytest.raises(ValueError, match="FlattenObservations"):
        MultiAgentEnvRunner(config(functools.partial(FlattenObservations, multi_agent=True, agent_ids=["b"])))


def test_frame_stacking_alone_stacks_each_modules_own_space() -> None:
    """Agents of other Box spaces (SpacesEnv: 3 and 5 numbers): the stacker of each module stacks its own space."""
    runner = MultiAgentEnvRunner(
        config(
            functools.partial(FrameStackingEnvToModule, num_frames=2, multi_agent=True),
            env="agent_spaces_helpers:SpacesEnv",
            policies=("m0", "m1"),
            policy_mapping={"a0": "m0", "a1": "m1"},
        ).env_runners(module_to_env_connector=functools.partial(ScaleActions, factor=1.0))
    )
    try:
        assert runner.module["m0"].observation_space.shape == (6,)
        assert runner.module["m1"].observation_space.shape == (10,)
        batches = runner.sample_batches()
        assert batches["m0"]["obs"].shape[-1] == 6 and batches["m1"]["obs"].shape[-1] == 10
        # Both modules' module-to-env pieces got the runner's metrics logger: one row per agent step taken.
        assert runner.metrics.peek("scaled_actions") == runner.num_agent_steps_sampled_lifetime
    finally:
        runner.close()


def test_pettingzoo_rps_discrete_observations_train_with_flatten_observations_and_resume_exactly(
    tmp_path: Path,
) -> None:
    """RLlib's rock_paper_scissors examples on PettingZoo's rps_v2: its Discrete(4) observations are one-hot
    by FlattenObservations(multi_agent=True), so PPO's default module takes them (no custom module)."""
    pytest.importorskip("pettingzoo")
    from pettingzoo_games import RockPaperScissors

    cfg = config(
        functools.partial(FlattenObservations, multi_agent=True),
        env=f"{RockPaperScissors.__module__}:RockPaperScissors",
        env_config={"max_cycles": 5},
        policies=("p0", "p1"),
        policy_mapping={"player_0": "p0", "player_1": "p1"},
    )
    algo = PPO(cfg)
    try:
        assert algo.get_module("p0").observation_space == gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        train_results(algo, 1)
        restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "rps"))
        try:
            assert train_results(algo, 1) == train_results(restored, 1)
        finally:
            restored.stop()
    finally:
        algo.stop()
