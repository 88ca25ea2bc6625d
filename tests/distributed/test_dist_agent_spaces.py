"""Agents with different spaces and int agent ids on remote env runners (issue 27): per-module filters, exact resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from agent_spaces_helpers import DictAndBoxEnv, SpacesEnv, flatten_d_and_stack
from cairn.rl import PPO, PPOConfig
from cairn.testing import assert_states_equal


def _results(algo: PPO) -> dict[str, Any]:
    return algo.train().flatten(wall_clock=False)


def test_remote_runners_keep_int_ids_and_per_module_filters_through_a_checkpoint(
    ray_cluster: Any, tmp_path: Path
) -> None:
    config = PPOConfig(
        env=f"{SpacesEnv.__module__}:SpacesEnv",
        env_config={"ids": [0, 1, "1"], "dims": [3, 5, 5], "actions": [2, 3, 3]},
        seed=4,
        observation_filter="MeanStdFilter",  # per-module filters are what this test follows
        num_env_runners=2,
        num_envs_per_env_runner=2,
        rollout_length=8,  # episodes of 6 steps: the save falls mid-episode
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("m0", "m1"),
        policy_mapping={0: "m0", 1: "m1", "1": "m1"},
    )
    algo = PPO(config)
    _results(algo)
    # Both runners' deltas are merged per module: m1 serves two agents, m0 one.
    filters = {m: algo.env_runner.env_to_module[m]["MeanStdFilter"] for m in ("m0", "m1")}
    assert filters["m0"].count == 2 * 2 * 8 and filters["m1"].count == 2 * 2 * 2 * 8
    assert filters["m0"].mean.shape == (3,) and filters["m1"].mean.shape == (5,)

    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    assert not restored.env_runner.episodes_restarted
    state = restored.get_state(components="env_runner")["env_runner"]
    runners = [state["env"], *(other["env"] for other in state["other_env_runners"])]
    for episode in (ep for runner in runners for ep in runner["episodes"]):
        assert [(type(a), a) for a in episode["mapping"]] == [(int, 0), (int, 1), (str, "1")]
    for _ in range(2):
        assert _results(algo) == _results(restored)
    assert_states_equal(algo.get_state(components="learner_group"), restored.get_state(components="learner_group"))
    restored.stop()
    algo.stop()


def test_remote_runners_resume_their_own_per_agent_frame_stacks_of_a_dict_agent(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Two Ray runners with FlattenObservations(agent_ids=["d"]) + frame stacking per module: each keeps the stacks of
    its own (env copy, agent) rows with its environments, and a checkpoint taken mid-episode resumes bit for bit."""
    config = PPOConfig(
        env=f"{DictAndBoxEnv.__module__}:DictAndBoxEnv",
        seed=6,
        num_env_runners=2,
        num_envs_per_env_runner=2,
        rollout_length=8,  # episodes of 5 steps: the save falls mid-episode
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("md", "mb"),
        policy_mapping={"d": "md", "b": "mb"},
    ).env_runners(env_to_module_connector=flatten_d_and_stack)
    algo = PPO(config)
    _results(algo)
    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    try:
        state = restored.get_state(components="env_runner")["env_runner"]
        remote = [state["env"], *(other["env"] for other in state["other_env_runners"])]  # the two remote runners
        stacks = [r["connectors"]["env_to_module_connector"]["md"]["FrameStackingEnvToModule"] for r in remote]
        assert len(stacks) == 2 and not np.array_equal(stacks[0]["frames"], stacks[1]["frames"])
        for _ in range(2):
            assert _results(algo) == _results(restored)
    finally:
        restored.stop()
        algo.stop()
