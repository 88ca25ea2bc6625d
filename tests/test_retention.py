"""Retention policies as pure functions: tables, no I/O."""

from __future__ import annotations

import pytest

from cairn.retention import RetentionPolicy, best_steps, steps_to_keep

E = [(0, {"r": 1.0}), (10, {"r": 5.0}), (20, {"r": 3.0}), (30, {"r": float("nan")}), (40, {}), (50, {"r": 4.0})]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (RetentionPolicy(), {0, 10, 20, 30, 40, 50}),
        (RetentionPolicy(keep_last=1), {50}),
        (RetentionPolicy(keep_last=3), {30, 40, 50}),
        (RetentionPolicy(keep_last=1, keep_best=1, metric="r"), {10, 50}),
        (RetentionPolicy(keep_last=1, keep_best=2, metric="r"), {10, 50}),
        (RetentionPolicy(keep_last=1, keep_best=3, metric="r"), {10, 20, 50}),
        (RetentionPolicy(keep_last=1, keep_best=1, metric="r", mode="min"), {0, 50}),
        (RetentionPolicy(keep_last=2, keep_best=1, metric="missing"), {40, 50}),
    ],
)
def test_steps_to_keep(policy: RetentionPolicy, expected: set[int]) -> None:
    assert steps_to_keep(E, policy) == expected


def test_ties_prefer_newer() -> None:
    assert best_steps([(1, {"m": 2}), (2, {"m": 2}), (3, {"m": 1})], "m", "max", 1) == [2]


def test_bools_and_strings_are_not_metrics() -> None:
    assert best_steps([(1, {"m": True}), (2, {"m": "9"}), (3, {"m": 0.5})], "m", "max", 5) == [3]


@pytest.mark.parametrize(
    "kwargs", [{"keep_last": 0}, {"keep_best": -1}, {"keep_best": 1}, {"mode": "best", "metric": "m"}]
)
def test_invalid_policies(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RetentionPolicy(**kwargs)  # type: ignore[arg-type]
