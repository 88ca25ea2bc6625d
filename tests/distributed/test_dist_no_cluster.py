"""The pieces of the Ray backends that need no cluster: versioned weights, errors without Ray."""

from __future__ import annotations

import sys

import pytest
from dist_helpers import small_config

from cairn.registry import AllowedNames
from cairn.rl import PPO, LearnerGroup, RLModule
from cairn.rl.distributed.env_runner_actor import EnvRunnerActor
from cairn.rl.env.env_runner import EnvRunner
from cairn.testing import assert_states_equal


def test_a_stale_weight_broadcast_never_replaces_a_newer_one() -> None:
    actor = EnvRunnerActor(small_config(), worker_index=1, runner_class=EnvRunner, allowed=AllowedNames())
    module = actor.runner.module["default_policy"]
    assert isinstance(module, RLModule)
    newer = {name: value + 1.0 for name, value in module.get_state().items()}
    older = {name: value - 1.0 for name, value in module.get_state().items()}
    assert actor.set_weights(3, {"default_policy": newer}) == 3
    assert actor.set_weights(2, {"default_policy": older}) == 3  # late and older: ignored
    version, state = actor.get_module_state()
    assert version == 3
    assert_states_equal(state["default_policy"], newer)
    batches, report = actor.sample_batches()
    assert report["weights_version"] == 3 and "default_policy" in batches


def test_without_ray_the_distributed_settings_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ValueError, match=r"num_env_runners=2 .*pip install 'cairn-rl\[ray\]'"):
        PPO(small_config(num_env_runners=2))
    with pytest.raises(ValueError, match=r"num_learners=3 .*pip install 'cairn-rl\[ray\]'"):
        PPO(small_config(num_learners=3))
    specs = PPO(small_config()).learner_group.module_specs
    with pytest.raises(ValueError, match=r"pip install 'cairn-rl\[ray\]'"):
        LearnerGroup(small_config(num_learners=2), specs)
    # Everything else works without Ray.
    assert PPO(small_config(num_learners=1)).train()["training_iteration"] == 1


def test_storage_says_whether_other_processes_see_it() -> None:
    """The capability the actor groups ask (not a protocol check): memory:// is private to this process."""
    import fsspec

    from cairn.storage import FsspecStorage, LocalStorage

    memory, local = FsspecStorage(fsspec.filesystem("memory")), LocalStorage()
    assert memory.shared_between_processes is False
    assert local.shared_between_processes is True


def test_fault_tolerance_and_placement_settings_under_rllib_names() -> None:
    config = (
        small_config()
        .fault_tolerance(
            restart_failed_env_runners=False, ignore_env_runner_failures=True, max_num_env_runner_restarts=3
        )
        .env_runners(sample_timeout_s=None, custom_resources_per_env_runner={"sampler": 1})
        .learners(num_gpus_per_learner=0.5, custom_resources_per_learner={"trainer": 1})
        .resources(num_cpus_for_main_process=2, placement_strategy="SPREAD")
        .callbacks(on_env_runners_recreated="runner_functions:record_recreated")
    )
    config.validate()
    assert (config.restart_failed_env_runners, config.ignore_env_runner_failures) == (False, True)
    assert (config.max_num_env_runner_restarts, config.sample_timeout_s) == (3, None)
    assert config.custom_resources_per_env_runner == {"sampler": 1}
    assert (config.num_gpus_per_learner, config.custom_resources_per_learner) == (0.5, {"trainer": 1})
    assert (config.num_cpus_for_main_process, config.placement_strategy) == (2, "SPREAD")
    assert config.callbacks_on_env_runners_recreated == ["runner_functions:record_recreated"]
    for bad, match in [
        ({"sample_timeout_s": 0}, "sample_timeout_s"),
        ({"sample_timeout_s": float("nan")}, "sample_timeout_s"),
        ({"max_num_env_runner_restarts": -1}, "max_num_env_runner_restarts"),
        ({"custom_resources_per_env_runner": {"CPU": 1}}, "num_cpus_per_env_runner"),
        ({"custom_resources_per_learner": {"x": -1}}, "custom_resources_per_learner"),
        ({"num_gpus_per_learner": float("inf")}, "num_gpus_per_learner"),
        ({"placement_strategy": "ANYWHERE"}, "placement_strategy"),
    ]:
        with pytest.raises(ValueError, match=match):
            small_config(**bad).validate()


def test_default_resource_request_is_rllib_layout() -> None:
    pytest.importorskip("ray.tune")
    config = small_config(
        num_env_runners=2,
        num_cpus_per_env_runner=1,
        custom_resources_per_env_runner={"sampler": 1},
        evaluation_num_env_runners=1,
        evaluation_config={"num_cpus_per_env_runner": 2},
        num_learners=2,
        num_gpus_per_learner=1,
        placement_strategy="SPREAD",
    )
    request = PPO.default_resource_request(config)
    assert request.bundles == [
        {"CPU": 1.0},
        {"CPU": 1.0, "sampler": 1.0},
        {"CPU": 1.0, "sampler": 1.0},
        {"CPU": 2.0, "sampler": 1.0},
        {"GPU": 1.0},
        {"GPU": 1.0},
    ]
    assert request.strategy == "SPREAD"
    # Actors that reserve nothing (cairn's defaults) get no bundle.
    assert PPO.default_resource_request(small_config(num_env_runners=2)).bundles == [{"CPU": 1.0}]
