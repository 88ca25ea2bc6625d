"""load_state_path carries the observation filter (issue 28 item 6): the companion component
``<algo ckpt>/env_runner/env_to_module_connector`` starts the new algorithm's env runners."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rl_helpers import small_config

from cairn.rl import PPO, MultiRLModuleSpec, RLModule, RLModuleSpec
from cairn.rl.utils.companions import companion_root
from cairn.testing import assert_states_equal

MODULE_FOLDER = "learner_group/learner/rl_module/default_policy"


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """A single-agent PPO trained behind a MeanStdFilter: (checkpoint, its filter state, its module weights)."""
    root = tmp_path_factory.mktemp("pretrained") / "ckpt"
    algo = PPO(small_config(rollout_length=16, minibatch_size=16, num_epochs=1))
    try:
        algo.train()
        algo.save_to_path(root)
        return root, algo.env_runner.env_to_module.get_state(), algo.get_module().get_state()
    finally:
        algo.stop()


def test_a_loaded_module_brings_its_filter_state(pretrained: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    """The new algorithm's runners start from the trained filter; training and checkpoints go on from there."""
    root, filter_state, weights = pretrained
    assert companion_root(str(root / MODULE_FOLDER)) == (str(root), ["MeanStdFilter"])
    spec = RLModuleSpec(load_state_path=str(root / MODULE_FOLDER))
    algo = PPO(small_config(seed=11, rl_module_spec=spec, rollout_length=16, minibatch_size=16, num_epochs=1))
    try:
        assert_states_equal(algo.env_runner.env_to_module.get_state(), filter_state)
        assert_states_equal(algo.get_module().get_state(), weights)
        count = int(filter_state["MeanStdFilter"]["count"])
        algo.train()
        assert (
            int(algo.env_runner.env_to_module.get_state()["MeanStdFilter"]["count"]) == count + 2 * 16
        )  # 2 envs x 16 steps
    finally:
        algo.stop()


def test_the_multi_agent_runner_with_one_filter_loads_it_too(
    pretrained: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    """Two modules of a multi-agent config load the single-agent module: the shared filter starts from its state."""
    root, filter_state, _ = pretrained
    path = str(root / MODULE_FOLDER)
    specs = {"p0": RLModuleSpec(load_state_path=path), "p1": RLModuleSpec(load_state_path=path)}
    config = small_config(
        env="multi:CartPole-v1",
        num_agents=2,
        policies=("p0", "p1"),
        policy_mapping={"agent_0": "p0", "agent_1": "p1"},
        rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs),
    )
    algo = PPO(config)
    try:
        assert_states_equal(algo.env_runner.env_to_module.get_state(), filter_state)
    finally:
        algo.stop()


def test_a_config_without_the_filter_is_refused_unless_it_opts_out(
    pretrained: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    root, _, weights = pretrained
    spec = RLModuleSpec(load_state_path=str(root / MODULE_FOLDER))
    with pytest.raises(ValueError, match=r"observation_filter.*load_pretrained_connectors = False"):
        PPO(small_config(rl_module_spec=spec, observation_filter=None))
    algo = PPO(small_config(rl_module_spec=spec, observation_filter=None, load_pretrained_connectors=False))
    try:
        assert len(algo.env_runner.env_to_module) == 0
        assert_states_equal(algo.get_module().get_state(), weights)  # the weights still load
    finally:
        algo.stop()
    fresh = PPO(small_config(rl_module_spec=spec, load_pretrained_connectors=False))
    try:
        assert int(fresh.env_runner.env_to_module.get_state()["MeanStdFilter"]["count"]) == 0
    finally:
        fresh.stop()


def test_a_module_saved_on_its_own_has_no_companion(
    pretrained: tuple[Path, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    """Only the exact module folder of an algorithm checkpoint has a companion; a lone module loads weights only."""
    root, _, weights = pretrained
    lone = tmp_path / "learner_group" / "learner" / "rl_module" / "default_policy"  # the layout, but no algorithm
    RLModule.from_checkpoint(root / MODULE_FOLDER).save_to_path(lone)
    assert companion_root(str(lone)) is None
    assert companion_root(str(root / "learner_group" / "learner" / "rl_module")) is None
    algo = PPO(small_config(rl_module_spec=RLModuleSpec(load_state_path=str(lone))))
    try:
        assert int(algo.env_runner.env_to_module.get_state()["MeanStdFilter"]["count"]) == 0
        assert_states_equal(algo.get_module().get_state(), weights)
    finally:
        algo.stop()


def test_the_loaded_filter_resumes_exactly(
    pretrained: tuple[Path, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    """The new algorithm's own checkpoint holds the filter; from_checkpoint does not read the start checkpoint again."""
    root, _, _ = pretrained
    spec = RLModuleSpec(load_state_path=str(root / MODULE_FOLDER))
    config = small_config(seed=5, rl_module_spec=spec, rollout_length=16, minibatch_size=16, num_epochs=1)
    straight = PPO(config)
    straight.train()
    straight.save_to_path(tmp_path / "mid")
    expected = straight.train()
    expected_filter = straight.env_runner.env_to_module.get_state()
    straight.stop()
    resumed = PPO.from_checkpoint(tmp_path / "mid")
    try:
        assert resumed.config.rl_module_spec is None or resumed.config.rl_module_spec.load_state_path is None
        result = resumed.train().flatten(wall_clock=False)
        expected = expected.flatten(wall_clock=False)
        keys = [k for k in expected if "return" in k or k.startswith("learners/")]
        assert keys and all(np.array_equal(result[k], expected[k], equal_nan=True) for k in keys)
        assert_states_equal(resumed.env_runner.env_to_module.get_state(), expected_filter)
    finally:
        resumed.stop()


def test_a_remote_runner_starts_from_the_filter_next_to_a_heuristic(
    pretrained: tuple[Path, dict[str, Any], dict[str, Any]], ray_cluster: Any
) -> None:
    """On a Ray env runner: the loaded filter state, and a parameterless RandomRLModule (the class travels
    to the actor) acting beside the pre-trained module, which alone trains."""
    from cairn.rl.examples.rl_modules.classes import RandomRLModule

    root, filter_state, _ = pretrained
    specs = {
        "learned": RLModuleSpec(load_state_path=str(root / MODULE_FOLDER)),
        "random": RLModuleSpec(module_class=RandomRLModule),
    }
    config = small_config(
        env="multi:CartPole-v1",
        num_agents=2,
        num_env_runners=1,
        policies=("learned", "random"),
        policy_mapping={"agent_0": "learned", "agent_1": "random"},
        policies_to_train=("learned",),
        rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs),
        rollout_length=16,
        minibatch_size=16,
        num_epochs=1,
    )
    algo = PPO(config)
    try:
        backend: Any = algo.env_runner_group.backend
        [remote] = backend.get_connector_states()
        assert_states_equal(remote["env_to_module_connector"], filter_state)
        result = algo.train()
        assert math.isfinite(result["learner/learned/total_loss"])
        assert not any(key.startswith("learner/random/") for key in result)
        [remote] = backend.get_connector_states()
        count = int(filter_state["MeanStdFilter"]["count"])
        assert (
            int(remote["env_to_module_connector"]["MeanStdFilter"]["count"]) == count + 2 * 2 * 16
        )  # 2 envs x 2 agents x 16 steps
    finally:
        algo.stop()


def map_int_agents(agent_id: Any, episode: Any) -> str:
    """MultiAgentCartPole's int agent ``i`` -> module ``p<i>``."""
    return f"p{agent_id}"


def multi_agent_cartpole_config(**overrides: Any) -> Any:
    from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole

    base = small_config(seed=13, rollout_length=16, minibatch_size=16, num_epochs=1, **overrides)
    return base.environment(MultiAgentCartPole, env_config={"num_agents": 2})


def test_a_multi_agent_module_loaded_from_a_single_agent_checkpoint_starts_its_own_filter_from_it(
    pretrained: tuple[Path, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    """pretraining_single_agent_training_multi_agent's flow: p0 loads the single-agent module, so p0's own filter
    (the multi-agent runner has one pipeline per module) starts from the pre-training's; p1 starts fresh. The new
    run's own checkpoint then holds its filters and resumes bit for bit."""
    root, filter_state, weights = pretrained
    specs = {"p0": RLModuleSpec(load_state_path=str(root / MODULE_FOLDER)), "p1": RLModuleSpec()}
    config = multi_agent_cartpole_config(
        policies=("p0", "p1"), policy_mapping_fn=map_int_agents, rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs)
    )
    algo = PPO(config)
    try:
        assert_states_equal(algo.env_runner.env_to_module["p0"].get_state(), filter_state)
        assert int(algo.env_runner.env_to_module["p1"]["MeanStdFilter"].count) == 0
        assert_states_equal(algo.get_module("p0").get_state(), weights)
        algo.train()
        count = int(algo.env_runner.env_to_module["p0"]["MeanStdFilter"].count)
        assert count > int(filter_state["MeanStdFilter"]["count"])
        restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ma"))
        try:
            assert algo.train().flatten(wall_clock=False) == restored.train().flatten(wall_clock=False)
            assert_states_equal(
                restored.env_runner.env_to_module.get_state(), algo.env_runner.env_to_module.get_state()
            )
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_a_damaged_root_is_an_error_not_a_module_without_its_filter(
    pretrained: tuple[Path, dict[str, Any], dict[str, Any]], tmp_path: Path
) -> None:
    """A root manifest that does not verify is refused: never a silent start from a fresh filter."""
    import shutil

    from cairn.errors import CheckpointError

    root, _, _ = pretrained
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    (copy / "metadata.json").write_text("{}")
    with pytest.raises(CheckpointError):
        companion_root(str(copy / MODULE_FOLDER))


def test_a_module_loaded_from_a_multi_agent_checkpoint_starts_from_its_source_modules_filter(tmp_path: Path) -> None:
    """Multi-agent -> multi-agent: ``q1`` loads ``<root>/.../rl_module/p1`` and its filter starts from p1's folder
    ``env_runner/env_to_module_connector/p1/`` (not p0's); a config without the filter is refused."""
    source = PPO(multi_agent_cartpole_config(policies=("p0", "p1"), policy_mapping_fn=map_int_agents))
    try:
        source.train()
        root = source.save_to_path(tmp_path / "source")
        p1_filter = source.env_runner.env_to_module["p1"].get_state()
        p0_filter = source.env_runner.env_to_module["p0"].get_state()
    finally:
        source.stop()
    assert not np.array_equal(p1_filter["MeanStdFilter"]["mean"], p0_filter["MeanStdFilter"]["mean"])
    path = f"{root}/learner_group/learner/rl_module/p1"
    specs = {"p0": RLModuleSpec(), "p1": RLModuleSpec(load_state_path=path)}
    config = multi_agent_cartpole_config(
        policies=("p0", "p1"), policy_mapping_fn=map_int_agents, rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs)
    )
    algo = PPO(config)
    try:
        assert_states_equal(algo.env_runner.env_to_module["p1"].get_state(), p1_filter)
        assert int(algo.env_runner.env_to_module["p0"]["MeanStdFilter"].count) == 0
    finally:
        algo.stop()
    with pytest.raises(ValueError, match="load_pretrained_connectors = False"):
        PPO(dataclasses.replace(config, observation_filter=None))
