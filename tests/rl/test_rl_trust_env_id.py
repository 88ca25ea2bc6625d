"""SPEC 8: an environment id recorded in a checkpoint never makes cairn import a module (issue 13, item 2),
and every API that takes a module id applies the one component-name rule (item 10c)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rl_helpers import reseal, small_config

import cairn
from cairn.manifest import component_name_problem
from cairn.rl import PPO, MultiRLModule, PPOConfig, RLModuleSpec

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

ROOT = Path(__file__).resolve().parents[2]
ZEN = "The Zen of Python"  # what importing `this` prints


def record_env(checkpoint: Path, env: str, *, old: str = "CartPole-v1") -> None:
    """Make every config and metadata of a PPO checkpoint record ``env`` instead of ``old``, resealed."""
    for path in [*checkpoint.rglob("ctor.json"), *checkpoint.rglob("metadata.json")]:
        text = path.read_text()
        path.write_text(text.replace(json.dumps(old), json.dumps(env)))
    reseal(checkpoint)


def cairn_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "cairn", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_from_checkpoint_never_imports_the_module_an_env_id_names(tmp_path: Path) -> None:
    ck = Path(PPO(small_config()).save_to_path(tmp_path / "ck"))
    record_env(ck, "this:CartPole-v1")
    assert "this" not in sys.modules
    with pytest.raises(cairn.CheckpointError, match=r"module 'this', which this program has not imported.*import this"):
        PPO.from_checkpoint(ck)
    assert "this" not in sys.modules
    # The same checkpoint loads once the program itself chose to import the module.
    record_env(ck, "gymnasium.envs.classic_control:CartPole-v1", old="this:CartPole-v1")
    assert PPO.from_checkpoint(ck).config.env == "gymnasium.envs.classic_control:CartPole-v1"


def test_cli_resume_and_evaluate_never_import_the_module_an_env_id_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cairn.cli import main

    run = tmp_path / "run"
    assert main(["train", "--iterations", "1", "--checkpoint-dir", str(run)]) == 0
    capsys.readouterr()
    (step,) = run.glob("step_*")
    record_env(step, "this:CartPole-v1")

    resumed = cairn_cli("train", "--iterations", "2", "--checkpoint-dir", str(run), "--resume", cwd=tmp_path)
    assert resumed.returncode != 0
    assert "import this first" in resumed.stderr and "Traceback" not in resumed.stderr, resumed.stderr
    assert ZEN not in resumed.stdout + resumed.stderr

    evaluated = cairn_cli("evaluate", str(step), "--episodes", "1", cwd=tmp_path)
    assert evaluated.returncode != 0
    assert "import this first" in evaluated.stderr and "Traceback" not in evaluated.stderr, evaluated.stderr
    assert ZEN not in evaluated.stdout + evaluated.stderr


@pytest.mark.parametrize("env", ["this:CartPole-v1", "multi:this:CartPole-v1", "antigravity:X-v0", "__main__:X-v0"])
def test_config_refuses_env_ids_naming_unimported_modules(env: str) -> None:
    with pytest.raises(ValueError, match=r"import"):
        PPOConfig(env=env)
    config = PPOConfig()
    config.env = env  # set after construction: the algorithm checks again before making anything
    with pytest.raises(ValueError, match=r"import"):
        PPO(config)
    assert "this" not in sys.modules and "antigravity" not in sys.modules


@pytest.mark.parametrize("env", ["a:b:CartPole-v1", "this:", ""])
def test_config_refuses_malformed_env_ids(env: str) -> None:
    with pytest.raises(ValueError):
        PPOConfig(env=env)


CANDIDATE_IDS = ["p0", "p-1.x_2", "...", "p0\n", "..\n", "manifest.json", "state.msgpack", "é", "a/b", ".", "x" * 201]


@pytest.mark.parametrize("module_id", CANDIDATE_IDS)
def test_add_module_accepts_exactly_the_ids_a_save_accepts(module_id: str, tmp_path: Path) -> None:
    import gymnasium as gym

    from cairn.rl import DefaultPPORLModule

    spec = RLModuleSpec(
        module_class=DefaultPPORLModule,
        observation_space=gym.spaces.Box(-1.0, 1.0, (3,)),
        action_space=gym.spaces.Discrete(2),
        model_config={"hidden_sizes": [4]},
    )
    multi = MultiRLModule({"p0": spec})
    if component_name_problem(module_id) is None:
        multi.add_module(module_id, spec.build(), override=True)
        multi.save_to_path(tmp_path / "ck")
    else:
        with pytest.raises(ValueError, match="not a valid component name"):
            multi.add_module(module_id, spec.build())
        with pytest.raises(ValueError, match="not a valid component name"):
            PPO(PPOConfig(policies=(module_id,), policy_mapping={"default_agent": module_id}))
