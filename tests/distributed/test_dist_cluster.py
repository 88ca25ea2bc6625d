"""A real multi-node Ray cluster on this machine (ray.cluster_utils, at most 3 small nodes).

Node loss: training with ``restart_failed_env_runners`` goes on with the healthy runner
while a lost node's runner cannot be placed anywhere, no call waits past its stated
timeout (``sample_timeout_s``, ``env_runner_restore_timeout_s``), and the group recovers
(``on_env_runners_recreated``) when a node with room comes back. Placement: actors land on
the nodes whose resources the config asks for, and inside a Tune trial each takes its own
bundle of ``Algorithm.default_resource_request``. Tune: a trial whose node is lost resumes on
another node, its remote runner and learners with it, from the checkpoint in the run's storage on
S3 (moto on 127.0.0.1).

Nodes are told apart by custom resources (``runner``, ``learner``): each node that may
hold a runner has exactly one ``runner``, so two runners are on two nodes and a lost
node's runner has nowhere to go until a node with a free ``runner`` joins.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")
pytest.importorskip("ray.tune", reason="Ray Tune is not installed (pip install 'cairn-rl[tune]')")

import ray
from dist_helpers import assert_runners_on_learner_weights, no_leftovers, small_config
from ray import tune
from ray.cluster_utils import Cluster

import runner_functions
from cairn.rl import PPO, PPOConfig
from cairn.rl.distributed._ray import ActorTimeoutError, EnvRunnersUnavailableError
from cairn.rl.distributed.placement import resource_bundles
from ray_session import init_test_ray

pytestmark = pytest.mark.xdist_group("ray_cluster")  # one Ray per machine (tests/conftest.py, RAY_GROUP)

MB = 1024 * 1024
NODE = {"num_cpus": 1, "object_store_memory": 80 * MB}
ROLLOUT = 32 * 2  # small_config: rollout_length x num_envs_per_env_runner, the steps of one runner's rollout

SAMPLE_TIMEOUT_S = 8.0
"""Far above a healthy rollout (milliseconds) on a loaded machine: a test waits this long only where
no runner can deliver, once."""

START_TIMEOUT_S = 120.0
"""``env_runner_restore_timeout_s`` while the node-loss test's runners start (a worker process importing
torch: over 20 s on a loaded 2-core machine)."""

GIVE_UP_S = 4.0
"""``env_runner_restore_timeout_s`` once they are up: the save that cannot place its runner gives up after it.
No start is waited for under it: a replacement on a returning node starts while ``train()`` goes on."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head node (the driver's) to which each test adds the worker nodes it needs; the session's Ray comes back after.

    The head has no CPU: every actor of these tests reserves a custom resource of a worker node, and a
    raylet starts one idle worker process per CPU (``import ray``: seconds of the 2 shared cores here).
    """
    was_running = ray.is_initialized()
    ray.shutdown()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 100 * MB})
    try:
        init_test_ray(ray, address=nodes.address)
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()
        if was_running:  # the session's cluster (tests/conftest.py) is expected by the tests after this module
            init_test_ray(ray)


def _node_ids(algo: PPO) -> list[str]:
    return list(algo.env_runner_group.foreach_env_runner(runner_functions.node_id, local_env_runner=False))


def _learner_node_ids(algo: PPO) -> list[str]:
    remote = algo.learner_group.remote
    assert remote is not None
    return [node for node, _, _ in ray.get([a.node_and_free_port.remote() for a in remote.actors])]


def test_actors_land_where_the_config_resources_say_and_training_goes_on_through_a_lost_node(
    cluster: Cluster, tmp_path: Path
) -> None:
    """One algorithm for both (its actors' start is most of the time): placement, then node loss and return.

    The learners are on the node that stays (``b``, the only one with ``learner``), so the lost node
    costs a runner only; the save and restore after the recovery include the remote learners.
    """
    a = cluster.add_node(**NODE, resources={"runner": 1})
    b = cluster.add_node(**NODE, resources={"runner": 1, "learner": 2})
    cluster.wait_for_nodes()
    runner_functions.recreated.clear()
    config = small_config(
        num_env_runners=2,
        custom_resources_per_env_runner={"runner": 1},
        num_learners=2,
        custom_resources_per_learner={"learner": 1},
        sample_timeout_s=SAMPLE_TIMEOUT_S,
        env_runner_restore_timeout_s=START_TIMEOUT_S,
        callbacks_on_env_runners_recreated=["runner_functions:record_recreated"],
    )
    # What a Tune trial of this config reserves: RLlib's layout (zero amounts left out).
    assert [bundle.resources for bundle in resource_bundles(config, evaluation=None)] == [
        {"CPU": 1.0},
        {"runner": 1.0},
        {"runner": 1.0},
        {"learner": 1.0},
        {"learner": 1.0},
    ]
    algo = PPO(config)
    remote = algo.env_runner_group.remote
    assert remote is not None
    try:
        assert sorted(_node_ids(algo)) == sorted([a.node_id, b.node_id])  # one runner per node with a `runner`
        assert _learner_node_ids(algo) == [b.node_id, b.node_id]  # the only node with `learner`
        assert algo.train()["env_runners/num_env_steps_sampled"] == 2 * ROLLOUT
        lost_index = _node_ids(algo).index(a.node_id) + 1
        cluster.remove_node(a)

        # The healthy runner trains on while the lost one's replacement waits for a node with a `runner`.
        for _ in range(2):
            assert algo.train()["env_runners/num_env_steps_sampled"] == ROLLOUT
        assert remote.num_healthy_env_runners == 1
        assert runner_functions.recreated == []

        # A save needs every runner: it gives up after env_runner_restore_timeout_s, and says so.
        remote.config.env_runner_restore_timeout_s = GIVE_UP_S  # read at each call (the config is the algorithm's)
        with pytest.raises(ActorTimeoutError, match=f"env_runner_restore_timeout_s={GIVE_UP_S:g} s") as info:
            algo.save_to_path(tmp_path / "ckpt")
        assert "reserves {'runner': 1.0}" in str(info.value)
        assert not (tmp_path / "ckpt").exists() and no_leftovers(tmp_path) == []

        # A node with room comes back: the replacement starts, is reported, and samples again.
        c = cluster.add_node(**NODE, resources={"runner": 1})
        cluster.wait_for_nodes()
        for _ in range(600):  # a cap far above a runner's start; each pass trains with the healthy runner
            result = algo.train()
            if runner_functions.recreated:
                break
            time.sleep(0.2)
        assert runner_functions.recreated == [([lost_index], False)]
        assert algo.train()["env_runners/num_env_steps_sampled"] == 2 * ROLLOUT
        assert sorted(_node_ids(algo)) == sorted([b.node_id, c.node_id])
        assert_runners_on_learner_weights(algo)
        path = algo.save_to_path(tmp_path / "ckpt")
        iteration = algo.training_iteration
        algo.restore_from_path(path)
        assert algo.training_iteration == iteration > result["training_iteration"] - 1

        # Every runner's node lost (the learners' too): train() gives up after sample_timeout_s with nothing trained.
        cluster.remove_node(b)
        cluster.remove_node(c)
        with pytest.raises(EnvRunnersUnavailableError, match=f"sample_timeout_s={SAMPLE_TIMEOUT_S} s") as unavailable:
            algo.train()
        assert isinstance(unavailable.value, TimeoutError)
        assert algo.training_iteration == iteration
    finally:
        algo.stop()


# ---------------------------------------------------------------- Tune: a trial resumes on another node from S3

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Tune's workers cannot import this module

ITERATIONS = 3
CRASH_AT = 2
TRIAL_NODE = {"trial": 1, "runner": 1, "learner": 2}
"""A node that can hold the whole trial: its process (``trial``), its runner and its two learners."""


def _log(path: str, **event: Any) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def _events(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()] if os.path.exists(path) else []


def tune_config() -> PPOConfig:
    """The trial's algorithm: a remote runner and two remote learners, on nodes with ``runner`` / ``learner``.

    Written out (not ``small_config``): Tune's workers get this module by value, not ``dist_helpers``.
    """
    return PPOConfig(
        env="CartPole-v1",
        seed=5,
        num_envs_per_env_runner=2,
        rollout_length=32,
        minibatch_size=32,
        num_epochs=2,
        model_config={"hidden_sizes": [16, 16]},
        num_env_runners=1,
        custom_resources_per_env_runner={"runner": 1},
        num_learners=2,
        custom_resources_per_learner={"learner": 1},
    )


def trial_resources() -> Any:
    """``PPO.default_resource_request`` with the trial's own process on a node with a ``trial``."""
    from ray.tune import PlacementGroupFactory

    request = PPO.default_resource_request(tune_config())
    first, *rest = request.bundles
    return PlacementGroupFactory([{**first, "trial": 1}, *rest], strategy=request.strategy)


def trainable(config: dict[str, Any]) -> None:
    """PPO with remote actors; in its first run it waits, after reporting iteration CRASH_AT, for its node to go."""
    import torch

    import runner_functions
    from cairn.integrations import tune as cairn_tune

    torch.set_num_threads(1)
    algo = PPO(tune_config())
    restored = cairn_tune.restore(algo)
    remote = algo.learner_group.remote
    assert remote is not None
    _log(
        config["log"],
        event="start",
        node=ray.get_runtime_context().get_node_id(),
        actor_nodes=sorted(
            algo.env_runner_group.foreach_env_runner(runner_functions.node_id, local_env_runner=False)
            + [node for node, _, _ in ray.get([a.node_and_free_port.remote() for a in remote.actors])]
        ),
        restored=restored,
        iteration=algo.training_iteration,
    )
    while True:
        metrics = algo.train()
        cairn_tune.report(algo, {"algo_iteration": metrics["training_iteration"]})
        if metrics["training_iteration"] == CRASH_AT and restored is None:
            _log(config["log"], event="reported", iteration=CRASH_AT)
            time.sleep(300)  # the test removes this node now (a cap): the trial resumes elsewhere from the storage


def test_a_tune_trial_resumes_on_another_node_from_s3(cluster: Cluster, s3_filesystem: Any, tmp_path: Path) -> None:
    """The trial's node is lost after its checkpoint at CRASH_AT: Tune starts it again on the other node
    that can hold it, where its process, runner and learners read that checkpoint from S3 (moto on 127.0.0.1)."""
    import pyarrow.fs as pafs

    nodes = [cluster.add_node(**NODE, resources=TRIAL_NODE) for _ in range(2)]
    cluster.wait_for_nodes()
    log = str(tmp_path / "events.jsonl")
    root = f"cairn-dist/tune-{uuid.uuid4().hex[:8]}"
    lost: list[str] = []
    failed: list[BaseException] = []

    def remove_the_trial_node() -> None:
        """Once the checkpoint at CRASH_AT is reported, the node the trial runs on goes (the other stays).

        Removed from this thread: the main one is in ``tuner.fit()``. Both nodes are there from the start:
        this thread only removes one (a node added from it never joined in a trial run of this test).
        """
        try:
            for _ in range(3000):  # a cap far above the trial's start and two iterations
                events = _events(log)
                if any(e["event"] == "reported" for e in events):
                    placed = next(e["node"] for e in events if e["event"] == "start")
                    node = next(n for n in nodes if n.node_id == placed)
                    cluster.remove_node(node)
                    nodes.remove(node)
                    lost.append(placed)
                    return
                time.sleep(0.2)
        except BaseException as err:  # the test reports it; the trial's wait then ends at its cap
            failed.append(err)

    remover = threading.Thread(target=remove_the_trial_node, daemon=True)
    remover.start()
    try:
        tuner = tune.Tuner(
            tune.with_resources(trainable, trial_resources()),
            param_space={"log": log},
            run_config=tune.RunConfig(
                name="resume",
                storage_path=root,
                storage_filesystem=pafs.PyFileSystem(pafs.FSSpecHandler(s3_filesystem)),
                stop={"training_iteration": ITERATIONS},
                failure_config=tune.FailureConfig(max_failures=1),
                verbose=0,
            ),
        )
        results = tuner.fit()
        remover.join(timeout=60)
    finally:
        for node in list(nodes):
            cluster.remove_node(node)
    assert not failed, failed
    assert not results.errors
    assert results[0].metrics["algo_iteration"] == ITERATIONS  # no iteration lost or repeated
    starts = [e for e in _events(log) if e["event"] == "start"]
    assert [s["iteration"] for s in starts] == [0, CRASH_AT]
    assert starts[0]["restored"] is None
    assert str(starts[1]["restored"]).startswith(root)  # read from S3, where Tune stores it
    first, second = starts[0]["node"], starts[1]["node"]
    assert lost == [first] and second != first  # resumed on the node that was left
    assert starts[0]["actor_nodes"] == [first] * 3 and starts[1]["actor_nodes"] == [second] * 3
    # Staging copies are gone; the trial's checkpoints are cairn checkpoints in the storage.
    found = s3_filesystem.find(root)
    assert not [p for p in found if "/cairn-staging/" in p]
    assert any(p.endswith("/cairn/metadata.json") and "/checkpoint_" in p for p in found)
