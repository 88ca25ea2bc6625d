"""A user's own RLModule (examples/custom_module.py): PPO trains it, checkpoints rebuild it by reference.

Also the module-spec settings around it: ``load_state_path`` (one module, and
some modules of a multi-module), per-module config overrides, and
``Algorithm.add_module`` / ``remove_module`` through checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from cairn.errors import CheckpointError
from cairn.rl import PPO, Learner, MultiRLModuleSpec, PPOConfig, RLModule, RLModuleSpec
from cairn.testing import assert_states_equal
from pack_helpers import own_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import custom_module  # noqa: E402 - the example, importable under its own name

MODULE_FOLDER = "learner_group/learner/rl_module/default_policy"


def _run_example(*args: str, cwd: Path) -> tuple[str, list[dict[str, Any]]]:
    """The example's output (a few short lines) and the metrics it wrote with --metrics-out."""
    metrics_out = cwd / "metrics.jsonl"
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "custom_module.py"), *args, "--metrics-out", str(metrics_out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    # The folders the example names are the test's (their length is pytest's): the rest of a line is short.
    lines = out.stdout.replace(str(cwd), "<tmp>").strip().splitlines()
    assert len(lines) <= 6 and all(len(line) <= 120 and "{" not in line for line in lines), out.stdout
    return out.stdout, [json.loads(line) for line in metrics_out.read_text().splitlines()]


def _learner_state(algo: PPO) -> dict[str, Any]:
    state: dict[str, Any] = algo.get_state(components="learner_group")["learner_group"]
    return state


def test_custom_module_resumes_bit_for_bit_in_a_new_process(tmp_path: Path) -> None:
    """N + M iterations == N, save, PPO.from_checkpoint in a new process, M: metrics and state."""
    straight = PPO(custom_module.make_config())
    expected = [json.dumps(custom_module.metrics(straight.train())) for _ in range(4)]
    expected_state = _learner_state(straight)
    straight.stop()

    first = PPO(custom_module.make_config())
    assert [json.dumps(custom_module.metrics(first.train())) for _ in range(2)] == expected[:2]
    first.save_to_path(tmp_path / "mid")
    first.stop()
    out, lines = _run_example(
        "--resume", str(tmp_path / "mid"), "--iterations", "2", "--checkpoint", str(tmp_path / "end"), cwd=tmp_path
    )
    assert out.startswith("restored TinyCNNModule")  # RLModule.from_checkpoint rebuilt the user's class
    assert [json.dumps(m) for m in lines] == expected[2:]
    resumed = PPO.from_checkpoint(tmp_path / "end")
    assert_states_equal(_learner_state(resumed), expected_state)
    resumed.stop()


def test_module_from_checkpoint_is_the_users_class(tmp_path: Path) -> None:
    algo = PPO(custom_module.make_config())
    algo.train()
    path = algo.save_to_path(tmp_path / "ck")
    module = RLModule.from_checkpoint(f"{path}/{MODULE_FOLDER}")
    assert type(module) is custom_module.TinyCNNModule and module.model_config == {"channels": 4}
    assert_states_equal(module.get_state(), algo.get_module().get_state())
    # The recorded config names the class by reference: from_checkpoint builds the same modules.
    again = PPO.from_checkpoint(path)
    assert type(again.get_module()) is custom_module.TinyCNNModule
    algo.stop()
    again.stop()


def test_a_module_class_the_program_has_not_allowed_is_refused(tmp_path: Path) -> None:
    algo = PPO(custom_module.make_config())
    path = algo.save_to_path(tmp_path / "ck")
    algo.stop()
    code = f"from cairn.rl import RLModule; RLModule.from_checkpoint({f'{path}/{MODULE_FOLDER}'!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode != 0
    assert "custom_module:TinyCNNModule" in out.stderr and "not on cairn's allow-list" in out.stderr
    assert "cairn.register(custom_module.TinyCNNModule)" in out.stderr  # the line that allows it


def test_load_state_path_starts_a_module_from_a_checkpoint(tmp_path: Path) -> None:
    trained = PPO(custom_module.make_config())
    trained.train()
    path = trained.save_to_path(tmp_path / "ck")
    weights = trained.get_module().get_state()
    trained.stop()
    spec = RLModuleSpec(
        module_class=custom_module.TinyCNNModule,
        model_config={"channels": 4},
        load_state_path=f"{path}/{MODULE_FOLDER}",
    )
    algo = PPO(custom_module.make_config(seed=99, rl_module_spec=spec))
    assert_states_equal(algo.get_module().get_state(), weights)
    assert_states_equal(algo.env_runner.module["default_policy"].get_state(), weights)  # the runners act with it
    # The checkpoint holds the weights: the recorded config no longer points at the start checkpoint.
    saved = algo.save_to_path(tmp_path / "started")
    assert f"{path}/{MODULE_FOLDER}" not in own_file(tmp_path / "started", "ctor.json").decode()
    assert_states_equal(PPO.from_checkpoint(saved).get_module().get_state(), weights)
    algo.stop()


def _multi(**overrides: Any) -> PPOConfig:
    settings: dict[str, Any] = {
        "env": "multi:CartPole-v1",
        "num_agents": 2,
        "policies": ("p0", "p1"),
        "policy_mapping": {"agent_0": "p0", "agent_1": "p1"},
        "num_envs_per_env_runner": 1,
        "rollout_length": 16,
        "minibatch_size": 16,
        "num_epochs": 1,
        "model_config": {"hidden_sizes": [8]},
        "lr_anneal_timesteps": None,
        **overrides,
    }
    return PPOConfig(**settings)


def test_multi_rl_module_spec_loads_only_modules_to_load(tmp_path: Path) -> None:
    source = PPO(_multi(seed=1))
    source.train()
    path = source.save_to_path(tmp_path / "src")
    saved = source.learner_group.get_weights()
    source.stop()
    spec = MultiRLModuleSpec(
        rl_module_specs={"p0": RLModuleSpec(), "p1": RLModuleSpec()},
        load_state_path=f"{path}/learner_group/learner/rl_module",
        modules_to_load=["p1"],
    )
    algo = PPO(_multi(seed=2, rl_module_spec=spec))
    fresh = PPO(_multi(seed=2))
    weights = algo.learner_group.get_weights()
    assert_states_equal(weights["p1"], saved["p1"])
    assert_states_equal(weights["p0"], fresh.learner_group.get_weights()["p0"])
    with pytest.raises(ValueError, match="modules_to_load names"):
        PPO(_multi(rl_module_spec=dataclasses.replace(spec, modules_to_load=["p7"])))
    algo.stop()
    fresh.stop()


def test_per_module_overrides_are_restored_and_a_new_config_wins(tmp_path: Path) -> None:
    config = _multi(algorithm_config_overrides_per_module={"p1": {"lr": 1e-3}})
    algo = PPO(config)
    result = algo.train()
    assert result["learners/p1/lr"] == 1e-3 and result["learners/p0/lr"] == config.lr
    assert algo.learner_group.learner.optimizers["p1"].param_groups[0]["lr"] == 1e-3
    path = algo.save_to_path(tmp_path / "ck")
    algo.stop()
    restored = PPO.from_checkpoint(path)
    assert restored.train()["learners/p1/lr"] == 1e-3
    restored.stop()
    newer = PPO.from_checkpoint(path, config=_multi(algorithm_config_overrides_per_module={"p1": {"lr": 5e-4}}))
    result = newer.train()
    assert result["learners/p1/lr"] == 5e-4 and result["learners/p0/lr"] == config.lr
    newer.stop()
    with pytest.raises(ValueError, match="does not have"):
        PPO(_multi(algorithm_config_overrides_per_module={"p1": {"learning_rate": 1.0}}))


def test_add_and_remove_module_through_checkpoints(tmp_path: Path) -> None:
    algo = PPO(_multi())
    algo.train()
    # Self-play style: freeze p0 into a new module p2 (its weights, its own lr, not trained).
    frozen = algo.get_module("p0").get_state()
    algo.add_module("p2", RLModuleSpec(), config_overrides={"lr": 1e-4}, new_should_module_be_updated=["p0", "p1"])
    # RLlib's way to set weights; the algorithm then spreads them to the env runners.
    algo.set_state({"learner_group": {"learner": {"rl_module": {"p2": frozen}}}})
    assert algo.config.policies == ("p0", "p1", "p2") and algo.config.policies_to_train == ("p0", "p1")
    assert "p2" in algo.env_runner.module
    assert_states_equal(algo.env_runner.module["p2"].get_state(), frozen)
    algo.train()
    path = algo.save_to_path(tmp_path / "added")
    expected = algo.learner_group.get_weights()

    restored = PPO.from_checkpoint(path)
    assert restored.config.policies == ("p0", "p1", "p2")
    assert restored.config.algorithm_config_overrides_per_module == {"p2": {"lr": 1e-4}}
    assert set(restored.learner_group.get_weights()) == {"p0", "p1", "p2"}
    for module_id, weights in expected.items():
        assert_states_equal(restored.learner_group.get_weights()[module_id], weights)
    # The learner alone, too (it records the modules it trains now).
    learner = Learner.from_checkpoint(f"{path}/learner_group/learner")
    assert set(learner.module.keys()) == {"p0", "p1", "p2"}
    assert learner.config_for_module("p2").lr == 1e-4

    # A module added from a checkpoint starts from its weights.
    restored.add_module("p3", RLModuleSpec(load_state_path=f"{path}/learner_group/learner/rl_module/p2"))
    assert_states_equal(restored.get_module("p3").get_state(), expected["p2"])
    assert_states_equal(restored.env_runner.module["p3"].get_state(), expected["p2"])
    restored.remove_module("p3")
    restored.remove_module("p2")
    assert "p2" not in restored.env_runner.module and restored.config.policies == ("p0", "p1")
    restored.train()
    smaller = restored.save_to_path(tmp_path / "removed")
    again = PPO.from_checkpoint(smaller)
    assert set(again.learner_group.get_weights()) == {"p0", "p1"}
    assert again.config.algorithm_config_overrides_per_module == {}
    assert set(Learner.from_checkpoint(f"{smaller}/learner_group/learner").module.keys()) == {"p0", "p1"}
    with pytest.raises(ValueError, match="policy_mapping maps agents"):
        again.remove_module("p1")
    with pytest.raises(ValueError, match="already exists"):
        again.add_module("p0", RLModuleSpec())
    for a in (algo, restored, again):
        a.stop()


def test_a_spec_that_does_not_fit_the_start_checkpoint_fails_before_training(tmp_path: Path) -> None:
    algo = PPO(custom_module.make_config())
    path = algo.save_to_path(tmp_path / "ck")
    algo.stop()
    spec = RLModuleSpec(
        module_class=custom_module.TinyCNNModule,
        model_config={"channels": 2},
        load_state_path=f"{path}/{MODULE_FOLDER}",
    )
    with pytest.raises(CheckpointError, match="shape"):
        PPO(custom_module.make_config(rl_module_spec=spec))


def test_a_module_added_to_a_single_policy_algorithm_comes_back(tmp_path: Path) -> None:
    algo = PPO(_multi(env="CartPole-v1", policies=("default_policy",), policy_mapping=None))
    algo.add_module("extra", RLModuleSpec())
    # The one agent keeps its module; the recorded mapping says so now that there are two.
    assert algo.config.policy_mapping == {"default_agent": "default_policy"}
    algo.train()
    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ck"))
    assert restored.config.policies == ("default_policy", "extra")
    assert_states_equal(restored.learner_group.get_weights(), algo.learner_group.get_weights())
    algo.stop()
    restored.stop()


def test_a_seeded_spec_builds_a_users_module_bit_for_bit() -> None:
    env = custom_module.PixelGridEnv()
    spec = RLModuleSpec(custom_module.TinyCNNModule, env.observation_space, env.action_space, seed=7)
    before = torch.random.get_rng_state()
    assert_states_equal(spec.build().get_state(), spec.build().get_state())
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's RNG stream is untouched
    unseeded = dataclasses.replace(spec, seed=None)
    first, second = unseeded.build().get_state(), unseeded.build().get_state()
    assert not torch.equal(first["logits.weight"], second["logits.weight"])
