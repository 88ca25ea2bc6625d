"""Red team of the trust guarantees (SPEC 8) on the code that landed beside them.

Each test is an attack through the public API or the command line, on real
files, that broke a guarantee before its fix.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import cairn
from cairn.registry import function_problem, resolve_function

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
from fuzz_mutate import msgpack_tree, pack_tree, reseal

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files


def module_function() -> int:
    """A plain function of an imported (non-standard-library) module: may be recorded by reference."""
    return 1


# --------------------------------------------------------------------------- functions named by a file


@pytest.mark.parametrize(
    "ref",
    [
        "builtins:exit",  # a callable object that raises SystemExit
        "sys:exit",  # a builtin
        "os:system",
        "code:interact",  # a plain Python function of the standard library: reads stdin (a hang)
        "os:path",  # a module, not a function
        "cairn:CheckpointError",  # a class
        "__main__:main",
        "json.__main__:main",
        "cairn.registry:resolve_function.__call__",
        "cairn.registry:not_there",
        "not.imported.module:f",
        "no colon",
    ],
)
def test_resolve_function_refuses_all_but_allowed_plain_functions(ref: str) -> None:
    # Before: cairn.integrations.rllib resolved recorded functions with its own copy of the rule
    # (sys.modules + getattr): any callable of any loaded module, builtins:exit included. Since
    # issue 33 no function resolves unless the program registered it or the load trusted it.
    modules_before = set(sys.modules)
    with pytest.raises(cairn.UnsafeCheckpointError, match=r"not on cairn's allow-list|cairn refuses"):
        resolve_function(ref, where="the test file")
    assert set(sys.modules) == modules_before  # nothing imported


def test_resolve_function_finds_a_registered_module_function() -> None:
    assert function_problem(module_function) is None
    with pytest.raises(cairn.UnsafeCheckpointError, match=rf"cairn.register\({__name__}.module_function\)"):
        resolve_function(f"{__name__}:module_function", where="x")  # imported is not enough
    cairn.register(module_function)
    assert resolve_function(f"{__name__}:module_function", where="x") is module_function
    # len, not print: Ray Tune replaces builtins.print with a Python function of its own in this process.
    assert function_problem(len) is not None
    assert function_problem(lambda: 0) is not None


# --------------------------------------------------------------------------- cairn.torch.TrainState


def test_train_state_values_cannot_replace_the_live_objects(tmp_path: Path) -> None:
    # Before: a resealed state.msgpack with values {"model": "..."} restored without error, and
    # ckpt.model then returned the file's string instead of the script's module.
    torch = pytest.importorskip("torch")
    import cairn.torch

    net = torch.nn.Linear(2, 2)
    path = cairn.torch.TrainState(model=net, step=3).save_to_path(tmp_path / "ckpt")
    state_file = Path(path) / "state.msgpack"
    tree = msgpack_tree(state_file.read_bytes())
    tree["values"]["model"] = "not a module"
    state_file.write_bytes(pack_tree(tree))
    reseal(path)
    target_net = torch.nn.Linear(2, 2)
    target = cairn.torch.TrainState(model=target_net, step=0)
    with pytest.raises(cairn.IncompatibleCheckpointError, match="'model'"):
        target.restore_from_path(path)
    assert target.model is target_net

    tree["values"] = [["model", "x"]]  # not a dict: dict.update would take the pairs
    state_file.write_bytes(pack_tree(tree))
    reseal(path)
    with pytest.raises(cairn.IncompatibleCheckpointError, match="not a dict"):
        target.restore_from_path(path)
    assert target.model is target_net


# --------------------------------------------------------------------------- env_config of a recorded config


def _fake_pygame(tmp_path: Path) -> tuple[Path, Path]:
    """A folder with a 'pygame' package that leaves a mark when imported, and the mark's path."""
    fake = tmp_path / "fake"
    (fake / "pygame").mkdir(parents=True)
    mark = tmp_path / "pygame-imported"
    (fake / "pygame" / "__init__.py").write_text(
        f"open({str(mark)!r}, 'w').write('imported')\nraise ImportError('not the real pygame')\n"
    )
    return fake, mark


def test_a_recorded_render_mode_never_imports_a_window_toolkit(tmp_path: Path) -> None:
    # Before: a PPO checkpoint whose config records env_config={"render_mode": "human"} made
    # PPO.from_checkpoint import pygame (gymnasium renders "human" through it).
    import json
    import os
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent / "rl"))
    from rl_helpers import small_config

    from cairn.rl import PPO

    ck = Path(PPO(small_config(env_config={"render_mode": "rgb_array"})).save_to_path(tmp_path / "ck"))
    for f in ck.rglob("ctor.json"):
        f.write_text(f.read_text().replace(json.dumps("rgb_array"), json.dumps("human")))
    reseal(str(ck))
    fake, mark = _fake_pygame(tmp_path)
    src = str(Path(__file__).resolve().parents[1] / "src")
    code = (
        "import cairn\nfrom cairn.rl import PPO\n"
        f"try:\n    PPO.from_checkpoint({str(ck)!r})\nexcept cairn.CheckpointError as e:\n    print('REFUSED', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([src, str(fake)])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert not mark.exists(), out.stdout + out.stderr
    assert "REFUSED" in out.stdout and "render_mode='human'" in out.stdout, out.stdout + out.stderr


def test_a_saved_env_state_sets_only_the_attributes_its_handler_saves(tmp_path: Path) -> None:
    # Before: the classic-control handler applied every name of the saved state with setattr, so a
    # resealed checkpoint could set render_mode="human" on CartPole: the next step imported pygame.
    import os
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent / "rl"))
    from rl_helpers import small_config

    from cairn.rl import PPO

    ck = Path(PPO(small_config()).save_to_path(tmp_path / "ck"))
    state_file = ck / "env_runner" / "state.msgpack"
    tree = msgpack_tree(state_file.read_bytes())
    tree["env"]["sub_envs"][0]["env"]["render_mode"] = {"kind": "py", "value": "human"}
    state_file.write_bytes(pack_tree(tree))
    reseal(str(ck))
    fake, mark = _fake_pygame(tmp_path)
    src = str(Path(__file__).resolve().parents[1] / "src")
    code = (
        "import cairn\nfrom cairn.rl import PPO\n"
        f"try:\n    PPO.from_checkpoint({str(ck)!r}).train()\nexcept cairn.CheckpointError as e:\n"
        "    print('REFUSED', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([src, str(fake)])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert not mark.exists(), out.stdout + out.stderr
    assert "REFUSED" in out.stdout and "'render_mode'" in out.stdout, out.stdout + out.stderr


def test_an_lr_scheduler_state_sets_only_the_scheduler_s_own_keys(tmp_path: Path) -> None:
    # Before: torch's LRScheduler.load_state_dict is __dict__.update(state): a resealed checkpoint
    # could replace the scheduler's optimizer (any attribute) with data; restore succeeded.
    torch = pytest.importorskip("torch")
    import cairn.torch

    def build() -> tuple[object, object]:
        net = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2)

    opt, sched = build()
    path = cairn.torch.TrainState(optimizer=opt, scheduler=sched).save_to_path(tmp_path / "ck")
    state_file = Path(path) / "scheduler" / "state.msgpack"
    tree = msgpack_tree(state_file.read_bytes())
    tree["state_dict"]["optimizer"] = "not an optimizer"
    state_file.write_bytes(pack_tree(tree))
    reseal(path)
    opt2, sched2 = build()
    with pytest.raises(cairn.IncompatibleCheckpointError, match="'optimizer'"):
        cairn.torch.TrainState(optimizer=opt2, scheduler=sched2).restore_from_path(path)
    assert sched2.optimizer is opt2  # type: ignore[attr-defined]


def test_a_refused_restore_leaves_a_torch_module_untouched(tmp_path: Path) -> None:
    # A checkpoint of another architecture (Linear with a bias, restored into one without): the
    # restore is refused, but the in-place read had already overwritten the matching 'weight'.
    torch = pytest.importorskip("torch")
    import cairn.torch

    path = cairn.torch.TrainState(model=torch.nn.Linear(2, 2)).save_to_path(tmp_path / "ck")
    target = torch.nn.Linear(2, 2, bias=False)
    before = target.weight.detach().clone()
    with pytest.raises(cairn.IncompatibleCheckpointError, match="bias"):
        cairn.torch.TrainState(model=target).restore_from_path(path)
    assert torch.equal(target.weight.detach(), before)


# --------------------------------------------------------------------------- classes that constructors call


def _pipeline_calling(tmp_path: Path, cls_path: str, kwargs: dict[str, object]) -> Path:
    """A resealed ConnectorPipeline checkpoint whose recorded connector class is ``cls_path``."""
    import json

    from cairn.rl.connectors.connectors import ConnectorPipeline, MeanStdFilter

    ck = Path(ConnectorPipeline([(MeanStdFilter, {"shape": [4]})]).save_to_path(tmp_path / "ck"))
    ctor = json.loads((ck / "ctor.json").read_text())
    ctor["args"][0][0]["items"] = [{"__cairn__": "class", "class": cls_path}, kwargs]
    (ck / "ctor.json").write_text(json.dumps(ctor))
    reseal(str(ck))
    return ck


def test_cairn_upgrade_never_runs_a_command_a_checkpoint_names(tmp_path: Path) -> None:
    # Before: ConnectorPipeline's constructor calls each recorded (class, kwargs); the resolver let
    # the file name subprocess:Popen (its module is imported), so `cairn upgrade` ran a shell command.
    import os
    import subprocess

    mark = tmp_path / "ran"
    ck = _pipeline_calling(tmp_path, "subprocess:Popen", {"args": [sys.executable, "-c", f"open({str(mark)!r}, 'w')"]})
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run(
        [sys.executable, "-m", "cairn", "upgrade", str(ck), str(tmp_path / "out")],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=300,
    )
    import time

    time.sleep(1)  # a spawned child would have written by now
    assert not mark.exists(), out.stderr
    assert out.returncode != 0 and "'subprocess:Popen', which is not on cairn's allow-list" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    with pytest.raises(cairn.UnsafeCheckpointError, match="subprocess:Popen"):
        cairn.Checkpointable.from_checkpoint(ck)
    assert not mark.exists()


def test_a_standard_library_class_is_not_recorded_as_a_constructor_argument(tmp_path: Path) -> None:
    import subprocess

    from cairn.rl.connectors.connectors import ConnectorPipeline, MeanStdFilter

    pipe = ConnectorPipeline([(MeanStdFilter, {"shape": [4]})])
    pipe.get_ctor_args_and_kwargs = lambda: (([(subprocess.Popen, {})],), {})  # type: ignore[method-assign]
    with pytest.raises(cairn.CheckpointError, match="standard library"):
        pipe.save_to_path(tmp_path / "ck")


def test_connector_pipeline_calls_only_connector_classes(tmp_path: Path) -> None:
    # numpy.memmap is not a standard-library class: with mode 'w+' it creates (or truncates) a file.
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious data")
    ck = _pipeline_calling(tmp_path, "numpy:memmap", {"filename": str(victim), "mode": "w+", "shape": [1]})
    with pytest.raises(cairn.CheckpointError):
        cairn.Checkpointable.from_checkpoint(ck)
    assert victim.read_bytes() == b"precious data"
