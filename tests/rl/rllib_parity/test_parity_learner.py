"""RLlib's ``rllib/core/learner/tests/test_learner.py`` (the checkpoint and module tests), translated.

RLlib builds a BC learner from ``BaseTestingAlgorithmConfig``; here it is the
learner class a cairn PPO config names (``PPOLearner``) on CartPole specs,
trained on a fake batch; ``Learner.from_checkpoint`` rebuilds it. Not
translated (not about state): ``test_end_to_end_update``,
``test_compute_gradients``, ``test_postprocess_gradients``,
``test_apply_gradients``, ``test_multi_agent_learner_results``.
"""

from __future__ import annotations

from pathlib import Path

from parity_helpers import ACT_SPACE, OBS_SPACE, states_differ, tiny_config
from rl_helpers import fake_train_batch

from cairn.rl import DEFAULT_MODULE_ID, Learner, RLModuleSpec
from cairn.testing import assert_states_equal

SPEC = RLModuleSpec(observation_space=OBS_SPACE, action_space=ACT_SPACE, model_config={"hidden_sizes": [8]})


def new_learner() -> Learner:
    """The config's learner (PPOLearner) of one default module, initialised from torch's global RNG (two differ).

    RLlib: ``config.build_learner(env=...)``.
    """
    config = tiny_config()
    return config.get_default_learner_class()(config, {DEFAULT_MODULE_ID: SPEC})


def assert_same_learner_state(learner1: Learner, learner2: Learner) -> None:
    """RLlib's ``_check_learner_states``: module weights and optimizer states (here also RNG and counters)."""
    assert set(learner2.module.keys()) == set(learner1.module.keys())
    assert set(learner2.optimizers) == set(learner1.optimizers)
    assert_states_equal(learner2.get_state(), learner1.get_state())


def test_save_to_path_and_restore_from_path(tmp_path: Path) -> None:
    """``test_learner.py::TestLearner::test_save_to_path_and_restore_from_path``.

    Restore into a fresh learner, then (after ``add_module`` and after
    ``remove_module``) ``Learner.from_checkpoint`` rebuilds the current modules
    and optimizers. Differs: cairn's ``Learner.add_module`` takes a built module
    (``spec.build()``), RLlib's a ``module_spec``; the learner is trained once
    first so that the optimizer state is not empty.
    """
    learner1 = new_learner()
    learner1.update({DEFAULT_MODULE_ID: fake_train_batch()})
    path = learner1.save_to_path(tmp_path / "plain")
    learner2 = new_learner()
    assert states_differ(learner2.module[DEFAULT_MODULE_ID].get_state(), learner1.module[DEFAULT_MODULE_ID].get_state())
    learner2.restore_from_path(path)
    assert_same_learner_state(learner1, learner2)

    learner1.add_module("test", SPEC.build())
    learner1.update({"test": fake_train_batch()})
    path = learner1.save_to_path(tmp_path / "added")
    assert_same_learner_state(learner1, Learner.from_checkpoint(path))

    learner1.remove_module(DEFAULT_MODULE_ID)
    path = learner1.save_to_path(tmp_path / "removed")
    learner2 = Learner.from_checkpoint(path)
    assert set(learner2.module.keys()) == {"test"}
    assert_same_learner_state(learner1, learner2)


def test_add_remove_module() -> None:
    """``test_learner.py::TestLearner::test_add_remove_module``.

    After adding ``test`` and removing the default module, only ``test`` is
    left, with its own optimizer, and an update trains it. Differs: RLlib checks
    the SGD rule through ``compute_gradients``/``apply_gradients`` on a sum
    loss, which cairn's Learner does not expose; here the state says which
    modules and optimizers exist, and one update changes ``test``'s weights.
    """
    learner = new_learner()
    learner.add_module("test", SPEC.build())
    learner.remove_module(DEFAULT_MODULE_ID)
    assert set(learner.module.keys()) == {"test"}
    state = learner.get_state()
    assert set(state["optimizers"]) == {"test"}
    assert set(state["rl_module"]) == {"test"}

    before = learner.module["test"].get_state()
    metrics = learner.update({"test": fake_train_batch()})
    assert {key.split("/")[1] for key in metrics} == {"test"}
    assert states_differ(before, learner.module["test"].get_state())
