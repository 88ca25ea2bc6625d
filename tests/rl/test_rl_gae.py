"""compute_gae against a direct, per-step reference implementation."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.rl import compute_gae


def reference(rewards, values, term, trunc, final_v, last_v, gamma, lam):  # type: ignore[no-untyped-def]
    horizon, n = rewards.shape
    adv = np.zeros((horizon, n))
    for i in range(n):
        gae = 0.0
        for t in reversed(range(horizon)):
            if term[t, i]:
                next_v, cont = 0.0, 0.0
            elif trunc[t, i]:
                next_v, cont = final_v[t, i], 0.0
            else:
                next_v = last_v[i] if t == horizon - 1 else values[t + 1, i]
                cont = 1.0
            delta = rewards[t, i] + gamma * next_v - values[t, i]
            gae = delta + gamma * lam * cont * gae
            adv[t, i] = gae
    return adv


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = (17, 3)
    rewards = rng.normal(size=shape)
    values = rng.normal(size=shape)
    term = rng.random(shape) < 0.1
    trunc = (rng.random(shape) < 0.1) & ~term
    final_v = rng.normal(size=shape)
    last_v = rng.normal(size=3)
    adv, targets = compute_gae(rewards, values, term, trunc, final_v, last_v, gamma=0.97, gae_lambda=0.9)
    expected = reference(rewards, values, term, trunc, final_v, last_v, 0.97, 0.9)
    np.testing.assert_allclose(adv, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(targets, expected + values, rtol=1e-12, atol=1e-12)


def test_lambda_one_gamma_one_is_return_to_go() -> None:
    rewards = np.ones((4, 1))
    values = np.zeros((4, 1))
    none = np.zeros((4, 1), dtype=bool)
    adv, _ = compute_gae(rewards, values, none, none, np.zeros((4, 1)), np.zeros(1), gamma=1.0, gae_lambda=1.0)
    assert adv[:, 0].tolist() == [4.0, 3.0, 2.0, 1.0]


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="same"):
        compute_gae(
            np.zeros((3, 2)),
            np.zeros((3, 1)),
            np.zeros((3, 2), bool),
            np.zeros((3, 2), bool),
            np.zeros((3, 2)),
            np.zeros(2),
            gamma=0.9,
            gae_lambda=0.9,
        )
