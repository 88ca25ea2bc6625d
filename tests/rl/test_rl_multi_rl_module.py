"""MultiRLModule: add/remove modules, restore with more or fewer modules."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from cairn.rl import DefaultPPORLModule, MultiRLModule, RLModule, RLModuleSpec
from cairn.testing import CheckpointableContract, assert_states_equal, states_equal

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def spec(seed: int) -> RLModuleSpec:
    return RLModuleSpec(DefaultPPORLModule, OBS, ACT, {"hidden_sizes": [8]}, seed=seed)


def multi(*ids: str) -> MultiRLModule:
    return MultiRLModule({mid: spec(i) for i, mid in enumerate(ids)})


def perturb(module: RLModule, amount: float) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(amount)


class TestMultiRLModuleContract(CheckpointableContract):
    def make(self) -> MultiRLModule:
        return multi("p0", "p1")

    def mutate(self, obj: MultiRLModule) -> None:  # type: ignore[override]
        perturb(obj["p0"], 0.5)
        perturb(obj["p1"], -0.5)


def test_mapping_interface_and_add_remove() -> None:
    m = multi("p0")
    assert list(m) == ["p0"] and len(m) == 1 and "p0" in m and "p1" not in m
    m.add_module("p1", spec(9).build())
    assert m.keys() == ["p0", "p1"]
    with pytest.raises(ValueError, match="already exists"):
        m.add_module("p1", spec(9).build())
    m.add_module("p1", spec(10).build(), override=True)
    with pytest.raises(ValueError, match="not a valid component name"):
        m.add_module("a/b", spec(1).build())
    with pytest.raises(TypeError):
        m.add_module("x", torch.nn.Linear(2, 2))
    removed = m.remove_module("p0")
    assert isinstance(removed, RLModule) and m.keys() == ["p1"]
    with pytest.raises(KeyError, match="p1"):
        m.remove_module("p0")
    # Parameters of added modules are visible to torch (optimizers, .to()).
    assert len(list(m.parameters())) == len(list(m["p1"].parameters()))


def test_restore_into_fewer_modules(tmp_path: Path) -> None:
    source = multi("p0", "p1")
    perturb(source["p0"], 1.0)
    perturb(source["p1"], 2.0)
    path = source.save_to_path(tmp_path / "m")
    target = multi("p0")
    target.restore_from_path(path)
    assert target.keys() == ["p0"]
    assert_states_equal(target["p0"].get_state(), source["p0"].get_state())


def test_restore_into_more_modules(tmp_path: Path) -> None:
    source = multi("p0", "p1")
    perturb(source["p0"], 1.0)
    perturb(source["p1"], 2.0)
    path = source.save_to_path(tmp_path / "m")
    target = multi("p0", "p1", "p2")
    p2_before = target["p2"].get_state()
    target.restore_from_path(path)
    assert_states_equal(target["p0"].get_state(), source["p0"].get_state())
    assert_states_equal(target["p1"].get_state(), source["p1"].get_state())
    assert_states_equal(target["p2"].get_state(), p2_before)


def test_from_checkpoint_rebuilds_added_modules(tmp_path: Path) -> None:
    m = multi("p0")
    m.add_module("late", DefaultPPORLModule(OBS, gym.spaces.Box(-1, 1, (2,), np.float32), seed=4))
    rebuilt = MultiRLModule.from_checkpoint(m.save_to_path(tmp_path / "m"))
    assert rebuilt.keys() == ["p0", "late"]
    assert_states_equal(rebuilt.get_state(), m.get_state())


def test_component_selection() -> None:
    m = multi("p0", "p1")
    assert list(m.get_state(components="p1")) == ["p1"]
    assert list(m.get_state(not_components=["p1"])) == ["p0"]
    assert not states_equal(m.get_state()["p0"], m.get_state()["p1"])
