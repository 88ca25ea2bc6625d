"""The pieces of the Ray backends that need no cluster: versioned weights, errors without Ray."""

from __future__ import annotations

import sys

import pytest
from dist_helpers import small_config

from cairn.registry import AllowedModules
from cairn.rl import PPO, LearnerGroup, RLModule
from cairn.rl.distributed.env_runners import EnvRunnerActor
from cairn.rl.env.env_runner import EnvRunner
from cairn.testing import assert_states_equal


def test_a_stale_weight_broadcast_never_replaces_a_newer_one() -> None:
    actor = EnvRunnerActor(small_config(), worker_index=1, runner_class=EnvRunner, allowed=AllowedModules())
    module = actor.runner.module["default_policy"]
    assert isinstance(module, RLModule)
    newer = {name: value + 1.0 for name, value in module.get_state().items()}
    older = {name: value - 1.0 for name, value in module.get_state().items()}
    assert actor.set_weights(3, {"default_policy": newer}) == 3
    assert actor.set_weights(2, {"default_policy": older}) == 3  # late and older: ignored
    version, state = actor.get_module_state()
    assert version == 3
    assert_states_equal(state["default_policy"], newer)
    batches, report = actor.sample()
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
