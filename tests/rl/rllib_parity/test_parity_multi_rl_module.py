"""RLlib's ``rllib/core/rl_module/tests/test_multi_rl_module.py``, translated to cairn.

RLlib builds its MultiRLModules out of the example ``VPGTorchRLModule`` (a
user's own module class). Each test here runs with cairn's default module
(``model_config={"hidden_sizes": [h]}``), and again with the user-module
counterpart :class:`parity_helpers.VPGModule` (``model_config={"hidden_dim": h}``,
built through ``RLModuleSpec(module_class=...)``, issue 14 item 3). RLlib's
``as_multi_rl_module()`` becomes ``MultiRLModule({DEFAULT_MODULE_ID: spec})``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from parity_helpers import ACT_SPACE, OBS_SPACE, VPGModule, states_differ

from cairn.rl import DEFAULT_MODULE_ID, MultiRLModule, RLModule, RLModuleSpec
from cairn.testing import assert_states_equal

MODULE_KINDS = [pytest.param("default", id="default_module"), pytest.param("user", id="user_module")]


def spec_of(kind: str, hidden: int) -> Any:
    """A spec of a CartPole module ``hidden`` units wide: cairn's default module, or a user's class."""
    if kind == "user":
        return RLModuleSpec(
            module_class=VPGModule,
            observation_space=OBS_SPACE,
            action_space=ACT_SPACE,
            model_config={"hidden_dim": hidden},
        )
    return RLModuleSpec(observation_space=OBS_SPACE, action_space=ACT_SPACE, model_config={"hidden_sizes": [hidden]})


def module_of(kind: str, hidden: int) -> RLModule:
    module = spec_of(kind, hidden).build()
    if kind == "user":
        assert isinstance(module, VPGModule)
    return module


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_get_state_and_set_state(kind: str) -> None:
    """``test_multi_rl_module.py::TestMultiRLModule::test_get_state_and_set_state``.

    The state of a MultiRLModule is module id -> that module's state; another
    MultiRLModule's weights differ until ``set_state`` copies them in.
    """
    module = MultiRLModule({DEFAULT_MODULE_ID: spec_of(kind, 32)})
    state = module.get_state()
    assert isinstance(state, dict)
    assert set(state) == set(module.keys())
    assert set(state[DEFAULT_MODULE_ID]) == set(module[DEFAULT_MODULE_ID].get_state())

    module2 = MultiRLModule({DEFAULT_MODULE_ID: spec_of(kind, 32)})
    assert states_differ(state[DEFAULT_MODULE_ID], module2.get_state()[DEFAULT_MODULE_ID])
    module2.set_state(state)
    assert_states_equal(module2.get_state(), state)


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_add_remove_modules(kind: str) -> None:
    """``test_multi_rl_module.py::TestMultiRLModule::test_add_remove_modules``.

    Same calls and errors as RLlib: a taken id raises ``ValueError`` unless
    ``override=True``.
    """
    module = MultiRLModule({DEFAULT_MODULE_ID: spec_of(kind, 32)})
    module.add_module("test", module_of(kind, 32))
    assert set(module.keys()) == {DEFAULT_MODULE_ID, "test"}
    module.remove_module("test")
    assert set(module.keys()) == {DEFAULT_MODULE_ID}

    with pytest.raises(ValueError, match="already exists"):
        module.add_module(DEFAULT_MODULE_ID, module_of(kind, 32))
    replacement = module_of(kind, 32)
    module.add_module(DEFAULT_MODULE_ID, replacement, override=True)
    assert module[DEFAULT_MODULE_ID] is replacement


@pytest.mark.parametrize("kind", MODULE_KINDS)
def test_save_to_path_and_from_checkpoint(kind: str, tmp_path: Path) -> None:
    """``test_multi_rl_module.py::TestMultiRLModule::test_save_to_path_and_from_checkpoint``.

    After adding and removing modules (of different widths), ``save_to_path`` +
    ``MultiRLModule.from_checkpoint`` rebuild exactly the current modules with
    their weights. RLlib compares ``keys()`` as sets; cairn's ``keys()`` is an
    ordered list, compared as a set too.
    """
    module = MultiRLModule({DEFAULT_MODULE_ID: spec_of(kind, 32)})
    module.add_module("test", module_of(kind, 32))
    module.add_module("test2", module_of(kind, 128))

    def round_trip(name: str, expected: set[str]) -> None:
        path = module.save_to_path(tmp_path / name)
        module2 = MultiRLModule.from_checkpoint(path)
        assert module2 is not module
        assert set(module2.keys()) == set(module.keys()) == expected
        assert_states_equal(module2.get_state(), module.get_state())
        for module_id in expected:
            assert type(module2[module_id]) is type(module[module_id])

    round_trip("all", {"test", "test2", DEFAULT_MODULE_ID})
    module.remove_module("test")
    round_trip("after_remove", {"test2", DEFAULT_MODULE_ID})
    module.add_module("test3", module_of(kind, 120))
    round_trip("after_add", {"test2", "test3", DEFAULT_MODULE_ID})
