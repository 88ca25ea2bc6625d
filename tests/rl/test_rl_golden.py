"""The golden PPO checkpoints (formats 1 and 2) written by earlier cairns still load, act and train."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import cairn
from cairn.rl import PPO, RLModule

DATA = Path(__file__).parents[1] / "data"
GOLDEN = DATA / "golden_format_v1_ppo"
POLICY = GOLDEN / "learner_group" / "learner" / "rl_module" / "default_policy"


@pytest.mark.parametrize("version", [1, 2])
def test_golden_ppo_verifies_and_resumes_training(version: int) -> None:
    golden = DATA / f"golden_format_v{version}_ppo"
    policy = golden / "learner_group" / "learner" / "rl_module" / "default_policy"
    assert cairn.verify_checkpoint(golden) == []
    algo = PPO.from_checkpoint(golden)
    saved = load_file(str(policy / "tensors.safetensors"))
    live = algo.get_state(components="learner_group")["learner_group"]["learner"]["rl_module"]["default_policy"]
    assert set(saved) == set(live)
    for name, tensor in saved.items():
        assert torch.equal(live[name], tensor), name
    result = algo.train()
    assert result["training_iteration"] == 3


def test_golden_policy_alone_acts() -> None:
    module = RLModule.from_checkpoint(POLICY)
    obs = torch.zeros((3, *module.observation_space.shape), dtype=torch.float32)
    actions = module.forward_inference({"obs": obs})["actions"]
    assert actions.shape[0] == 3 and all(module.action_space.contains(int(a)) for a in actions)


def test_cairn_upgrade_reads_an_rl_checkpoint_without_import_flags() -> None:
    """`cairn upgrade` finds cairn's own RL classes (imported by the command, never by the file)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "cairn", "upgrade", str(GOLDEN), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "learner_group/learner/rl_module/default_policy" in out.stdout
    assert "dry run: 0 component(s) would change" in out.stdout
