"""Issue 25's parity gaps of ``Algorithm.add_module`` / ``remove_module``.

RLlib returns the new ``MultiRLModuleSpec`` from both; on a ``"multi:"`` env (independent copies
with fixed agent -> module assignments) a mapping function would never be called, so it is
refused before anything changes, instead of being silently ignored.
"""

from __future__ import annotations

import pytest
from rl_helpers import small_config

import mapping_helpers
from cairn.rl import DQN, PPO, DQNConfig, MultiRLModuleSpec, RLModuleSpec


def _multi_copies_config() -> object:
    return small_config(
        env="multi:CartPole-v1",
        num_agents=2,
        policies=("p0",),
        rollout_length=8,
        model_config={"hidden_sizes": [8]},
    )


def test_a_mapping_function_on_multi_copies_is_refused_and_nothing_changes() -> None:
    algo = PPO(_multi_copies_config())  # type: ignore[arg-type]
    before = algo.config
    refused = r"add_module\(new_agent_to_module_mapping_fn=...\) is refused.*policy_mapping"
    with pytest.raises(ValueError, match=refused):
        algo.add_module("p1", RLModuleSpec(), new_agent_to_module_mapping_fn=mapping_helpers.always_main_v1)
    assert algo.config is before and "p1" not in algo.env_runner.module
    with pytest.raises(ValueError, match=r"remove_module\(new_agent_to_module_mapping_fn=...\) is refused"):
        algo.remove_module("p0", new_agent_to_module_mapping_fn=mapping_helpers.always_main_v1)
    assert algo.config.policies == ("p0",)
    algo.stop()


def test_a_config_with_a_mapping_function_on_multi_copies_is_refused() -> None:
    config = small_config(env="multi:CartPole-v1", policy_mapping_fn=mapping_helpers.always_main_v1)
    with pytest.raises(ValueError, match=r"policy_mapping_fn=.* is refused on env='multi:CartPole-v1'"):
        PPO(config)


def test_add_and_remove_module_return_the_multi_rl_module_spec() -> None:
    """Without a mapping function, add_module works on ``"multi:"`` copies and returns RLlib's spec."""
    algo = PPO(_multi_copies_config())  # type: ignore[arg-type]
    added = algo.add_module("p1", RLModuleSpec(model_config={"hidden_sizes": [4]}))
    assert isinstance(added, MultiRLModuleSpec)
    assert sorted(added.rl_module_specs) == ["p0", "p1"]
    assert added.rl_module_specs["p1"].model_config["hidden_sizes"] == [4]
    assert added == algo.config.rl_module_spec
    left = algo.remove_module("p1")
    assert isinstance(left, MultiRLModuleSpec) and sorted(left.rl_module_specs) == ["p0"]
    algo.stop()


def test_off_policy_add_module_returns_the_spec_and_adds_a_buffer() -> None:
    algo = DQN(DQNConfig(env="CartPole-v1", rollout_length=4, num_steps_sampled_before_learning_starts=0))
    added = algo.add_module("extra", RLModuleSpec())
    assert sorted(added.rl_module_specs) == ["default_policy", "extra"]
    assert "extra" in algo.replay_buffer
    algo.stop()
