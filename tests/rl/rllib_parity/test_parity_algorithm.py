"""RLlib's ``rllib/algorithms/tests/test_algorithm.py``: the add/remove-module and counter tests, translated.

Only the checkpoint and module tests of that file are translated; the rest
(evaluation, offline data, old API stack) is not about state.
``test_add_module_and_remove_module`` uses ``Algorithm.add_module`` /
``remove_module`` (issue 14 item 5) with a policy mapping function and
``policies_to_train`` (item 4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import torch
from parity_helpers import (
    OBS_SPACE,
    MultiAgentCartPole,
    map_to_p0,
    map_to_p0_or_p1,
    map_to_p0_or_p2,
    map_to_p1,
    map_to_p1_or_p2,
    tiny_config,
)

from cairn.rl import DEFAULT_MODULE_ID, PPO, Algorithm, EpisodeInfo, MultiRLModuleSpec
from cairn.rl.env.multi_agent_env import resolve_policy_mapping_fn
from cairn.testing import assert_states_equal

NEW_MAPPING_AFTER_ADDING = {1: map_to_p0_or_p1, 2: map_to_p1_or_p2}
"""RLlib: ``lambda agent_id, episode, i=i, **kw: f"p{choice([i, i - 1])}"``."""

MAPPING_AFTER_REMOVING = {2: map_to_p1, 1: map_to_p0}
"""RLlib: ``lambda agent_id, episode, i=i, **kw: f"p{i - 1}"``."""


def module_ids(indices: Iterable[int]) -> set[str]:
    return {f"p{i}" for i in indices}


def mapping_fn(algo: Algorithm) -> Callable[[str, EpisodeInfo], str]:
    """The algorithm's current policy mapping function (RLlib: ``algo.env_runner.config.policy_mapping_fn``).

    The config records it by reference (``"parity_helpers:map_to_p0"``).
    """
    return resolve_policy_mapping_fn(algo.config.policy_mapping_fn)


def episodes(algo: Algorithm, n: int) -> list[EpisodeInfo]:
    """``n`` episodes with seeds 0 .. n-1, for calling a mapping function as a runner would."""
    module_ids = tuple(algo.learner_group.get_weights())
    return [EpisodeInfo(id_=f"0-0-{k}", seed=k, env_index=0, worker_index=0, module_ids=module_ids) for k in range(n)]


def assert_modules_added(
    algo: Algorithm, *, mids: list[int], trainable: list[int], mapped: list[int], not_mapped: list[int]
) -> None:
    """RLlib's ``_assert_modules_added``: modules present, trainable set, what the mapping function picks."""
    assert set(algo.config.policies_to_train) == module_ids(trainable)
    assert module_ids(mids) <= set(algo.learner_group.get_weights())
    assert all(module_id in algo.env_runner.module for module_id in module_ids(mids))
    fn = mapping_fn(algo)
    mapped_modules = {fn("agent_0", episode) for episode in episodes(algo, 100)}
    assert module_ids(mapped) <= mapped_modules
    assert not mapped_modules & module_ids(not_mapped)


def one_obs() -> dict[str, torch.Tensor]:
    return {"obs": torch.as_tensor(OBS_SPACE.sample()[None])}


@pytest.mark.parametrize(
    "phase",
    [
        pytest.param("add_checkpoint_restore_remove", id="add_checkpoint_restore_remove"),
        pytest.param("remove_while_training", id="remove_while_training"),
    ],
)
def test_add_module_and_remove_module(phase: str, tmp_path: Path) -> None:
    """``test_algorithm.py::TestAlgorithm::test_add_module_and_remove_module``.

    Start with ``p0``; add ``p1`` then ``p2`` (each with a new mapping and
    trainable set), checkpoint after each and rebuild with
    ``Algorithm.from_checkpoint``, which must hold exactly the current modules;
    remove ``p1`` from a restored algorithm; finally remove the added modules
    again from the algorithm that trains. Differs: RLlib's
    ``MultiAgentCartPole`` (4 agents) is ``parity_helpers.MultiAgentCartPole``;
    lambdas are module-level functions (recorded by reference) that draw from
    the episode's seed; no evaluation runners; RLlib's
    ``RLModuleSpec.from_module(mod0)`` is ``mod0.spec``; forward_inference gives
    ``actions`` (checked for shape), forward_exploration ``action_dist_inputs``.
    Added (cairn): the checkpoint of the algorithm after ``remove_module`` comes
    back without the removed module. The test runs in two phases: everything up
    to the restored algorithm's removal (``add_checkpoint_restore_remove``), and
    RLlib's final removals from the algorithm that trains
    (``remove_while_training``): as in RLlib they happen at once, while
    episodes that use the removed module are in flight (their agents are
    re-mapped with the new mapping function and the transitions collected with
    the removed module are dropped).
    """
    config = tiny_config(
        env=f"{MultiAgentCartPole.__module__}:MultiAgentCartPole",
        env_config={"num_agents": 4},
        policies=("p0",),
        policy_mapping_fn=map_to_p0,
    )
    algo = PPO(config)
    mod0 = algo.get_module("p0")
    result = algo.train()
    assert "p0" in result["learners"]

    for i in (1, 2):
        mid = f"p{i}"
        multi_spec = algo.add_module(
            mid,
            mod0.spec,
            new_agent_to_module_mapping_fn=NEW_MAPPING_AFTER_ADDING[i],
            new_should_module_be_updated=[f"p{i}", f"p{i - 1}"],
        )
        assert isinstance(multi_spec, MultiRLModuleSpec)  # RLlib returns the new MultiRLModuleSpec
        assert sorted(multi_spec.rl_module_specs) == [f"p{j}" for j in range(i + 1)]
        new_module = algo.get_module(mid)
        assert_modules_added(algo, mids=[0, i], trainable=[i, i - 1], mapped=[i, i - 1], not_mapped=[i - 2])
        assert new_module is not mod0
        for j in range(i + 1):
            assert f"p{j}" in algo.env_runner.module
        assert len(algo.env_runner.module) == i + 1
        algo.train()
        if phase == "remove_while_training":
            continue
        checkpoint = algo.save_to_path(tmp_path / f"with_p{i}")

        # The checkpoint holds more modules than the config the algorithm was built with.
        test = Algorithm.from_checkpoint(checkpoint)
        assert isinstance(test, PPO)
        assert set(test.learner_group.get_weights()) == module_ids(range(i + 1))
        assert_modules_added(test, mids=[0, i - 1, i], trainable=[i - 1, i], mapped=[i - 1, i], not_mapped=[i - 2])
        test.train()
        mod0 = test.get_module("p0")
        assert mod0.forward_inference(one_obs())["actions"].shape == (1,)
        test.stop()

        if i == 2:
            # Restore, then keep only one of the two added modules (plus p0).
            test2 = Algorithm.from_checkpoint(checkpoint)
            test2.remove_module(
                "p1",
                new_agent_to_module_mapping_fn=map_to_p0_or_p2,
                new_should_module_be_updated=["p0"],
            )
            assert_modules_added(test2, mids=[0, 2], trainable=[0], mapped=[0, 2], not_mapped=[1, 4, 5, 6])
            mod2 = test2.get_module("p2")
            test2.train()
            assert mod2.forward_exploration(one_obs())["action_dist_inputs"].shape == (1, 2)
            without_p1 = test2.save_to_path(tmp_path / "without_p1")
            test2.stop()
            test3 = Algorithm.from_checkpoint(without_p1)
            assert set(test3.learner_group.get_weights()) == {"p0", "p2"}
            assert_modules_added(test3, mids=[0, 2], trainable=[0], mapped=[0, 2], not_mapped=[1])
            test3.stop()

    if phase == "add_checkpoint_restore_remove":
        algo.stop()
        return
    for i in (2, 1):
        algo.remove_module(
            f"p{i}",
            new_agent_to_module_mapping_fn=MAPPING_AFTER_REMOVING[i],
            new_should_module_be_updated=[f"p{i - 1}"],
        )
        assert_modules_added(algo, mids=[0, i - 1], trainable=[i - 1], mapped=[i - 1], not_mapped=[i, i + 1])
    algo.stop()


def test_counters_after_checkpoint() -> None:
    """``test_algorithm.py::TestAlgorithm::test_counters_after_checkpoint``.

    Counters start at zero, are non-zero after a step, and a fresh algorithm
    takes them from the first one's state. Differs: RLlib's
    ``__getstate__``/``__setstate__`` and ``algo._counters`` are cairn's
    ``get_state``/``set_state`` and the counters in the state (training
    iteration, env runner and learner lifetime counters).
    """

    def counters(algo: PPO) -> dict[str, int]:
        state = algo.get_state()
        env_runner = state["env_runner"]["counters"]
        learner = state["learner_group"]["learner"]["counters"]
        return {
            "training_iteration": state["training_iteration"],
            "num_env_steps_sampled_lifetime": env_runner["num_env_steps_sampled_lifetime"],
            "num_agent_steps_sampled_lifetime": env_runner["num_agent_steps_sampled_lifetime"],
            "num_updates_lifetime": learner["num_updates_lifetime"],
            "num_module_steps_trained_lifetime": learner["num_module_steps_trained_lifetime"][DEFAULT_MODULE_ID],
        }

    config = tiny_config()
    algo = PPO(config)
    assert all(value == 0 for value in counters(algo).values())
    algo.train()
    counter_values = counters(algo)
    assert all(value != 0 for value in counter_values.values())
    state = algo.get_state()
    algo.stop()

    algo2 = PPO(config)
    assert all(value == 0 for value in counters(algo2).values())
    algo2.set_state(state)
    assert counters(algo2) == counter_values
    assert_states_equal(algo2.get_state(), state)
    algo2.stop()
