"""cairn.torch: a plain PyTorch loop checkpoints through TrainState and resumes bit for bit, in place."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cairn
import cairn.torch as ct
from cairn.testing import assert_states_equal


class Net(torch.nn.Module):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2))
        self.norm = torch.nn.BatchNorm1d(2)  # buffers: running stats and an int64 counter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(self.body(x))
        return out


def _build(seed: int, *, foreach: bool | None = None) -> dict[str, Any]:
    torch.manual_seed(seed)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, foreach=foreach)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    gen = torch.Generator().manual_seed(seed + 100)
    return {"net": net, "opt": opt, "sched": sched, "scaler": scaler, "gen": gen}


def _state(parts: dict[str, Any], step: int = 0) -> ct.TrainState:
    return ct.TrainState(
        model=parts["net"],
        optimizer=parts["opt"],
        scheduler=parts["sched"],
        scaler=parts["scaler"],
        rng=ct.RNG(generators={"shuffle": parts["gen"]}),
        step=step,
    )


def _train(parts: dict[str, Any], steps: int) -> list[float]:
    """Steps that draw from every RNG the state covers (global python, numpy, torch and a generator)."""
    net, opt, sched, scaler, gen = parts["net"], parts["opt"], parts["sched"], parts["scaler"], parts["gen"]
    losses = []
    for _ in range(steps):
        noise = random.random() + float(np.random.rand())
        x = torch.randn(16, 4) + noise
        idx = torch.randperm(16, generator=gen)
        loss = net(x[idx]).pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        losses.append(float(loss.detach()))
    return losses


def test_resume_continues_bit_for_bit(tmp_path: Path) -> None:
    random.seed(0)
    np.random.seed(0)
    a = _build(0)
    _train(a, 3)
    mgr = cairn.CheckpointManager(tmp_path / "run")
    mgr.save(_state(a, step=3), 3)
    after = _train(a, 4)

    # Scramble everything the checkpoint should bring back.
    random.seed(99)
    np.random.seed(99)
    b = _build(7)
    _train(b, 5)
    state_b = _state(b)
    info = mgr.restore_latest(state_b)
    assert info is not None and info.step == 3
    assert state_b.step == 3
    assert _train(b, 4) == after
    assert_states_equal(_state(a).get_state(), _state(b).get_state())
    assert b["sched"].last_epoch == a["sched"].last_epoch == 7
    assert b["scaler"].get_scale() == a["scaler"].get_scale()


def test_restore_is_in_place(tmp_path: Path) -> None:
    a = _build(0)
    _train(a, 2)
    path = _state(a).save_to_path(tmp_path / "ck")
    b = _build(1)
    _train(b, 2)
    params = list(b["net"].parameters())
    ptrs = [p.data_ptr() for p in params]
    moments = [s["exp_avg"] for s in b["opt"].state.values()]
    _state(b).restore_from_path(path)
    assert [p.data_ptr() for p in b["net"].parameters()] == ptrs
    assert all(x is y for x, y in zip(moments, [s["exp_avg"] for s in b["opt"].state.values()], strict=True))
    assert all(torch.equal(x, y) for x, y in zip(a["net"].parameters(), params, strict=True))
    assert torch.equal(b["net"].norm.num_batches_tracked, a["net"].norm.num_batches_tracked)


@pytest.mark.parametrize(("damaged", "readers"), [("model", 1), ("optimizer", 2)])
def test_a_flipped_byte_in_a_big_file_leaves_the_live_tensors_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damaged: str, readers: int
) -> None:
    """Issue 34: a restore into existing tensors verifies every file before any byte lands in them.

    20 MB of weights and twice that of Adam moments: each file is read in several pieces
    (cairn._tensorio.CHUNK), and the flipped byte sits inside the first piece, not at the end.
    """
    import cairn._tensorio

    if readers == 2:
        monkeypatch.setattr(cairn._tensorio, "PARALLEL_MIN", 0)  # this small state takes the two-reader path too

    def built(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(seed)
        net = torch.nn.Linear(1024, 5000)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        net(torch.randn(2, 1024)).sum().backward()
        opt.step()
        return net, opt

    path = ct.TrainState(model=built(0)[0], optimizer=built(0)[1]).save_to_path(tmp_path / "ck")
    victim = Path(path) / damaged / "tensors.safetensors"
    assert victim.stat().st_size > cairn._tensorio.CHUNK
    with open(victim, "r+b") as f:
        f.seek(victim.stat().st_size // 3)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x10]))
    net, opt = built(1)
    live = [*net.parameters(), *(t for s in opt.state.values() for t in s.values() if t.dim())]
    before = [t.detach().clone() for t in live]
    with pytest.raises(cairn.CorruptCheckpointError, match=f"{damaged}/tensors.safetensors fails its checksum"):
        ct.TrainState(model=net, optimizer=opt).restore_from_path(path)
    assert all(torch.equal(t, b) for t, b in zip(live, before, strict=True))


@pytest.mark.parametrize("foreach", [True, False])
def test_adam_hyperparameters_come_back_with_their_types(tmp_path: Path, foreach: bool) -> None:
    """ray-project/ray#51560: betas restored as a tensor broke Adam's next step (foreach)."""
    a = _build(0, foreach=foreach)
    _train(a, 1)
    state = _state(a).get_state()
    # A state as another tool writes it: betas as an array, lr as a 0-d array, moments and step as numpy.
    opt_state = state["optimizer"]
    opt_state["param_groups"][0]["betas"] = np.array([0.9, 0.999])
    opt_state["param_groups"][0]["lr"] = np.array(0.005)
    for s in opt_state["state"].values():
        for k in list(s):
            s[k] = s[k].numpy()
    path = _state(a).save_to_path(tmp_path / "ck", state=state)

    b = _build(1, foreach=foreach)
    _state(b).restore_from_path(path)
    group = b["opt"].param_groups[0]
    assert type(group["betas"]) is tuple and all(type(x) is float for x in group["betas"])
    assert type(group["lr"]) is float and group["lr"] == 0.005
    step = next(iter(b["opt"].state.values()))["step"]
    assert isinstance(step, torch.Tensor) and step.dtype == torch.float32 and float(step) == 1.0
    _train(b, 2)  # steps again without "beta1 as a Tensor is not supported"


def test_another_architecture_is_refused_by_name(tmp_path: Path) -> None:
    path = ct.Module(Net(hidden=8)).save_to_path(tmp_path / "ck")
    with pytest.raises(cairn.IncompatibleCheckpointError, match=r"body\.0\.weight"):
        ct.Module(Net(hidden=16)).restore_from_path(path)
    smaller = torch.nn.Sequential(torch.nn.Linear(4, 8))
    with pytest.raises(cairn.IncompatibleCheckpointError, match="not in the module"):
        ct.Module(smaller).restore_from_path(path)

    opt_path = ct.Optimizer(torch.optim.Adam(Net().parameters())).save_to_path(tmp_path / "opt")
    with pytest.raises(cairn.IncompatibleCheckpointError, match="optimizer"):
        ct.Optimizer(torch.optim.Adam(smaller.parameters())).restore_from_path(opt_path)


def test_non_strict_module_leaves_missing_parameters(tmp_path: Path) -> None:
    small = torch.nn.Sequential(torch.nn.Linear(4, 8))
    path = ct.Module(small).save_to_path(tmp_path / "ck")
    big = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    before = big[1].weight.detach().clone()
    with pytest.raises(cairn.IncompatibleCheckpointError, match=r"1\.weight"):
        ct.Module(big).restore_from_path(path)
    ct.Module(big, strict=False).restore_from_path(path)
    assert torch.equal(big[0].weight, small[0].weight) and torch.equal(big[1].weight, before)


def test_from_checkpoint_takes_the_live_object(tmp_path: Path) -> None:
    net = Net()
    path = ct.Module(net).save_to_path(tmp_path / "ck")
    with pytest.raises(cairn.IncompatibleCheckpointError, match="module"):
        ct.Module.from_checkpoint(path)
    fresh = Net()
    comp = ct.Module.from_checkpoint(path, module=fresh)
    assert comp.module is fresh and torch.equal(fresh.body[0].weight, net.body[0].weight)


def test_global_rngs_and_named_generators(tmp_path: Path) -> None:
    gens = {"t": torch.Generator().manual_seed(1), "n": np.random.default_rng(2), "p": random.Random(3)}
    rng = ct.RNG(generators=gens)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    np.random.randn()  # a cached gaussian is part of numpy's state
    path = rng.save_to_path(tmp_path / "rng")

    def draw() -> list[float]:
        return [
            random.random(),
            float(np.random.randn()),
            float(torch.rand(1)),
            float(torch.rand(1, generator=gens["t"])),
            float(gens["n"].random()),
            gens["p"].random(),
        ]

    expected = draw()
    draw()
    rng.restore_from_path(path)
    assert draw() == expected


def test_a_refused_rng_state_sets_no_generator() -> None:
    """Issue 37 §2: every saved state is tried on a fresh generator first (set_state sets them one by one)."""
    gen = torch.Generator().manual_seed(1)
    rng = ct.RNG(generators={"t": gen})
    state = rng.get_state()
    random.seed(9)
    before = random.getstate(), gen.get_state()
    for key, bad, error, message in [
        ("torch", np.zeros(3, np.uint8), cairn.CorruptCheckpointError, r"^torch: expected the \d+ bytes"),
        ("generators", {"t": {"kind": "numpy", "state": {}}}, cairn.IncompatibleCheckpointError, "numpy generator"),
        ("numpy", {"bit_generator": "MT19937", "state": {}}, cairn.IncompatibleCheckpointError, "global RNG"),
    ]:
        with pytest.raises(error, match=message):
            rng.set_state({**state, key: bad})
        assert random.getstate() == before[0] and torch.equal(gen.get_state(), before[1])


def test_plain_values_and_unsupported_values(tmp_path: Path) -> None:
    state = ct.TrainState(model=Net(), step=4, best=1.5, history=np.arange(3))
    path = state.save_to_path(tmp_path / "ck")
    other = ct.TrainState(model=Net(), step=0, best=0.0, history=np.zeros(3, dtype=np.int64))
    other.restore_from_path(path)
    assert other.step == 4 and other.best == 1.5 and np.array_equal(other.history, np.arange(3))
    with pytest.raises(AttributeError, match="live object"):
        other.model = Net()

    bad = ct.TrainState(model=Net(), callback=lambda: None)
    with pytest.raises(cairn.CheckpointError, match="callback"):
        bad.save_to_path(tmp_path / "bad")


def test_checkpoint_tree_reads_in_the_cli(tmp_path: Path) -> None:
    parts = _build(0)
    _train(parts, 1)
    path = _state(parts).save_to_path(tmp_path / "ck")
    out = subprocess.run(
        [sys.executable, "-m", "cairn", "inspect", path], capture_output=True, text=True, check=True
    ).stdout
    for name in ("model", "optimizer", "scheduler", "scaler", "rng"):
        assert f"{name}  [cairn.torch:" in out
    assert subprocess.run([sys.executable, "-m", "cairn", "verify", path], capture_output=True).returncode == 0


def test_import_cairn_does_not_import_torch() -> None:
    code = "import sys, cairn; print('torch' in sys.modules, 'cairn.torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_a_disabled_scaler_does_not_silently_reset_an_enabled_one(tmp_path: Path) -> None:
    path = ct.GradScaler(torch.amp.GradScaler("cpu", enabled=False)).save_to_path(tmp_path / "off")
    enabled = torch.amp.GradScaler("cpu", init_scale=4.0)
    with pytest.raises(cairn.IncompatibleCheckpointError, match="disabled GradScaler"):
        ct.GradScaler(enabled).restore_from_path(path)
    ct.GradScaler(torch.amp.GradScaler("cpu", enabled=False)).restore_from_path(path)  # off into off: fine


class Ema:
    """A user object following PyTorch's state_dict convention."""

    def __init__(self) -> None:
        self.value = torch.zeros(3)
        self.decay = 0.9

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value, "decay": self.decay}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value.copy_(state["value"])
        self.decay = state["decay"]


def test_objects_with_state_dict_and_async_saves(tmp_path: Path) -> None:
    ema = Ema()
    ema.value += 1.0
    state = ct.TrainState(ema=ema, step=1)
    assert isinstance(dict(state.get_checkpointable_components())["ema"], ct.StateDict)
    with cairn.CheckpointManager(tmp_path / "run", async_save=True) as mgr:
        mgr.save(state, 1)
        ema.value += 5.0  # training goes on while the save is written: the snapshot is unaffected
        state.step = 2
        mgr.wait()
        other = Ema()
        restored = ct.TrainState(ema=other, step=0)
        mgr.restore_latest(restored)
    assert torch.equal(other.value, torch.ones(3)) and restored.step == 1


def test_reserved_names_are_refused() -> None:
    for name in ("values", "get_state", "_live"):
        with pytest.raises(cairn.CheckpointError, match="reserved"):
            ct.TrainState(**{name: 1})


def test_a_module_wrapped_as_a_state_dict_saves_and_loads_back(tmp_path: Path) -> None:
    """A module's ``state_dict()`` is an ``OrderedDict``: ``StateDict`` saves it and loads it back (issue 25)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 2)
    wrapped = ct.StateDict(linear)
    path = wrapped.save_to_path(tmp_path / "linear")
    saved = {k: v.clone() for k, v in linear.state_dict().items()}
    with torch.no_grad():
        linear.weight.add_(1.0)
    wrapped.restore_from_path(path)
    for name, value in linear.state_dict().items():
        assert torch.equal(value, saved[name])
    other = torch.nn.Linear(3, 2)
    ct.StateDict.from_checkpoint(path, obj=other)
    assert torch.equal(other.weight, saved["weight"])


def test_copies_of_an_ordered_dict_state_do_not_share_its_tensors() -> None:
    """The tree copies of a save (``StateDict.get_state``, the manager's async snapshot) copy an
    ``OrderedDict``'s tensors: training that goes on cannot change what is written."""
    from collections import OrderedDict

    from cairn.manager import snapshot_state

    linear = torch.nn.Linear(3, 2)
    state = linear.state_dict()
    assert type(state) is OrderedDict
    gotten = ct.StateDict(linear).get_state()["state_dict"]
    snapshot = snapshot_state({"nested": state})["nested"]
    assert type(gotten) is dict
    assert type(snapshot) is OrderedDict  # its class is kept: the save decides about it as about the live state
    before = linear.weight.detach().clone()
    with torch.no_grad():
        linear.weight.add_(1.0)
    assert torch.equal(gotten["weight"], before)
    assert torch.equal(snapshot["weight"], before)
