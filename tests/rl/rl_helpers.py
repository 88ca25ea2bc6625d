"""Helpers shared by the RL tests: small, fast configs, fake batches, and an attacker's tools (forge, reseal)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.manifest import MANIFEST, TENSORS, FileEntry, Manifest
from cairn.rl import PPOConfig


def small_config(**overrides: Any) -> PPOConfig:
    """A PPO config that trains in a few milliseconds per iteration."""
    base = PPOConfig(
        env="CartPole-v1",
        seed=3,
        num_envs_per_env_runner=2,
        rollout_length=32,
        minibatch_size=32,
        num_epochs=2,
        model_config={"hidden_sizes": [16, 16]},
        observation_filter="MeanStdFilter",  # these tests check the filter's checkpointing (not the default)
    )
    return dataclasses.replace(base, **overrides)


def fake_train_batch(size: int = 64, obs_dim: int = 4, n_actions: int = 2) -> dict[str, np.ndarray]:
    """A random flat training batch for a Discrete(n_actions) module."""
    rng = np.random.default_rng(0)
    return {
        "obs": rng.normal(size=(size, obs_dim)).astype(np.float32),
        "actions": rng.integers(0, n_actions, size=size).astype(np.int64),
        "action_logp": np.full(size, -np.log(n_actions), dtype=np.float32),
        "vf_preds": rng.normal(size=size).astype(np.float32),
        "advantages": rng.normal(size=size).astype(np.float32),
        "value_targets": rng.normal(size=size).astype(np.float32),
    }


class CounterEnv(gym.Env[np.ndarray, int]):
    """A tiny env that cairn does not know how to save (not classic control)."""

    observation_space = gym.spaces.Box(-100.0, 100.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, self.np_random.normal()], dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        obs = np.array([self.t, self.np_random.normal()], dtype=np.float32)
        return obs, float(action), self.t >= 7, False, {}


if "CairnCounter-v0" not in gym.registry:
    gym.register("CairnCounter-v0", entry_point=CounterEnv, max_episode_steps=50)


# --------------------------------------------------------------------------- an attacker's tools


def reseal(root: Path) -> None:
    """Rewrite every manifest under ``root`` (deepest first) with the true digests of the files it lists.

    After a test edits a file, the checksums pass again: only the checks behind them can refuse it.
    """
    for folder in sorted((p.parent for p in root.rglob(MANIFEST)), key=lambda p: -len(p.parts)):
        body = json.loads((folder / MANIFEST).read_text())
        names = set(body["files"]) | ({TENSORS} if (folder / TENSORS).exists() else set())
        files = {name: FileEntry.of((folder / name).read_bytes()) for name in sorted(names)}
        manifest = Manifest(files=files, components=body["components"], format_version=body["format_version"])
        (folder / MANIFEST).write_bytes(manifest.to_bytes())


def forge(root: Path, rel: str, edit: Callable[[str], str]) -> None:
    """Replace the text of the file ``rel`` of the checkpoint ``root`` with ``edit(text)``, and reseal ``root``."""
    path = root / rel
    text = path.read_text()
    forged = edit(text)
    assert forged != text, f"the edit changes nothing in {rel}"
    path.write_text(forged)
    reseal(root)


def forge_ctor(folder: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit the recorded constructor call (``ctor.json``, parsed) of a checkpoint folder in place, and reseal it."""

    def edited(text: str) -> str:
        ctor = json.loads(text)
        edit(ctor)
        return json.dumps(ctor)

    forge(folder, "ctor.json", edited)
