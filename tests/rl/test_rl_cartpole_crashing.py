"""RLlib's example CartPoleCrashing: crashes where its env_config says, seeded draws repeat (issue 38)."""

from __future__ import annotations

import pytest

from cairn.rl.env.env_context import EnvContext
from cairn.rl.examples.envs.classes.cartpole_crashing import CartPoleCrashing
from cairn.rl.utils.error import EnvError


def _crash_step(env: CartPoleCrashing, seed: int) -> int:
    env.reset(seed=seed)
    for t in range(1, 500):
        try:
            _, _, terminated, truncated, _ = env.step(0)
        except EnvError:
            return t
        if terminated or truncated:
            env.reset()
    return -1


def test_crashes_after_n_steps_and_seeded_chances_repeat() -> None:
    assert _crash_step(CartPoleCrashing({"p_crash": 0.0, "crash_after_n_steps": 3}), seed=0) == 3
    chancy = [_crash_step(CartPoleCrashing({"p_crash": 0.1}), seed=5) for _ in range(2)]
    assert chancy[0] == chancy[1] > 0
    with pytest.raises(EnvError, match="during reset"):
        CartPoleCrashing({"p_crash_reset": 1.0}).reset(seed=0)


def test_only_the_named_workers_crash_and_bad_settings_are_refused() -> None:
    spared = CartPoleCrashing(
        EnvContext({"p_crash": 1.0, "crash_on_worker_indices": [2]}, worker_index=1, num_workers=2)
    )
    assert _crash_step(spared, seed=0) == -1
    hit = CartPoleCrashing(EnvContext({"p_crash": 1.0, "crash_on_worker_indices": [2]}, worker_index=2, num_workers=2))
    assert _crash_step(hit, seed=0) == 1
    with pytest.raises(ValueError, match="must be a probability"):
        CartPoleCrashing({"p_crash": 2.0})
    with pytest.raises(ValueError, match=r"crash_after_n_steps='x' must be a number >= 0 or a \(low, high\) pair"):
        CartPoleCrashing({"crash_after_n_steps": "x"})
