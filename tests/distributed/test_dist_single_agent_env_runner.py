"""RLlib's ``ray.remote(SingleAgentEnvRunner)``: the runner as a Ray actor, as RLlib's users write it.

RLlib's ``test_distributed_env_runner`` (tests/rllib_ported) does this with five actors of one CPU
each; this is its short form on the suite's two-CPU cluster: two actors, an env by id and an env
class (sent to the workers by reference), ``sample(random_actions=True)`` returning episodes.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.env.single_agent_env_runner import SingleAgentEnvRunner
from cairn.rl.examples.envs.classes.simple_corridor import SimpleCorridor

pytestmark = pytest.mark.xdist_group("ray_cluster")  # one Ray per machine (tests/conftest.py, RAY_GROUP)


@pytest.mark.parametrize("env_spec", ["CartPole-v1", SimpleCorridor], ids=["by_id", "by_class"])
def test_single_agent_env_runners_sample_episodes_as_ray_actors(ray_cluster: Any, env_spec: Any) -> None:
    config = (
        AlgorithmConfig()
        .environment(env_spec)
        .env_runners(num_env_runners=2, num_envs_per_env_runner=3, rollout_fragment_length=10)
    )
    remote_class = ray_cluster.remote(num_cpus=1, num_gpus=0)(SingleAgentEnvRunner)
    array = [remote_class.remote(config=config) for _ in range(config.num_env_runners)]
    try:
        results = ray_cluster.get([a.sample.remote(random_actions=True) for a in array], timeout=120)
        for episodes in results:
            assert sum(len(e) for e in episodes) in range(30, 33)  # 3 envs x 10 steps, + up to 2 (RLlib's bound)
    finally:
        for actor in array:
            ray_cluster.kill(actor)
