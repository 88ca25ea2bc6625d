"""Remote env runners with frame stacking + flattening + MeanStdFilter resume bit for bit (issue 27).

Two runners: runner 1 writes ``env_runner/`` with its own connectors; runner 2's frame stacks
reach the checkpoint only with its environments (``other_env_runners``), and must come back there.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from dist_helpers import learner_state

from cairn.rl import PPO, PPOConfig
from cairn.rl.connectors.learner import FrameStackingLearner
from cairn.testing import assert_states_equal
from connector_helpers import flatten_and_stack


def remote_frames(algo: PPO) -> Any:
    assert algo.env_runner_group.remote is not None
    return [
        s["env_to_module_connector"]["FrameStackingEnvToModule"]
        for s in algo.env_runner_group.remote.get_connector_states()
    ]


def test_remote_runners_resume_their_own_frame_stacks_exactly(ray_cluster: Any, tmp_path: Path) -> None:
    config = dataclasses.replace(
        PPOConfig(
            env="CairnDictObs-v0",
            seed=5,
            observation_filter="MeanStdFilter",  # stacking + flattening + the filter, as the module doc says
            num_envs_per_env_runner=2,
            rollout_length=16,
            minibatch_size=16,
            num_epochs=1,
            model_config={"hidden_sizes": [8]},
        ),
        num_env_runners=2,
    )
    config = config.env_runners(env_to_module_connector=flatten_and_stack).training(
        learner_connector=functools.partial(FrameStackingLearner, num_frames=3)
    )
    straight = PPO(config)
    try:
        straight.train()
        straight.train()
        path = straight.save_to_path(tmp_path / "mid")
        saved_frames = remote_frames(straight)
        assert all(np.abs(f["frames"]).sum() > 0 for f in saved_frames)  # the runners' episodes in flight
        assert not np.array_equal(saved_frames[0]["frames"], saved_frames[1]["frames"])
        expected = straight.train().flatten(wall_clock=False)
        expected_learner, expected_frames = learner_state(straight), remote_frames(straight)
    finally:
        straight.stop()
    resumed = PPO.from_checkpoint(path)
    try:
        assert_states_equal(remote_frames(resumed), saved_frames)  # each its own stacks, not runner 1's
        result = resumed.train().flatten(wall_clock=False)
        assert result == expected
        assert_states_equal(learner_state(resumed), expected_learner)
        assert_states_equal(remote_frames(resumed), expected_frames)
    finally:
        resumed.stop()
