"""cairn.torch refuses, at restore, states the next step() would crash on (issue 24, finding 8).

torch's ``load_state_dict`` methods check little: a scheduler's is ``__dict__.update``, also
for the schedulers nested in ``SequentialLR`` and ``ChainedScheduler``; an optimizer takes its
saved hyperparameters and buffers as they are. A hostile or mismatched state must raise
``IncompatibleCheckpointError`` at restore and leave every live object unchanged.

A hostile checkpoint is written honestly here: by a stand-in object whose ``state_dict()``
returns the hostile state, saved through the same wrapper, so the files are sound and the
refusal can only come from the guard.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.optim import lr_scheduler as sch

import cairn
import cairn.torch as ct


class Forged:
    """Saves whatever state it is given (the content of a hostile file)."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def state_dict(self) -> Any:
        return self.state

    def load_state_dict(self, state: Any) -> None:
        self.state = state


class ForgedOptimizer(ct.Optimizer):
    """A cairn.torch.Optimizer component whose saved state is whatever it is given."""

    def __init__(self, state: dict[str, Any]) -> None:
        super().__init__(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
        self.forged = state

    def get_state_buffers(self) -> None:
        return None

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self.forged


def _opt() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, scheduler: Any = None) -> None:
    opt.zero_grad()
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    if scheduler is not None:
        scheduler.step(1.0) if isinstance(scheduler, sch.ReduceLROnPlateau) else scheduler.step()


SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], Any]] = {
    "sequential": lambda o: sch.SequentialLR(o, [sch.StepLR(o, 2), sch.ExponentialLR(o, 0.9)], milestones=[3]),
    "chained": lambda o: sch.ChainedScheduler([sch.StepLR(o, 2), sch.ExponentialLR(o, 0.9)]),
    "plateau": lambda o: sch.ReduceLROnPlateau(o, patience=1),
    "onecycle": lambda o: sch.OneCycleLR(o, max_lr=1.0, total_steps=20),
    "step": lambda o: sch.StepLR(o, 2),
}

# (scheduler, a function that makes its state hostile)
HOSTILE: list[tuple[str, str, Callable[[dict[str, Any]], None]]] = [
    ("sequential", "nested-optimizer", lambda s: s["_schedulers"][0].__setitem__("optimizer", "str")),
    ("sequential", "nested-type", lambda s: s["_schedulers"][1].__setitem__("last_epoch", "x")),
    ("sequential", "fewer-schedulers", lambda s: s["_schedulers"].pop()),
    ("sequential", "top-key", lambda s: s.__setitem__("step", 0)),
    ("chained", "nested-optimizer", lambda s: s["_schedulers"][1].__setitem__("optimizer", None)),
    ("chained", "nested-not-dict", lambda s: s["_schedulers"].__setitem__(0, [1, 2])),
    ("plateau", "mode", lambda s: s.__setitem__("mode", "sideways")),
    ("plateau", "min-lrs-length", lambda s: s.__setitem__("min_lrs", [0, 0, 0])),
    ("onecycle", "phase-key", lambda s: s["_schedule_phases"][0].__setitem__("start_lr", "no_such_key")),
    ("step", "base-lrs-type", lambda s: s.__setitem__("base_lrs", "0.1")),
    ("step", "not-a-dict", lambda s: s.clear() or s.__setitem__("x", 1)),
]


@pytest.mark.parametrize(("kind", "attack", "edit"), HOSTILE, ids=[f"{k}-{a}" for k, a, _ in HOSTILE])
def test_hostile_scheduler_states_are_refused_at_restore(
    tmp_path: Path, kind: str, attack: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    model, opt = _opt()
    scheduler = SCHEDULERS[kind](opt)
    for _ in range(3):
        _step(model, opt, scheduler)
    hostile = copy.deepcopy(scheduler.state_dict())
    edit(hostile)
    path = ct.TrainState(model=model, scheduler=ct.LRScheduler(Forged(hostile))).save_to_path(tmp_path / "ck")

    live_model, live_opt = _opt()
    live = SCHEDULERS[kind](live_opt)
    _step(live_model, live_opt, live)
    before = copy.deepcopy(live.state_dict())
    weights = [p.detach().clone() for p in live_model.parameters()]
    state = ct.TrainState(model=live_model, scheduler=ct.LRScheduler(live))
    with pytest.raises(cairn.IncompatibleCheckpointError, match="does not fit this scheduler"):
        state.restore_from_path(path)
    assert live.state_dict() == before
    assert all(torch.equal(a, b) for a, b in zip(weights, live_model.parameters(), strict=True))
    _step(live_model, live_opt, live)  # still usable


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_sound_scheduler_states_still_restore(tmp_path: Path, kind: str) -> None:
    model, opt = _opt()
    scheduler = SCHEDULERS[kind](opt)
    for _ in range(5):
        _step(model, opt, scheduler)
    path = ct.TrainState(optimizer=opt, scheduler=scheduler).save_to_path(tmp_path / "ck")
    model2, opt2 = _opt()
    live = SCHEDULERS[kind](opt2)
    ct.TrainState(optimizer=opt2, scheduler=live).restore_from_path(path)
    assert live.state_dict() == scheduler.state_dict()
    _step(model, opt, scheduler)
    _step(model2, opt2, live)
    assert live.state_dict() == scheduler.state_dict()


def _adam() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


HOSTILE_OPT: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("lr-string", lambda s: s["param_groups"][0].__setitem__("lr", "fast")),
    ("betas-length", lambda s: s["param_groups"][0].__setitem__("betas", (0.9,))),
    ("moment-shape", lambda s: s["state"][0].__setitem__("exp_avg", torch.zeros(7))),
    ("step-vector", lambda s: s["state"][1].__setitem__("step", torch.ones(3))),
    ("buffer-string", lambda s: s["state"][1].__setitem__("exp_avg_sq", "x")),
    ("unknown-param", lambda s: s["state"].__setitem__(9, {"exp_avg": torch.zeros(2)})),
    ("duplicate-index", lambda s: s["param_groups"][0].__setitem__("params", [0, 0])),
    ("groups-not-list", lambda s: s.__setitem__("param_groups", {"lr": 1})),
]


@pytest.mark.parametrize(("attack", "edit"), HOSTILE_OPT, ids=[a for a, _ in HOSTILE_OPT])
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-target", "stepped-target"])
def test_hostile_optimizer_states_are_refused_at_restore(
    tmp_path: Path, attack: str, edit: Callable[[dict[str, Any]], None], fresh: bool
) -> None:
    model, opt = _adam()
    _step(model, opt)
    hostile = copy.deepcopy(opt.state_dict())
    edit(hostile)
    path = ct.TrainState(optimizer=ForgedOptimizer(hostile)).save_to_path(tmp_path / "ck")
    live_model, live_opt = _adam()
    if not fresh:
        _step(live_model, live_opt)
    before = copy.deepcopy(live_opt.state_dict())
    with pytest.raises(cairn.IncompatibleCheckpointError, match="does not fit this optimizer"):
        ct.TrainState(optimizer=ct.Optimizer(live_opt)).restore_from_path(path)
    after = live_opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    assert after["state"].keys() == before["state"].keys()
    _step(live_model, live_opt)  # still usable


HOSTILE_SCALER: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("scale-string", lambda s: s.__setitem__("scale", "big")),
    ("scale-zero", lambda s: s.__setitem__("scale", 0.0)),
    ("growth-factor", lambda s: s.__setitem__("growth_factor", 0.5)),
    ("interval-zero", lambda s: s.__setitem__("growth_interval", 0)),
    ("missing-key", lambda s: s.pop("_growth_tracker")),
    ("extra-key", lambda s: s.__setitem__("_enabled", False)),
]


@pytest.mark.parametrize(("attack", "edit"), HOSTILE_SCALER, ids=[a for a, _ in HOSTILE_SCALER])
def test_hostile_grad_scaler_states_are_refused_at_restore(
    tmp_path: Path, attack: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    hostile = torch.amp.GradScaler("cpu", init_scale=8.0).state_dict()
    edit(hostile)
    path = ct.TrainState(scaler=ct.GradScaler(Forged(hostile))).save_to_path(tmp_path / "ck")
    live = torch.amp.GradScaler("cpu", init_scale=4.0)
    before = live.state_dict()
    with pytest.raises(cairn.IncompatibleCheckpointError, match="does not fit this scaler"):
        ct.TrainState(scaler=ct.GradScaler(live)).restore_from_path(path)
    assert live.state_dict() == before


def test_sound_optimizer_and_scaler_states_still_restore(tmp_path: Path) -> None:
    model, opt = _adam()
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)
    for _ in range(2):
        _step(model, opt)
    path = ct.TrainState(optimizer=opt, scaler=scaler).save_to_path(tmp_path / "ck")
    for fresh in (True, False):
        model2, opt2 = _adam()
        if not fresh:
            _step(model2, opt2)
        scaler2 = torch.amp.GradScaler("cpu")
        ct.TrainState(optimizer=opt2, scaler=scaler2).restore_from_path(path)
        assert scaler2.state_dict() == scaler.state_dict()
        got, want = opt2.state_dict(), opt.state_dict()
        assert got["param_groups"] == want["param_groups"]
        for key in want["state"]:
            assert all(torch.equal(got["state"][key][n], v) for n, v in want["state"][key].items())


def test_a_refusing_load_state_dict_leaves_the_object_as_it_was(tmp_path: Path) -> None:
    """The sibling without a structural check: any StateDict object torch changes before it refuses."""

    class HalfLoads:
        def __init__(self) -> None:
            self.a, self.b = 1, 2

        def state_dict(self) -> dict[str, Any]:
            return {"a": self.a, "b": self.b}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.a = state["a"]  # changed before the check below, as torch's schedulers do
            if not isinstance(state["b"], int):
                raise TypeError("b must be an int")
            self.b = state["b"]

    path = ct.StateDict(Forged({"a": 10, "b": "x"})).save_to_path(tmp_path / "ck")
    live = HalfLoads()
    with pytest.raises(cairn.IncompatibleCheckpointError, match="b must be an int"):
        ct.StateDict(live).restore_from_path(path)
    assert (live.a, live.b) == (1, 2)
