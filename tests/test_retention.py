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
        (RetentionPolicy(keep_last=1, keep_best=1, metric="r", mode="max"), {10, 50}),
        (RetentionPolicy(keep_last=1, keep_best=2, metric="r", mode="max"), {10, 50}),
        (RetentionPolicy(keep_last=1, keep_best=3, metric="r", mode="max"), {10, 20, 50}),
        (RetentionPolicy(keep_last=1, keep_best=1, metric="r", mode="min"), {0, 50}),
        (RetentionPolicy(keep_last=2, keep_best=1, metric="missing", mode="max"), {40, 50}),
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


# ------------------------------------------------------------------ composable policies (Orbax-style)

from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import cairn  # noqa: E402
from cairn.retention import KeepAll, KeepBest, KeepEvery, KeepLast, newest_kept, ranking  # noqa: E402


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (KeepAll(), {0, 10, 20, 30, 40, 50}),
        (KeepLast(2), {40, 50}),
        (KeepEvery(20), {0, 20, 40}),
        (KeepBest(2, "r", "max"), {10, 50}),
        (KeepBest(1, "r", "min"), {0}),
        (KeepLast(1) | KeepEvery(20), {0, 20, 40, 50}),
        (KeepLast(1) | KeepBest(1, "r", "max") | KeepEvery(30), {0, 10, 30, 50}),
    ],
)
def test_composable_policies(policy: Any, expected: set[int]) -> None:
    assert steps_to_keep(E, policy) == expected


@pytest.mark.parametrize(
    "shorthand",
    [
        RetentionPolicy(keep_last=1, keep_best=1, metric="r", mode="max"),
        RetentionPolicy(keep_last=3),
        RetentionPolicy(keep_last=2, keep_best=2, metric="r", mode="min"),
    ],
)
def test_the_keywords_are_shorthand_for_the_policies(shorthand: RetentionPolicy) -> None:
    assert shorthand.keep(E) == shorthand.as_policy().keep(E)
    assert newest_kept(shorthand) == shorthand.keep_last


def test_a_mode_is_given_or_known() -> None:
    assert KeepBest(1, "env_runners/episode_return_mean").mode == "max" and KeepBest(1, "loss").mode == "min"
    with pytest.raises(ValueError, match=r"mode='max' .* or mode='min'"):
        KeepBest(1, "score")
    with pytest.raises(ValueError, match="mode='max'"):
        RetentionPolicy(keep_last=1, keep_best=1, metric="score")
    with pytest.raises(ValueError, match="a train\\(\\) result's return is 'env_runners/episode_return_mean'"):
        KeepBest(1, "episode_return_mean")  # the name before issue 37


def test_ranking_and_newest_kept_read_combined_policies() -> None:
    policy = KeepEvery(5) | (KeepLast(4) | KeepBest(2, "loss", "min")) | KeepLast(2)
    assert ranking(policy) == KeepBest(2, "loss", "min")
    assert newest_kept(policy) == 2
    assert ranking(KeepLast(1)) is None and newest_kept(KeepEvery(3)) is None


@pytest.mark.parametrize(
    "make", [lambda: KeepLast(0), lambda: KeepEvery(0), lambda: KeepBest(1, ""), lambda: KeepLast(True)]
)
def test_invalid_composable_policies(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


@dataclass(frozen=True)
class KeepOdd:
    """A user's own policy: anything with keep(entries)."""

    def keep(self, entries: Any) -> set[int]:
        return {step for step, _ in entries if step % 2}


def test_a_manager_applies_a_composed_policy_and_a_users_own(tmp_path: Path) -> None:
    from cairn_test_components import Leaf

    mgr = cairn.CheckpointManager(tmp_path / "a", retention=KeepLast(2) | KeepEvery(3))
    for step in range(1, 8):
        mgr.save(Leaf(), step, metrics={"r": float(step % 4)})
    assert [i.step for i in mgr.checkpoints()] == [3, 6, 7]
    best = cairn.CheckpointManager(tmp_path / "b", retention=KeepLast(1) | KeepBest(1, "r", "max"))
    for step in range(1, 8):
        best.save(Leaf(), step, metrics={"r": -abs(step - 3.0)})
    assert [i.step for i in best.checkpoints()] == [3, 7]
    assert best.best() == str(tmp_path / "b" / "step_000000003")
    odd = cairn.CheckpointManager(tmp_path / "c", retention=KeepOdd())
    for step in range(1, 6):
        odd.save(Leaf(), step)
    assert [i.step for i in odd.checkpoints()] == [1, 3, 5]


def test_a_manager_refuses_both_forms_and_non_policies(tmp_path: Path) -> None:
    with pytest.raises(cairn.CheckpointError, match="not both"):
        cairn.CheckpointManager(tmp_path, retention=KeepLast(2), keep_last=3)
    with pytest.raises(cairn.CheckpointError, match="keep\\(entries\\)"):
        cairn.CheckpointManager(tmp_path, retention=3)  # type: ignore[arg-type]
