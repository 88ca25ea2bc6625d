"""A MultiAgentEnv on remote env runners (issue 14 items 4, 5): sampling, add/remove_module, exact resume."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

import cairn.rl.env.games
import mapping_helpers
from cairn.rl import PPO, PPOConfig, RLModuleSpec
from cairn.rl.env.games import self_play_policy_mapping
from cairn.testing import assert_states_equal


def _results(algo: PPO) -> dict[str, Any]:
    return algo.train().flatten(wall_clock=False)


def test_self_play_on_remote_env_runners_resumes_exactly(ray_cluster: Any, tmp_path: Path) -> None:
    config = PPOConfig(
        env=f"{cairn.rl.env.games.__name__}:TicTacToe",
        seed=2,
        num_env_runners=2,
        num_envs_per_env_runner=2,
        rollout_length=7,  # iterations end mid-game
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [16]},
        policies=("main",),
        policy_mapping_fn=self_play_policy_mapping,
    )
    algo = PPO(config)
    first = _results(algo)
    assert first["num_env_steps_sampled_lifetime"] == 2 * 2 * 7
    # A frozen copy joins while the remote runners play: they build it and map new episodes to it.
    algo.add_module("main_v1", RLModuleSpec(), new_should_module_be_updated=("main",))
    algo.set_state({"learner_group": {"learner": {"rl_module": {"main_v1": algo.get_module("main").get_state()}}}})
    for _ in range(2):
        results = _results(algo)
    assert "env_runners/module_episode_returns_mean/main_v1" in results
    assert not any(k.startswith("learners/main_v1/") for k in results)

    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    assert restored.env_runner_group.num_env_runners == 2 and not restored.env_runner.episodes_restarted
    for _ in range(2):
        assert _results(algo) == _results(restored)
    assert_states_equal(algo.get_state(components="learner_group"), restored.get_state(components="learner_group"))
    assert dataclasses.asdict(restored.config)["policies"] == ("main", "main_v1")
    restored.stop()

    # main_v1 goes while the remote runners' games in flight use it: their agents re-map to "main".
    in_flight = [
        m for runner in _remote_env_states(algo) for episode in runner["episodes"] for m in episode["mapping"].values()
    ]
    assert "main_v1" in in_flight, "the test wants games in flight that main_v1 plays"
    # A mapping that still picks main_v1 for those agents: the remote runners refuse (the local one, which
    # plays no games, would not), and no runner changes, nor the learners or the config.
    config_before = algo.config
    with pytest.raises(ValueError, match=r"env runner .* cannot be removed"):
        algo.remove_module("main_v1", new_agent_to_module_mapping_fn=mapping_helpers.always_main_v1)
    assert algo.config is config_before
    assert "main_v1" in algo.env_runner.module and "main_v1" in algo.learner_group.module_specs
    remote = algo.env_runner_group.remote
    assert remote is not None
    assert all("main_v1" in states for _, states in remote.get_module_states())
    algo.remove_module("main_v1")
    again = PPO.from_checkpoint(algo.save_to_path(tmp_path / "without_main_v1"))
    assert not again.env_runner.episodes_restarted and again.config.policies == ("main",)
    assert _results(algo) == _results(again)
    algo.stop()
    again.stop()


def _remote_env_states(algo: PPO) -> list[dict[str, Any]]:
    """The ``env`` state of each remote runner (runner 1's, then those of runners 2..N)."""
    state = algo.get_state(components="env_runner")["env_runner"]
    return [state["env"], *(other["env"] for other in state["other_env_runners"])]
