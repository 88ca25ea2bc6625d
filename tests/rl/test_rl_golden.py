"""The golden PPO checkpoints (formats 1, 2 and 3) written by earlier cairns still load, act and train."""

from __future__ import annotations

from pathlib import Path

import blake3
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import cairn
from cairn.rl import PPO, RLModule

DATA = Path(__file__).parents[1] / "data"
GOLDEN = DATA / "golden_format_v1_ppo"
POLICY = GOLDEN / "learner_group" / "learner" / "rl_module" / "default_policy"


# What golden_format_v3_ppo holds (tests/data/make_golden_rl.py: two iterations of a small CartPole PPO),
# recorded when it was written: a reader that misreads any array or count of it fails here.
V3_ARRAYS = 59
V3_ARRAYS_BLAKE3 = "6f147145bdb23e04b24d9fcac6b2d243e9ef851a0eda8fd157dc944d0f62da83"
V3_FILTER_MEAN = [-0.004709077020379484, -0.11236711831588757, 0.021221998183136748, 0.1822306042176933]


def _arrays(state: object, path: str, out: dict[str, bytes]) -> dict[str, bytes]:
    """Every tensor and array of a state, by path, as raw bytes."""
    if isinstance(state, dict):
        for k, v in state.items():
            _arrays(v, f"{path}/{k}", out)
    elif isinstance(state, list | tuple):
        for i, v in enumerate(state):
            _arrays(v, f"{path}/{i}", out)
    elif isinstance(state, torch.Tensor):
        out[path] = state.detach().contiguous().numpy().tobytes()
    elif isinstance(state, np.ndarray):
        out[path] = np.ascontiguousarray(state).tobytes()
    return out


def _check_v3_values(algo: PPO) -> None:
    state = algo.get_state()
    arrays = _arrays(state, "", {})
    digest = blake3.blake3()
    for name in sorted(arrays):
        digest.update(name.encode())
        digest.update(arrays[name])
    assert (len(arrays), digest.hexdigest()) == (V3_ARRAYS, V3_ARRAYS_BLAKE3)
    runner = state["env_runner"]
    assert state["training_iteration"] == 2
    assert runner["counters"] == {
        "num_env_steps_sampled_lifetime": 128,
        "num_agent_steps_sampled_lifetime": 128,
        "num_episodes_lifetime": 6,
        "num_episodes": 4,
    }
    assert list(runner["episodes"]["recent_returns"]) == [15.0, 20.0, 18.0, 25.0, 20.0, 25.0]
    mean_std = runner["env_to_module_connector"]["MeanStdFilter"]
    assert mean_std["count"] == 128
    assert mean_std["mean"].tolist() == V3_FILTER_MEAN


@pytest.mark.parametrize("version", [1, 2, 3])
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
    if version == 3:
        _check_v3_values(algo)
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
