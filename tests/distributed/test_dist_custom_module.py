"""A user's own RLModule with two data-parallel learners on Ray: exact resume, restore at another scale, add_module."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from dist_helpers import learner_state, small_config

from cairn.rl import PPO, RLModuleSpec
from cairn.testing import assert_states_equal

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import custom_module  # noqa: E402 - the example, importable under its own name


def _metrics(algo: PPO, n: int) -> list[str]:
    return [json.dumps(custom_module.metrics(algo.train())) for _ in range(n)]


def test_custom_module_two_learners_resume_and_another_scale(ray_cluster: Any, tmp_path: Path) -> None:
    # The workers must find the user's module class, as for any Ray program: here it is sent by
    # value (a user would install the module on the workers or use Ray's runtime_env py_modules).
    ray_cluster.cloudpickle.register_pickle_by_value(custom_module)
    config = custom_module.make_config(num_learners=2)
    straight = PPO(config)
    try:
        _metrics(straight, 1)
        path = straight.save_to_path(tmp_path / "mid")
        mid_state = learner_state(straight)
        expected = _metrics(straight, 1)
        expected_state = learner_state(straight)
    finally:
        straight.stop()

    resumed = PPO.from_checkpoint(path)
    try:
        assert resumed.learner_group.num_learners == 2
        assert type(resumed.get_module()) is custom_module.TinyCNNModule
        assert _metrics(resumed, 1) == expected
        assert_states_equal(learner_state(resumed), expected_state)
        # add_module reaches the remote learners; they stay identical.
        resumed.add_module("extra", RLModuleSpec(module_class=custom_module.TinyCNNModule))
        states = resumed.learner_group.remote.get_all_states()  # type: ignore[union-attr]
        assert "extra" in states[0]["rl_module"]
        assert_states_equal(states[0], states[1])
    finally:
        resumed.stop()

    # Another scale: the two learners' checkpoint restores into one local learner.
    local = PPO.from_checkpoint(path, config=dataclasses.replace(config, num_learners=0))
    try:
        assert local.learner_group.remote is None
        assert_states_equal(learner_state(local), mid_state)
        local.train()
    finally:
        local.stop()


def test_add_and_remove_module_reach_remote_env_runners(ray_cluster: Any, tmp_path: Path) -> None:
    algo = PPO(small_config(num_env_runners=1))
    try:
        algo.train()
        algo.add_module("extra", RLModuleSpec(), config_overrides={"lr": 1e-4})
        algo.train()
        [(_, runner_weights)] = algo.env_runner_group.remote.get_module_states()  # type: ignore[union-attr]
        assert_states_equal(runner_weights, algo.learner_group.get_weights())  # "extra" included
        path = algo.save_to_path(tmp_path / "added")
        algo.remove_module("extra")
        [(_, runner_weights)] = algo.env_runner_group.remote.get_module_states()  # type: ignore[union-attr]
        assert set(runner_weights) == {"default_policy"}
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        assert restored.config.policies == ("default_policy", "extra")
        [(_, runner_weights)] = restored.env_runner_group.remote.get_module_states()  # type: ignore[union-attr]
        assert set(runner_weights) == {"default_policy", "extra"}
        restored.train()
    finally:
        restored.stop()
