"""Algorithm methods with Ray actors: get_module with remote learners (a copy), foreach_env_runner by
reference, and exact resume with remote evaluation runners."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

import torch
from dist_helpers import small_config

from cairn.rl import PPO
from cairn.rl.core import COMPONENT_EVAL_ENV_RUNNER, DEFAULT_MODULE_ID
from cairn.testing import assert_states_equal
from runner_functions import worker_and_steps


def test_remote_learners_runners_and_evaluation_runners(ray_cluster: Any, tmp_path: Path) -> None:
    config = small_config(
        num_env_runners=1,
        num_learners=2,
        evaluation_interval=1,
        evaluation_duration=2,
        evaluation_num_env_runners=1,
        evaluation_config={"explore": False},
    )
    straight = PPO(config)
    try:
        first = straight.train()
        assert first["evaluation"]["env_runners"]["num_episodes"] == 2
        # get_module with remote learners: an up-to-date copy, not the live module.
        module = straight.get_module()
        assert_states_equal(module.get_state(), straight.learner_group.get_weights()[DEFAULT_MODULE_ID])
        with torch.no_grad():
            for p in module.parameters():
                p.zero_()
        fresh = straight.get_module().get_state()
        assert any(bool(v.abs().sum() > 0) for v in fresh.values())  # the learners' weights were not zeroed
        # foreach_env_runner: the local runner (the group's totals), then the remote runner, by reference.
        steps = straight.env_runner.num_env_steps_sampled_lifetime
        assert straight.foreach_env_runner(worker_and_steps) == [(0, steps), (1, steps)]
        assert straight.foreach_env_runner(worker_and_steps, local_env_runner=False) == [(1, steps)]
        # A lambda travels as RLlib sends it (issue 39): with the call, over Ray's cloudpickle.
        assert straight.foreach_env_runner(lambda runner: runner.worker_index) == [0, 1]
        path = straight.save_to_path(tmp_path / "mid")
        expected = [straight.train().flatten(wall_clock=False) for _ in range(2)]
        # Restored in place (no new actors to start): every runner, the evaluation runner included,
        # goes back to the checkpoint and the run repeats bit for bit.
        straight.restore(path)
        assert straight.iteration == 1
        assert [straight.train().flatten(wall_clock=False) for _ in range(2)] == expected
    finally:
        straight.stop()
    assert (Path(path) / COMPONENT_EVAL_ENV_RUNNER).is_dir()
