"""Red team (SPEC 8) on the RLlib integration: a recorded config may not make cairn call what the file names."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cairn

# The import the tests need, not the bare package: ray ships ray.rllib in every install, and with
# dm-tree present (a test dependency) it imports, while RLlib's algorithms still need its own extras (scipy).
pytest.importorskip("ray.rllib.algorithms.ppo", reason="RLlib is not installed (pip install 'cairn-rl[rllib]')")

from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.env_to_module import MeanStdFilter

from cairn.integrations import rllib as cairn_rllib

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from fuzz_mutate import reseal

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.loose_files]


def connector(env: Any = None, spaces: Any = None, device: Any = None) -> MeanStdFilter:
    """A module-level connector factory: recorded by reference (``"<this module>:connector"``)."""
    return MeanStdFilter()


@pytest.fixture(scope="module")
def saved(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local PPO with a connector factory recorded by reference, saved by cairn (not trained)."""
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=64, env_to_module_connector=connector)
        .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [8]})
    )
    algo = config.build_algo()
    try:
        yield cairn_rllib.save(algo, tmp_path_factory.mktemp("rt") / "ppo")
    finally:
        algo.stop()


def _rename_function(src: str, dst: Path, ref: str) -> str:
    """A copy of ``src`` whose recorded connector factory is ``ref`` instead, resealed (checksums valid)."""
    import shutil

    shutil.copytree(src, dst)
    ctor = dst / "ctor.json"
    own = f"{connector.__module__}:connector"
    text = ctor.read_text()
    assert json.dumps(own) in text
    ctor.write_text(text.replace(json.dumps(own), json.dumps(ref)))
    reseal(str(dst))
    return str(dst)


@pytest.mark.parametrize("ref", ["builtins:exit", "sys:exit", "code:interact", "os:system"])
def test_a_recorded_function_never_ends_or_hangs_the_program(saved: str, tmp_path: Path, ref: str) -> None:
    # Before: the recorded 'builtins:exit' was looked up with getattr on any loaded module and given to
    # RLlib as the connector factory, which RLlib calls while building the algorithm: SystemExit
    # escaped from_checkpoint (code.interact would read stdin: a hang).
    path = _rename_function(saved, tmp_path / "ckpt", ref)
    with pytest.raises(cairn.CheckpointError, match="not on cairn's allow-list"):
        cairn_rllib.from_checkpoint(path)


def test_the_own_function_still_round_trips(saved: str) -> None:
    algo = cairn_rllib.from_checkpoint(saved)
    try:
        assert algo.config._env_to_module_connector is connector
    finally:
        algo.stop()


def _rewrite(src: str, dst: Path, old: str, new: str) -> str:
    """A copy of ``src`` with the JSON text ``old`` replaced by ``new`` in every ctor.json, resealed."""
    import shutil

    shutil.copytree(src, dst)
    for f in dst.rglob("ctor.json"):
        f.write_text(f.read_text().replace(old, new))
    reseal(str(dst))
    return str(dst)


def test_a_recorded_env_id_never_imports_the_module_it_names(saved: str, tmp_path: Path) -> None:
    # Before: RLlib made the env of the recorded config with gymnasium.make("this:CartPole-v1"),
    # which imported `this` (issue 13 item 2, back through the RLlib integration).
    assert "this" not in sys.modules
    path = _rewrite(saved, tmp_path / "ckpt", json.dumps("CartPole-v1"), json.dumps("this:CartPole-v1"))
    with pytest.raises(cairn.CheckpointError, match="import this first"):
        cairn_rllib.from_checkpoint(path)
    assert "this" not in sys.modules


def test_a_recorded_human_render_mode_is_refused(saved: str, tmp_path: Path) -> None:
    path = _rewrite(saved, tmp_path / "ckpt", '"env_config": {}', '"env_config": {"render_mode": "human"}')
    with pytest.raises(cairn.CheckpointError, match="render_mode='human'"):
        cairn_rllib.from_checkpoint(path)


class _Trap:
    """Unpickling it leaves a mark (what a hostile RLlib pickle would do, harmlessly)."""

    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path(self.mark).write_text, ("unpickled",))


def test_convert_without_allow_pickle_never_unpickles(tmp_path: Path) -> None:
    # A guard (this held before): `cairn convert rllib` reads RLlib's pickles only with --allow-pickle.
    import os
    import pickle
    import subprocess

    src = tmp_path / "rllib"
    src.mkdir()
    mark = tmp_path / "mark"
    for name in ("class_and_ctor_args.pkl", "algorithm_state.pkl"):
        (src / name).write_bytes(pickle.dumps(_Trap(str(mark))))
    path = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(
        [sys.executable, "-m", "cairn", "convert", "rllib", str(src), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0 and not mark.exists()
    assert "--allow-pickle" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("env_class", ["subprocess:Popen", "ray.rllib.algorithms.ppo.ppo:PPO"])
def test_a_recorded_env_class_never_runs_a_command(saved: str, tmp_path: Path, env_class: str) -> None:
    # Before: the resolver let the recorded config name subprocess.Popen (an imported module's class)
    # as the env; RLlib calls env(env_config), and Popen ran the env_config's keys as a command.
    mark = tmp_path / "ran"
    path = Path(saved)
    ctor = json.loads((path / "ctor.json").read_text())
    config = ctor["kwargs"]["args"][0]
    config["env"] = {"__cairn__": "class", "class": env_class}
    config["env_config"] = {"/bin/sh": 1, "-c": 1, f"echo ran > {mark}": 1}
    dst = tmp_path / "ckpt"
    import shutil

    shutil.copytree(saved, dst)
    (dst / "ctor.json").write_text(json.dumps(ctor))
    reseal(str(dst))
    with pytest.raises(cairn.CheckpointError, match=r"not on cairn's allow-list|neither a gymnasium id"):
        cairn_rllib.from_checkpoint(str(dst))
    assert not mark.exists()


@pytest.mark.parametrize(
    ("key", "record"),
    [
        ("callbacks_class", {"__cairn__": "class", "class": "ray.rllib.algorithms.ppo.ppo:PPO"}),
        ("callbacks_class", {"__cairn__": "class", "class": "torch.nn.modules.module:Module"}),
        ("callbacks_on_train_result", {"__rllib__": "function", "ref": "numpy:load"}),
        ("callbacks_on_algorithm_init", [{"__rllib__": "function", "ref": "torch.hub:load"}]),
    ],
)
def test_recorded_callbacks_never_name_a_framework(saved: str, tmp_path: Path, key: str, record: Any) -> None:
    # Before (issue 24, finding 1): a recorded callbacks_class or callbacks_on_* could name any class or
    # function of a loaded module (torch, ray, numpy), which RLlib then builds or calls with the algorithm.
    path = Path(saved)
    ctor = json.loads((path / "ctor.json").read_text())
    config = ctor["kwargs"]["args"][0]
    state = config["state"] if isinstance(config.get("state"), dict) else config
    assert "callbacks_class" in state, sorted(state)
    state[key] = record
    dst = tmp_path / "ckpt"
    import shutil

    shutil.copytree(saved, dst)
    (dst / "ctor.json").write_text(json.dumps(ctor))
    reseal(str(dst))
    refused = f"{key} names .*(not on cairn's allow-list|refuses to call back)"
    with pytest.raises(cairn.UnsafeCheckpointError, match=refused):
        cairn_rllib.from_checkpoint(str(dst))
