"""A hung Ray actor cannot hang a save or a restore: ``checkpoint_timeout_s`` bounds every wait on it.

The env runner's environment (:mod:`hanging_env`) blocks its state calls in the
Ray workers while a flag file exists; the learner's save is held up with its
fault injection. Each test checks the error names the actor, that a failed save
committed nothing, and that the next save or restore works once the actor is
healthy again (the hung one was stopped and replaced).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from dist_helpers import assert_runners_on_learner_weights, learner_state, no_leftovers, small_config

import hanging_env
from cairn import CheckpointError, CheckpointManager, CorruptCheckpointError, verify_checkpoint
from cairn.rl import DEFAULT_MODULE_ID, PPO, MultiRLModuleSpec, RLModuleSpec
from cairn.rl.distributed._ray import ActorTimeoutError
from cairn.testing import assert_states_equal

TIMEOUT_S = 1.0
"""The tests' ``checkpoint_timeout_s``: far below the hang (``hanging_env.MAX_HANG_S``)."""

START_TIMEOUT_S = 30.0
"""The tests' ``env_runner_restore_timeout_s``: a healthy runner's start (a process importing torch)
fits in it on a loaded CI machine; a hung one is given up on long before ``hanging_env.MAX_HANG_S``."""


@pytest.fixture
def flag(tmp_path: Path) -> Iterator[Path]:
    """The hang flag of :mod:`hanging_env` (removed at the end, so nothing stays hung)."""
    path = tmp_path / "hang"
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def algo(ray_cluster: Any, flag: Path) -> Iterator[PPO]:
    """PPO on :class:`hanging_env.HangingEnv` with one remote env runner, trained one iteration."""
    algo = PPO(
        small_config(
            env="hanging_env:HangingEnv",
            env_config={"hang_flag": str(flag)},
            num_env_runners=1,
            num_envs_per_env_runner=1,
            rollout_length=16,
            minibatch_size=16,
            checkpoint_timeout_s=TIMEOUT_S,
            env_runner_restore_timeout_s=START_TIMEOUT_S,
        )
    )
    algo.train()
    yield algo
    algo.stop()


def test_a_hung_env_runner_fails_the_save_in_time_and_commits_nothing(algo: PPO, flag: Path, tmp_path: Path) -> None:
    remote = algo.env_runner_group.remote
    assert remote is not None
    label = remote.label(0)
    hanging_env.hang_in_workers(flag)
    with pytest.raises(ActorTimeoutError) as info:
        algo.save_to_path(tmp_path / "ckpt")
    message = str(info.value)
    assert label in message and f"checkpoint_timeout_s={TIMEOUT_S:g}" in message, message
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, TimeoutError)
    assert not (tmp_path / "ckpt").exists()
    assert no_leftovers(tmp_path) == []
    # Through a manager: the same, and the manager lists no checkpoint. The stopped runner is
    # replaced first, and the replacement hangs in its environment's constructor: its start-up
    # is held to the deadline too (unbounded, it would start once hanging_env.MAX_HANG_S ran
    # out, and the save would then time out on the state call instead: another message).
    with CheckpointManager(tmp_path / "run") as mgr:
        with pytest.raises(ActorTimeoutError, match="did not finish starting within env_runner_restore_timeout_s"):
            mgr.save(algo, 1)
        assert mgr.checkpoints() == []
        assert no_leftovers(tmp_path / "run") == []
        # Healthy again: the hung runner was stopped and is replaced; saves and restores work.
        flag.unlink()
        mgr.save(algo, 2)
        assert [info.step for info in mgr.checkpoints()] == [2]
        assert remote.label(0) != label
        expected = learner_state(algo)
        mgr.restore_latest(algo)
    assert_states_equal(learner_state(algo), expected)
    assert_runners_on_learner_weights(algo)


def test_a_hung_env_runner_fails_the_restore_in_time(algo: PPO, flag: Path, tmp_path: Path) -> None:
    path = algo.save_to_path(tmp_path / "ckpt")
    expected = learner_state(algo)
    iteration = algo.training_iteration
    algo.train()
    remote = algo.env_runner_group.remote
    assert remote is not None
    label = remote.label(0)
    hanging_env.hang_in_workers(flag)
    with pytest.raises(ActorTimeoutError) as info:
        algo.restore_from_path(path)
    assert label in str(info.value)
    flag.unlink()
    algo.restore_from_path(path)
    assert remote.label(0) != label
    assert algo.training_iteration == iteration
    assert_states_equal(learner_state(algo), expected)
    assert_runners_on_learner_weights(algo)


def test_a_hung_learner_fails_the_save_in_time(ray_cluster: Any, tmp_path: Path) -> None:
    algo = PPO(small_config(num_learners=2, checkpoint_timeout_s=TIMEOUT_S))
    try:
        learners = algo.learner_group.remote
        assert learners is not None
        label = learners.label(0)
        expected = learner_state(algo)
        ray_cluster.get(learners.actors[0].inject_save_delay.remote(5 * TIMEOUT_S))
        with pytest.raises(ActorTimeoutError) as info:
            algo.save_to_path(tmp_path / "ckpt")
        assert label in str(info.value)
        assert not (tmp_path / "ckpt").exists()
        assert no_leftovers(tmp_path) == []
        # The group is rebuilt from the healthy learner: same state, and the next save works.
        path = algo.save_to_path(tmp_path / "ckpt")
        assert learners.label(0) != label
        assert_states_equal(learner_state(algo), expected)
        assert verify_checkpoint(path) == []
    finally:
        algo.stop()


def test_checkpoint_timeout_s_must_be_positive() -> None:
    with pytest.raises(ValueError, match="checkpoint_timeout_s"):
        PPO(small_config(checkpoint_timeout_s=0.0))
    with pytest.raises(ValueError, match="env_runner_restore_timeout_s"):
        PPO(small_config(env_runner_restore_timeout_s=float("nan")))


# ---------------------------------------------------------------------- no actor outlives a failed build


def _alive_actors() -> set[str]:
    """The ids of this cluster's actors that are not dead (alive, or being started or restarted).

    Read from the cluster's control store through the connected driver (``ray.util.state``
    would ask a dashboard, which the test cluster does not run).
    """
    from ray._private import state

    return {actor_id for actor_id, info in state.actors().items() if info["State"] != "DEAD"}


def _started_since(before: set[str]) -> set[str]:
    """The live actors not in ``before``, once there are none (killing is asynchronous), or after 30 s."""
    deadline = time.monotonic() + 30.0
    new = _alive_actors() - before
    while new and time.monotonic() < deadline:
        time.sleep(0.2)
        new = _alive_actors() - before
    return new


def _flip_a_byte(folder: Path) -> None:
    """Corrupt the middle byte of the largest tensor file under ``folder``.

    A small component's tensors live in its ``packed.bin`` (docs/format.md, "Packed small files"),
    so packs count as tensor files here.
    """
    files = [*folder.rglob("*.safetensors"), *folder.rglob("packed.bin")]
    target = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))


def test_a_failed_from_checkpoint_stops_the_actors_it_started(ray_cluster: Any, tmp_path: Path) -> None:
    """The damage is found after the env runner started, twice (the engine reads a mismatch again
    before it reports it, on a new algorithm): neither algorithm's runner stays alive."""
    algo = PPO(small_config(num_env_runners=1))
    try:
        path = Path(algo.save_to_path(tmp_path / "ckpt"))
    finally:
        algo.stop()
    before = _alive_actors()
    _flip_a_byte(path / "learner_group" / "learner")
    with pytest.raises(CorruptCheckpointError):
        PPO.from_checkpoint(path)
    assert _started_since(before) == set()


def test_a_failed_build_stops_the_actors_it_started(ray_cluster: Any, tmp_path: Path) -> None:
    """A module's ``load_state_path`` found corrupt after the env runners started: they are stopped."""
    algo = PPO(small_config())
    module_path = Path(algo.save_to_path(tmp_path / "ckpt")) / "learner_group" / "learner" / "rl_module"
    algo.stop()
    _flip_a_byte(module_path)
    before = _alive_actors()
    spec = MultiRLModuleSpec(rl_module_specs={DEFAULT_MODULE_ID: RLModuleSpec()}, load_state_path=str(module_path))
    with pytest.raises(CorruptCheckpointError):
        PPO(small_config(num_env_runners=1, rl_module_spec=spec))
    assert _started_since(before) == set()
