"""RLlib's ``rllib/algorithms/tests/test_algorithm_rl_module_restore.py``, translated to cairn.

An algorithm whose modules start from checkpoints: ``RLModuleSpec(...,
load_state_path=...)`` and ``MultiRLModuleSpec(rl_module_specs, load_state_path,
modules_to_load)`` given to the config as ``rl_module_spec`` (issue 14 item 3).
Differs: RLlib's ``MultiAgentCartPole`` with ``policy_mapping_fn`` is cairn's
``"multi:CartPole-v1"`` with agent ``agent_i`` mapped to ``policy_i`` (a static
``policy_mapping``); ``PPOTorchRLModule`` + ``PPOCatalog`` is cairn's default
module (no ``module_class`` given), ``fcnet_hiddens`` is ``hidden_sizes``; widths
are 8 * (i + 1) instead of 32 * (i + 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parity_helpers import ACT_SPACE, OBS_SPACE, learner_weights, states_differ, tiny_config, tiny_multi_config

from cairn.rl import DEFAULT_MODULE_ID, PPO, MultiRLModuleSpec, RLModuleSpec
from cairn.testing import assert_states_equal


def module_spec(hidden: int, **kwargs: Any) -> RLModuleSpec:
    """A CartPole module spec ``hidden`` units wide (``kwargs``: ``load_state_path``)."""
    return RLModuleSpec(
        observation_space=OBS_SPACE, action_space=ACT_SPACE, model_config={"hidden_sizes": [hidden]}, **kwargs
    )


def policy_ids(num_agents: int) -> tuple[str, ...]:
    return tuple(f"policy_{i}" for i in range(num_agents))


def train_once_and_stop(algo: PPO) -> None:
    """The algorithm trains with the loaded modules (RLlib: ``algo.train(); algo.stop()``)."""
    result = algo.train()
    assert result["training_iteration"] == 1
    algo.stop()


def test_e2e_load_simple_multi_rl_module(tmp_path: Path) -> None:
    """``test_algorithm_rl_module_restore.py::TestAlgorithmRLModuleRestore::test_e2e_load_simple_multi_rl_module``.

    A MultiRLModule saved on its own starts every module of a new algorithm.
    """
    specs = {module_id: module_spec(8 * (i + 1)) for i, module_id in enumerate(policy_ids(2))}
    multi_rl_module = MultiRLModuleSpec(rl_module_specs=specs).build()
    weights = multi_rl_module.get_state()
    path = multi_rl_module.save_to_path(tmp_path / "multi_rl_module")

    config = tiny_multi_config(
        policy_ids(2), rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs, load_state_path=path)
    )
    algo = PPO(config)
    assert_states_equal(learner_weights(algo), weights)
    train_once_and_stop(algo)


def test_e2e_load_complex_multi_rl_module(tmp_path: Path) -> None:
    """``test_algorithm_rl_module_restore.py::TestAlgorithmRLModuleRestore::test_e2e_load_complex_multi_rl_module``.

    A MultiRLModule checkpoint starts ``policy_0``; ``policy_1``'s own spec
    names another module's checkpoint, which wins over the MultiRLModule's.
    """
    specs = {module_id: module_spec(8 * (i + 1)) for i, module_id in enumerate(policy_ids(2))}
    multi_rl_module = MultiRLModuleSpec(rl_module_specs=specs).build()
    multi_path = multi_rl_module.save_to_path(tmp_path / "multi_rl_module")
    module_to_swap_in = module_spec(16).build()
    swap_path = module_to_swap_in.save_to_path(tmp_path / "module_to_swap_in")

    specs["policy_1"] = module_spec(16, load_state_path=swap_path)
    config = tiny_multi_config(
        policy_ids(2), rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs, load_state_path=multi_path)
    )
    algo = PPO(config)
    weights = learner_weights(algo)
    assert_states_equal(weights["policy_0"], multi_rl_module["policy_0"].get_state())
    assert_states_equal(weights["policy_1"], module_to_swap_in.get_state())
    train_once_and_stop(algo)


def test_e2e_load_rl_module(tmp_path: Path) -> None:
    """``test_algorithm_rl_module_restore.py::TestAlgorithmRLModuleRestore::test_e2e_load_rl_module``.

    A single RLModule checkpoint starts the default module of a single-agent
    algorithm.
    """
    module = module_spec(8).build()
    path = module.save_to_path(tmp_path / "module")
    algo = PPO(tiny_config(rl_module_spec=module_spec(8, load_state_path=path)))
    assert_states_equal(learner_weights(algo)[DEFAULT_MODULE_ID], module.get_state())
    train_once_and_stop(algo)


def test_e2e_load_complex_multi_rl_module_with_modules_to_load(tmp_path: Path) -> None:
    """``test_algorithm_rl_module_restore.py::TestAlgorithmRLModuleRestore::test_e2e_load_complex_multi_rl_module_with_modules_to_load``.

    ``modules_to_load={"policy_0"}`` takes only ``policy_0`` from the
    MultiRLModule checkpoint; ``policy_1`` comes from its own checkpoint;
    ``policy_2`` is not loaded (its weights differ from the checkpoint's).
    """
    specs = {module_id: module_spec(8 * (i + 1)) for i, module_id in enumerate(policy_ids(3))}
    multi_rl_module = MultiRLModuleSpec(rl_module_specs=specs).build()
    multi_path = multi_rl_module.save_to_path(tmp_path / "multi_rl_module")
    module_to_swap_in = module_spec(16).build()
    swap_path = module_to_swap_in.save_to_path(tmp_path / "module_to_swap_in")

    specs["policy_1"] = module_spec(16, load_state_path=swap_path)
    config = tiny_multi_config(
        policy_ids(3),
        rl_module_spec=MultiRLModuleSpec(
            rl_module_specs=specs, load_state_path=multi_path, modules_to_load={"policy_0"}
        ),
    )
    algo = PPO(config)
    weights = learner_weights(algo)
    assert_states_equal(weights["policy_0"], multi_rl_module["policy_0"].get_state())
    assert_states_equal(weights["policy_1"], module_to_swap_in.get_state())
    assert states_differ(weights["policy_2"], multi_rl_module["policy_2"].get_state())
    train_once_and_stop(algo)
