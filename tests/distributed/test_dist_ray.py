"""Remote env runners and learners on a real local Ray cluster: training, checkpoints, scale, failures.

One algorithm with 2 remote env runners and 2 data-parallel learners is built
once (module fixture) and goes through the tests in order; the tests that
kill actors come last.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from dist_helpers import (
    S3_SECRET,
    assert_runners_on_learner_weights,
    files_of,
    filter_states,
    learner_state,
    no_leftovers,
    small_config,
)

import runner_functions
from cairn import CheckpointError, CheckpointManager, CorruptCheckpointError
from cairn.rl import PPO, PPOLearner
from cairn.testing import assert_states_equal
from http_proxy import CountingProxy
from pack_helpers import tensor_file


@pytest.fixture(scope="module")
def algo(ray_cluster: Any) -> Iterator[PPO]:
    """2 remote env runners + 2 learners, trained 2 iterations (with RLlib's KL penalty: its coefficients
    are learner state the checkpoints below carry)."""
    algo = PPO(small_config(num_env_runners=2, num_learners=2, use_kl_loss=True))
    for _ in range(2):
        algo.train()
    yield algo
    algo.stop()


@pytest.fixture(scope="module")
def saved(algo: PPO, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A checkpoint of ``algo`` and what it held when saved."""
    path = algo.save_to_path(tmp_path_factory.mktemp("remote") / "ckpt")
    return {
        "path": path,
        "learner": learner_state(algo),
        "filter": algo.env_runner.env_to_module["MeanStdFilter"].get_state(),
        "counters": algo.env_runner.get_state(components=[])["counters"],
        "training_iteration": algo.training_iteration,
    }


def test_training_keeps_learners_identical_and_runners_synced(algo: PPO) -> None:
    metrics = algo.train()
    assert metrics["training_iteration"] == 3
    # 2 runners x 2 envs x 32 steps per iteration.
    assert metrics["num_env_steps_sampled_lifetime"] == 3 * 2 * 2 * 32
    states = algo.learner_group.remote.get_all_states()  # type: ignore[union-attr]
    assert_states_equal(states[0], states[1])
    assert_runners_on_learner_weights(algo)
    # Each runner sampled with the weights of the broadcast right before it.
    remote = algo.env_runner_group.remote
    assert remote is not None
    assert remote.last_weights_versions == [remote.weights_version - 1] * 2
    first, *others = filter_states(algo)
    assert first["count"] == 3 * 2 * 2 * 32
    for other in others:
        assert_states_equal(other, first)


def test_data_parallel_update_equals_one_learner_on_the_whole_batch(algo: PPO) -> None:
    """2 learners on shares of each minibatch take the step 1 learner takes on all of it, and adapt the
    KL coefficient on the whole last minibatch's KL, as 1 learner does."""
    specs = algo.learner_group.module_specs
    single = PPOLearner(algo.config, specs)
    single.set_state(learner_state(algo))
    rng = np.random.default_rng(0)
    size = 96
    batch = {
        "default_policy": {
            "obs": rng.normal(size=(size, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, size=size),
            "action_logp": np.full(size, -np.log(2.0), dtype=np.float32),
            "vf_preds": rng.normal(size=size).astype(np.float32),
            "advantages": rng.normal(size=size).astype(np.float32),
            "value_targets": rng.normal(size=size).astype(np.float32),
        }
    }
    remote_metrics = algo.learner_group.update(batch)
    local_metrics = single.update(batch)
    for name in ("mean_kl_loss", "curr_kl_coeff"):
        key = f"learners/default_policy/{name}"
        assert remote_metrics[key] == pytest.approx(local_metrics[key], rel=1e-4), key
    remote = learner_state(algo)
    local = single.get_state()
    assert remote["kl_coeffs"] == pytest.approx(local["kl_coeffs"], rel=1e-12)
    for name, tensor in local["rl_module"]["default_policy"].items():
        torch.testing.assert_close(remote["rl_module"]["default_policy"][name], tensor, rtol=1e-4, atol=1e-5)
    assert remote["counters"] == local["counters"]
    assert_states_equal(remote["rng"], local["rng"])
    algo._sync_env_runners()


def test_remote_checkpoint_has_the_local_layout(saved: dict[str, Any], tmp_path: Path) -> None:
    local = PPO(small_config())
    local.train()
    local_path = local.save_to_path(tmp_path / "local")
    assert files_of(saved["path"]) == files_of(local_path)
    assert no_leftovers(Path(saved["path"]).parent) == []
    metadata = (Path(saved["path"]) / "learner_group" / "metadata.json").read_text()
    assert '"learner"' in metadata  # the components list names the part the actor wrote


def test_restore_brings_back_weights_filters_counters_and_syncs_runners(algo: PPO, saved: dict[str, Any]) -> None:
    algo.train()
    algo.restore_from_path(saved["path"])
    assert algo.training_iteration == saved["training_iteration"]
    states = algo.learner_group.remote.get_all_states()  # type: ignore[union-attr]
    for state in states:
        assert_states_equal(state, saved["learner"])
    assert algo.env_runner.get_state(components=[])["counters"] == saved["counters"]
    # Right after the restore, before any sample: every runner on the restored weights ...
    assert_runners_on_learner_weights(algo)
    # ... and every runner's filter statistics equal the checkpoint's.
    for state in filter_states(algo):
        assert_states_equal(state, saved["filter"])
    metrics = algo.train()
    assert metrics["training_iteration"] == saved["training_iteration"] + 1
    assert metrics["num_env_steps_sampled_lifetime"] == saved["counters"]["num_env_steps_sampled_lifetime"] + 128


def test_rollback_to_an_older_checkpoint_puts_every_runner_on_its_weights(
    algo: PPO, saved: dict[str, Any], tmp_path: Path
) -> None:
    algo.train()
    newer = algo.save_to_path(tmp_path / "newer")
    newer_learner = learner_state(algo)
    algo.train()
    algo.restore_from_path(saved["path"])  # back to the older one
    assert_states_equal(learner_state(algo), saved["learner"])
    assert_runners_on_learner_weights(algo)
    algo.restore_from_path(newer)  # and forward again
    assert_states_equal(learner_state(algo), newer_learner)
    assert_runners_on_learner_weights(algo)


def test_restore_two_runners_two_learners_into_zero(saved: dict[str, Any]) -> None:
    config = dataclasses.replace(small_config(), num_env_runners=0, num_learners=0)
    local = PPO.from_checkpoint(saved["path"], config=config)
    assert local.env_runner_group.remote is None and local.learner_group.remote is None
    assert_states_equal(learner_state(local), saved["learner"])
    assert_states_equal(local.env_runner.env_to_module["MeanStdFilter"].get_state(), saved["filter"])
    assert local.env_runner.get_state(components=[])["counters"] == saved["counters"]
    assert_runners_on_learner_weights(local)
    assert local.train()["training_iteration"] == saved["training_iteration"] + 1


def test_restore_zero_into_two_runners_two_learners(algo: PPO, tmp_path: Path) -> None:
    local = PPO(small_config())
    for _ in range(3):
        local.train()
    path = local.save_to_path(tmp_path / "local")
    algo.restore_from_path(path)
    for state in algo.learner_group.remote.get_all_states():  # type: ignore[union-attr]
        assert_states_equal(state, learner_state(local))
    expected_filter = local.env_runner.env_to_module["MeanStdFilter"].get_state()
    for state in filter_states(algo):
        assert_states_equal(state, expected_filter)
    counters = local.env_runner.get_state(components=[])["counters"]
    assert algo.env_runner.get_state(components=[])["counters"] == counters
    assert_runners_on_learner_weights(algo)
    assert algo.train()["num_env_steps_sampled_lifetime"] == counters["num_env_steps_sampled_lifetime"] + 128


def test_restore_into_one_runner_and_one_local_learner(saved: dict[str, Any]) -> None:
    config = dataclasses.replace(small_config(), num_env_runners=1, num_learners=1)
    other = PPO.from_checkpoint(saved["path"], config=config)
    try:
        assert other.env_runner_group.num_env_runners == 1 and other.learner_group.remote is None
        assert_states_equal(learner_state(other), saved["learner"])
        for state in filter_states(other):
            assert_states_equal(state, saved["filter"])
        assert_runners_on_learner_weights(other)
        # Runner 1 took the checkpoint's environments (written by the old runner 1).
        assert other.train()["training_iteration"] == saved["training_iteration"] + 1
    finally:
        other.stop()


def test_partial_restore_of_one_module_reaches_the_remote_learners_and_runners(
    algo: PPO, saved: dict[str, Any]
) -> None:
    algo.train()
    module_dir = Path(saved["path"]) / "learner_group" / "learner" / "rl_module" / "default_policy"
    algo.restore_from_path(module_dir, component="learner_group/learner/rl_module/default_policy")
    for state in algo.learner_group.remote.get_all_states():  # type: ignore[union-attr]
        assert_states_equal(state["rl_module"], saved["learner"]["rl_module"])
    assert_runners_on_learner_weights(algo)


def test_a_corrupt_learner_file_applies_nothing_anywhere(algo: PPO, saved: dict[str, Any], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(saved["path"], broken)
    tensors = tensor_file(broken / "learner_group" / "learner" / "rl_module" / "default_policy")
    data = bytearray(tensors.read_bytes())
    data[-3] ^= 0xFF
    tensors.write_bytes(bytes(data))
    algo.train()
    before = learner_state(algo)
    filters_before = filter_states(algo)
    iteration = algo.training_iteration
    with pytest.raises(CorruptCheckpointError, match="learner 0"):
        algo.restore_from_path(broken)
    assert algo.training_iteration == iteration
    assert_states_equal(learner_state(algo), before)
    assert_states_equal(filter_states(algo), filters_before)


def test_a_corrupt_env_runner_file_leaves_the_learners_as_they_were(
    algo: PPO, saved: dict[str, Any], tmp_path: Path
) -> None:
    """The learners read and verify their (intact) folder, but apply nothing: another part is corrupt."""
    broken = tmp_path / "broken"
    shutil.copytree(saved["path"], broken)
    tensors = tensor_file(broken / "env_runner" / "env_to_module_connector" / "MeanStdFilter")
    data = bytearray(tensors.read_bytes())
    data[-3] ^= 0xFF
    tensors.write_bytes(bytes(data))
    algo.train()
    before = algo.learner_group.remote.get_all_states()  # type: ignore[union-attr]
    filters_before = filter_states(algo)
    with pytest.raises(CorruptCheckpointError, match="MeanStdFilter"):
        algo.restore_from_path(broken)
    for state, old in zip(algo.learner_group.remote.get_all_states(), before, strict=True):  # type: ignore[union-attr]
        assert_states_equal(state, old)
    assert_states_equal(filter_states(algo), filters_before)
    assert_runners_on_learner_weights(algo)


def test_memory_filesystem_is_written_by_the_driver(algo: PPO) -> None:
    path = algo.save_to_path("memory://cairn-dist/ckpt")
    expected = learner_state(algo)
    algo.train()
    algo.restore_from_path(path)
    assert_states_equal(learner_state(algo), expected)
    assert_runners_on_learner_weights(algo)


def test_object_store_checkpoint_is_written_and_read_by_the_actors(
    algo: PPO, s3_filesystem: Any, tmp_path: Path
) -> None:
    """Each actor writes and reads its part on S3; the two learners (one node) download their folder once."""
    path = algo.save_to_path("cairn-dist/ckpt", filesystem=s3_filesystem)
    assert path == "s3://cairn-dist/ckpt"
    expected = learner_state(algo)
    local_path = algo.save_to_path(tmp_path / "local")
    on_s3 = {p.split("cairn-dist/ckpt/", 1)[1] for p in s3_filesystem.find("cairn-dist/ckpt")}
    assert on_s3 == files_of(local_path)
    algo.train()
    with CountingProxy(s3_filesystem.client_kwargs["endpoint_url"]) as proxy:
        counted = type(s3_filesystem)(
            key=s3_filesystem.key,
            secret=s3_filesystem.secret,
            client_kwargs={"endpoint_url": proxy.url},
            skip_instance_cache=True,
            use_listings_cache=False,
        )
        algo.restore_from_path("cairn-dist/ckpt", filesystem=counted)
    # What one learner's read asks for (the module folder's manifest twice); before, both learners asked.
    learner = "/cairn-dist/ckpt/learner_group/learner/"
    one_read = {f"/cairn-dist/ckpt/{p}": 1 for p in on_s3 if p.startswith("learner_group/learner/")}
    one_read[f"{learner}rl_module/manifest.json"] = 2
    assert {p: n for p, n in proxy.gets.items() if p.startswith(learner)} == one_read
    for state in algo.learner_group.remote.get_all_states():  # type: ignore[union-attr]
        assert_states_equal(state, expected)  # learner 1 took what learner 0 read
    # Every runner read it with the filesystem from Ray's object store, not from its call's arguments.
    assert all(algo.env_runner_group.foreach_env_runner(runner_functions.resolved_filesystems, local_env_runner=False))
    assert_runners_on_learner_weights(algo)


def test_object_store_secret_is_not_in_the_actors_call_arguments(algo: PPO, s3_filesystem: Any) -> None:
    """What a save or restore sends each actor: the folder with its filesystem by reference, without the secret."""
    import ray

    from cairn.delegation import DelegatedFolder
    from cairn.storage import resolve_storage

    storage, root = resolve_storage("cairn-dist/ckpt", s3_filesystem)
    folder = DelegatedFolder(storage, storage.join(root, "learner_group", "learner"), root, "learner_group/learner")
    secret = S3_SECRET.encode()
    assert secret in ray.cloudpickle.dumps(folder)  # the filesystem pickled whole carries it
    for group in (algo.learner_group.remote, algo.env_runner_group.remote):
        assert group is not None
        sent = group._for_actors(folder)
        assert secret not in ray.cloudpickle.dumps(sent)
        assert group._for_actors(folder).storage.fs is s3_filesystem  # one put per group and filesystem


def test_manager_async_saves_and_restores_go_through_the_actors(algo: PPO, tmp_path: Path) -> None:
    """The manager uses the engine's delegation too: the actors take their state before save returns."""
    with CheckpointManager(tmp_path / "run", keep_last=2, async_save=True) as mgr:
        mgr.save(algo, 1)
        expected = learner_state(algo)
        iteration = algo.training_iteration
        algo.train()  # goes on while the actors write
        mgr.wait()
        assert no_leftovers(tmp_path / "run") == []
        mgr.restore_latest(algo)
    assert algo.training_iteration == iteration
    assert_states_equal(learner_state(algo), expected)
    assert_runners_on_learner_weights(algo)


def _kill_during_save(ray: Any, algo: PPO, actor: Any, path: Path) -> CheckpointError:
    """Make ``actor``'s next checkpoint write slow, kill it during a save; return the save's error."""
    ray.get(actor.inject_save_delay.remote(3.0))
    timer = threading.Timer(1.0, lambda: ray.kill(actor, no_restart=True))
    timer.start()
    try:
        with pytest.raises(CheckpointError) as info:
            algo.save_to_path(path)
    finally:
        timer.join()
    return info.value


def test_env_runner_killed_during_a_save(ray_cluster: Any, algo: PPO, tmp_path: Path) -> None:
    remote = algo.env_runner_group.remote
    assert remote is not None
    label = remote.label(0)
    err = _kill_during_save(ray_cluster, algo, remote.actors[0], tmp_path / "ckpt")
    assert label in str(err) and "died" in str(err)
    assert not (tmp_path / "ckpt").exists()
    assert no_leftovers(tmp_path) == []
    # Training goes on: the dead runner is replaced (same worker index, group state, latest weights).
    metrics = algo.train()
    assert remote.actors[0] is not None and remote.label(0) != label
    assert_runners_on_learner_weights(algo)
    first, *others = filter_states(algo)
    for other in others:
        assert_states_equal(other, first)
    path = algo.save_to_path(tmp_path / "ckpt")
    algo.restore_from_path(path)
    assert algo.training_iteration == metrics["training_iteration"]


def test_learner_killed_during_a_save(ray_cluster: Any, algo: PPO, tmp_path: Path) -> None:
    learners = algo.learner_group.remote
    assert learners is not None
    label = learners.label(0)
    expected = learner_state(algo)
    err = _kill_during_save(ray_cluster, algo, learners.actors[0], tmp_path / "ckpt")
    assert label in str(err)
    assert not (tmp_path / "ckpt").exists()
    assert no_leftovers(tmp_path) == []
    # Training goes on: the learners are rebuilt from the survivor's state.
    before = algo.training_iteration
    algo.learner_group.remote.replace_dead()  # type: ignore[union-attr]
    assert_states_equal(learner_state(algo), expected)
    algo.train()
    assert algo.training_iteration == before + 1
    states = learners.get_all_states()
    assert_states_equal(states[0], states[1])
    assert_runners_on_learner_weights(algo)
