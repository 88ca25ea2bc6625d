"""Start-up of ``cairn evaluate``: it loads the module, gymnasium and the verified reader, nothing of training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cairn.rl import PPO, PPOConfig

# What training needs and evaluation does not: the learner side (torch.optim's first call imports
# torch._dynamo, ~1.2 s), the algorithm and its env runners, Ray, TensorBoard.
TRAINING_ONLY = (
    "torch._dynamo",
    "cairn.rl.core.learner.learner",
    "cairn.rl.core.learner.learner_group",
    "cairn.rl.algorithms.algorithm",
    "cairn.rl.algorithms.ppo.ppo",
    "cairn.rl.algorithms.ppo.ppo_learner",
    "cairn.rl.env.env_runner",
    "cairn.rl.env.env_runner_group",
    "ray",
    "tensorboard",
    "torch.utils.tensorboard",
)

_PROBE = """
import json, sys
import torch
torch.set_num_threads(2)
from cairn.cli import main
status = main(["evaluate", sys.argv[1], "--episodes", "1"])
print(json.dumps({"status": status, "modules": sorted(sys.modules), "threads": torch.get_num_threads()}))
"""


def test_evaluate_imports_nothing_of_training(tmp_path: Path) -> None:
    algo = PPO(PPOConfig(env="CartPole-v1", seed=0))
    try:
        checkpoint = algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, checkpoint], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("mean return over 1 episodes:")
    report = json.loads(lines[-1])
    assert report["status"] == 0
    loaded = set(report["modules"])
    assert "cairn.rl.core.rl_module.rl_module" in loaded  # the probe did load and run the module
    assert not [m for m in TRAINING_ONLY if m in loaded]
    # The module is built with one thread (its discarded initialisation would start the thread
    # team); the caller's setting is back afterwards.
    assert report["threads"] == 2
