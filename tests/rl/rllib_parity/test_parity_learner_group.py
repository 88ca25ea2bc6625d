"""RLlib's ``rllib/core/learner/tests/test_learner_group.py`` (checkpoint and module tests), translated.

RLlib runs each test in several scaling modes (``local-cpu``, ``multi-gpu-ddp``,
``multi-cpu-ddp``); here the local learner only: restoring into remote
learners is covered by ``tests/distributed`` (``test_dist_ray.py``,
``test_dist_resume.py``). Not translated (not about state):
``test_learner_group_build_from_algorithm_config``, ``test_update_multi_gpu``,
``test_async_update`` and the DDP update-plan tests
(``test_learners_agree_on_the_update_plan``, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parity_helpers import ACT_SPACE, OBS_SPACE, states_differ, tiny_config
from rl_helpers import fake_train_batch

from cairn.rl import DEFAULT_MODULE_ID, LearnerGroup, MultiRLModule, RLModuleSpec
from cairn.testing import assert_states_equal

SPEC = RLModuleSpec(observation_space=OBS_SPACE, action_space=ACT_SPACE, model_config={"hidden_sizes": [8]})


def test_add_module_and_remove_module(tmp_path: Path) -> None:
    """``test_learner_group.py::TestLearnerGroupSyncUpdate::test_add_module_and_remove_module``.

    A group that trains ``p0`` gets ``p1`` added from a spec, trains both,
    loses ``p1`` again and trains ``p0`` alone; the update results name exactly
    the modules trained. Added (cairn): a checkpoint taken while ``p1`` is
    there brings it back with ``LearnerGroup.from_checkpoint``, one taken after
    the removal does not.
    """
    group = LearnerGroup(tiny_config(policies=("p0",)), {"p0": SPEC})
    group.update({"p0": fake_train_batch()})

    group.add_module("p1", SPEC)
    results = group.update({"p0": fake_train_batch(), "p1": fake_train_batch()})
    assert {key.split("/")[1] for key in results} == {"p0", "p1"}
    with_p1 = group.save_to_path(tmp_path / "with_p1")

    group.remove_module("p1")
    results = group.update({"p0": fake_train_batch()})
    assert {key.split("/")[1] for key in results} == {"p0"}
    without_p1 = group.save_to_path(tmp_path / "without_p1")

    restored = LearnerGroup.from_checkpoint(with_p1)
    assert set(restored.get_weights()) == {"p0", "p1"}
    assert set(LearnerGroup.from_checkpoint(without_p1).get_weights()) == {"p0"}


def test_restore_from_path_multi_rl_module_and_individual_modules(tmp_path: Path) -> None:
    """``test_learner_group.py::TestLearnerGroupCheckpointRestore::test_restore_from_path_multi_rl_module_and_individual_modules``.

    A standalone MultiRLModule checkpoint restores into the group's
    ``learner/rl_module``; single RLModule checkpoints restore into
    ``learner/rl_module/0`` and ``.../1``; a MultiRLModule first, then one
    module over it. Differs: RLlib builds the group with the default module,
    adds ``0`` and ``1`` and removes the default; here it is built with modules
    ``0`` and ``1`` (``add_module`` is the test above).
    RLlib's ``set_weights(w)`` is ``set_state({"learner": {"rl_module": w}})``.
    """
    group = LearnerGroup(tiny_config(policies=("0", "1")), {"0": SPEC, "1": SPEC})

    def restore_weights(weights: dict[str, Any]) -> None:
        group.set_state({"learner": {"rl_module": weights}})
        assert_states_equal(group.get_weights(), weights)

    # Just the MultiRLModule.
    module_0, module_1 = SPEC.build(), SPEC.build()
    multi = MultiRLModule()
    multi.add_module("0", module_0)
    multi.add_module("1", module_1)
    path = multi.save_to_path(tmp_path / "multi")
    old = group.get_weights()
    group.restore_from_path(path, component="learner/rl_module")
    assert_states_equal(group.get_weights(), multi.get_state())
    restore_weights(old)

    # Just single RLModules.
    temp_module = SPEC.build()
    path_0 = module_0.save_to_path(tmp_path / "module_0")
    path_temp = temp_module.save_to_path(tmp_path / "temp_module")
    group.restore_from_path(path_0, component="learner/rl_module/0")
    group.restore_from_path(path_temp, component="learner/rl_module/1")
    expected = MultiRLModule()
    expected.add_module("0", module_0)
    expected.add_module("1", temp_module)
    assert_states_equal(group.get_weights(), expected.get_state())
    restore_weights(old)

    # A MultiRLModule, then one RLModule over its module "1".
    module_0 = SPEC.build()
    multi = MultiRLModule()
    multi.add_module("0", module_0)
    multi.add_module("1", SPEC.build())
    path = multi.save_to_path(tmp_path / "multi_2")
    module_1 = SPEC.build()
    path_1 = module_1.save_to_path(tmp_path / "module_1")
    group.restore_from_path(path, component="learner/rl_module")
    group.restore_from_path(path_1, component="learner/rl_module/1")
    expected = MultiRLModule()
    expected.add_module("0", module_0)
    expected.add_module("1", module_1)
    assert_states_equal(group.get_weights(), expected.get_state())


def test_save_to_path_and_restore_from_path(tmp_path: Path) -> None:
    """``test_learner_group.py::TestLearnerGroupSaveAndRestoreState::test_save_to_path_and_restore_from_path``.

    Save, update, save; a new group restored after one update and updated once
    equals a new group restored at the start and updated twice. Differs: RLlib
    compares within ``rtol=0.05``; cairn's restore is exact, so results and
    weights must be equal bit for bit.
    """
    config = tiny_config()
    specs = {DEFAULT_MODULE_ID: SPEC}
    batch = {DEFAULT_MODULE_ID: fake_train_batch()}

    def module_weights(group: LearnerGroup) -> dict[str, Any]:
        state: dict[str, Any] = group.get_state(components="learner/rl_module")["learner"]["rl_module"]
        return state

    group = LearnerGroup(config, specs)
    initial = group.save_to_path(tmp_path / "initial")
    initial_weights = group.get_weights()
    group.update(batch)
    assert states_differ(initial_weights[DEFAULT_MODULE_ID], module_weights(group)[DEFAULT_MODULE_ID])
    after_1 = group.save_to_path(tmp_path / "after_1_update")
    group.close()

    group = LearnerGroup(config, specs)
    group.restore_from_path(after_1)
    results_with_break = group.update(batch)
    weights_with_break = module_weights(group)
    group.close()

    group = LearnerGroup(config, specs)
    group.restore_from_path(initial)
    assert_states_equal(module_weights(group), initial_weights)
    group.update(batch)
    results_without_break = group.update(batch)
    assert results_with_break == results_without_break
    assert_states_equal(weights_with_break, group.get_weights())
