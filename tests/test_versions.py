"""STATE_VERSION migrations, class aliases and `cairn upgrade`."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import cairn
from cairn.testing import assert_states_equal
from cairn_test_components import Tree
from pack_helpers import metadata_of


class Policy(cairn.Checkpointable):
    """A component whose state layout changes across versions (patched per test)."""

    STATE_VERSION = 1

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"w": 1.0}

    def get_state(self, components: Any = None, *, not_components: Any = None, **kw: Any) -> dict[str, Any]:
        return dict(self.state)

    def set_state(self, state: dict[str, Any]) -> None:
        self.state = dict(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


class Agent(cairn.Checkpointable):
    def __init__(self) -> None:
        self.p0, self.p1 = Policy(), Policy()

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("p0", self.p0), ("p1", self.p1)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kw: Any) -> dict[str, Any]:
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


def upgrade_v3(cls: type, state: dict[str, Any], from_version: int) -> dict[str, Any]:
    """1 -> 2 renames w to weight; 2 -> 3 adds a bias."""
    calls.append(from_version)
    if from_version == 1:
        return {"weight": state["w"]}
    if from_version == 2:
        return {**state, "bias": 0.0}
    raise NotImplementedError


calls: list[int] = []


@pytest.fixture
def v3(monkeypatch: pytest.MonkeyPatch) -> None:
    calls.clear()
    monkeypatch.setattr(Policy, "STATE_VERSION", 3)
    monkeypatch.setattr(Policy, "upgrade_state", classmethod(upgrade_v3))


def test_v1_loads_into_v3_in_two_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = Policy()
    old.state = {"w": 2.5}
    path = old.save_to_path(tmp_path / "ck")
    calls.clear()
    monkeypatch.setattr(Policy, "STATE_VERSION", 3)
    monkeypatch.setattr(Policy, "upgrade_state", classmethod(upgrade_v3))
    new = Policy.from_checkpoint(path)
    assert new.state == {"weight": 2.5, "bias": 0.0}
    assert calls == [1, 2]
    assert metadata_of(Path(new.save_to_path(tmp_path / "new")))["state_version"] == 3


def test_partial_restore_upgrades_only_its_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = Agent()
    a.p0.state = {"w": 1.0}
    a.p1.state = {"w": 9.0}
    path = a.save_to_path(tmp_path / "ck")
    calls.clear()
    monkeypatch.setattr(Policy, "STATE_VERSION", 3)
    monkeypatch.setattr(Policy, "upgrade_state", classmethod(upgrade_v3))
    target = Agent()
    target.p0.state = {"weight": 5.0, "bias": 1.0}
    target.restore_from_path(str(Path(path) / "p1"), component="p1")
    assert target.p1.state == {"weight": 9.0, "bias": 0.0}
    assert target.p0.state == {"weight": 5.0, "bias": 1.0}
    assert calls == [1, 2]


def test_newer_state_than_class_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Policy, "STATE_VERSION", 4)
    path = Policy().save_to_path(tmp_path / "ck")
    monkeypatch.setattr(Policy, "STATE_VERSION", 2)
    with pytest.raises(cairn.IncompatibleCheckpointError, match=r"STATE_VERSION 4.*STATE_VERSION 2") as info:
        Policy().restore_from_path(path)
    assert "ck" in str(info.value)


def test_no_upgrade_path_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Agent().save_to_path(tmp_path / "ck")
    monkeypatch.setattr(Policy, "STATE_VERSION", 2)
    with pytest.raises(
        cairn.IncompatibleCheckpointError, match=r"component p0.*STATE_VERSION 1.*version 2.*upgrade_state"
    ):
        Agent().restore_from_path(path)


def test_failing_upgrade_chains_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Policy().save_to_path(tmp_path / "ck")

    def broken(cls: type, state: dict[str, Any], v: int) -> dict[str, Any]:
        raise KeyError("missing_key")

    monkeypatch.setattr(Policy, "STATE_VERSION", 2)
    monkeypatch.setattr(Policy, "upgrade_state", classmethod(broken))
    with pytest.raises(cairn.IncompatibleCheckpointError, match=r"upgrade_state failed.*from version 1 to 2") as info:
        Policy().restore_from_path(path)
    assert isinstance(info.value.__cause__, KeyError)


def test_class_alias_for_moved_class(tmp_path: Path) -> None:
    mod = types.ModuleType("cairn_old_location")
    sys.modules["cairn_old_location"] = mod

    class OldName(Policy):
        pass

    OldName.__module__ = "cairn_old_location"
    OldName.__qualname__ = "OldName"
    mod.OldName = OldName  # type: ignore[attr-defined]
    obj = OldName()
    obj.state = {"w": 3.0}
    path = obj.save_to_path(tmp_path / "ck")
    del sys.modules["cairn_old_location"]
    # A new process: the class is gone, and saving it here had allowed its old path in this process.
    from cairn.registry import _REGISTERED

    del _REGISTERED["cairn_old_location:OldName"]
    with pytest.raises(cairn.UnsafeCheckpointError, match=r"register_class_alias"):
        Policy.from_checkpoint(path)

    class NewName(Policy):
        pass

    cairn.register_class_alias("cairn_old_location:OldName", NewName)
    loaded = Policy.from_checkpoint(path)
    assert type(loaded) is NewName and loaded.state == {"w": 3.0}


def test_cli_upgrade_and_dry_run(tmp_path: Path) -> None:
    t = Tree()
    t.mutate()
    path = t.save_to_path(tmp_path / "ck")
    # A class raised its version with an identity upgrade: run the CLI in a subprocess that patches it.
    script = (
        "import sys, cairn_test_components as c\n"
        "c.Leaf.STATE_VERSION = 2\n"
        "c.Leaf.upgrade_state = classmethod(lambda cls, s, v: dict(s, counter=s['counter'] + 100))\n"
        "from cairn.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    paths = [str(Path(__file__).parents[1] / "src"), str(Path(__file__).parent)]
    env = {**__import__("os").environ, "PYTHONPATH": __import__("os").pathsep.join(paths)}
    out = tmp_path / "up"
    dry = subprocess.run([sys.executable, "-c", script, "upgrade", path, "--dry-run"], capture_output=True,
                         text=True, env=env)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "v1 -> v2" in dry.stdout and "3 component(s) would change" in dry.stdout and not out.exists()
    run = subprocess.run([sys.executable, "-c", script, "upgrade", path, str(out)], capture_output=True, text=True,
                         env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    meta = metadata_of(out / "leaf")
    assert meta["state_version"] == 2
    state = metadata_of(out / "branch")
    assert state["state_version"] == 1
    assert cairn.verify_checkpoint(str(out)) == []


def test_state_versions_are_recorded_per_folder(tmp_path: Path, v3: None) -> None:
    a = Agent()
    path = Path(a.save_to_path(tmp_path / "ck"))
    assert metadata_of(path / "p0")["state_version"] == 3
    assert metadata_of(path)["state_version"] == 1
    b = Agent()
    b.restore_from_path(path)
    assert_states_equal(a.get_state(), b.get_state())


PROBE = """
import cairn

class Probe(cairn.Checkpointable):
    def get_state(self, components=None, *, not_components=None, **kw):
        return {"x": 1}
    def set_state(self, state):
        pass
    def get_ctor_args_and_kwargs(self):
        return (), {}
"""


def test_checkpoints_never_import_unloaded_packages(tmp_path: Path) -> None:
    """A recorded class path imports nothing and resolves only through the allow-list; --trust opts in."""
    (tmp_path / "cairn_probe_pkg.py").write_text(PROBE)
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    ckpt = str(tmp_path / "ck")
    save = "import cairn_probe_pkg, sys; cairn_probe_pkg.Probe().save_to_path(sys.argv[1])"
    subprocess.run([sys.executable, "-c", save, ckpt], check=True, env=env)
    load = (
        "import sys, cairn\n"
        "try:\n"
        "    cairn.Checkpointable.from_checkpoint(sys.argv[1])\n"
        "except cairn.UnsafeCheckpointError as e:\n"
        "    print('refused' if \"not on cairn's allow-list\" in str(e) else e)\n"
        "print('imported' if 'cairn_probe_pkg' in sys.modules else 'not imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", load, ckpt], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["refused", "not", "imported"], out.stderr
    cli = [sys.executable, "-m", "cairn"]
    refused = subprocess.run([*cli, "upgrade", ckpt, "--dry-run"], capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and "--trust cairn_probe_pkg:Probe" in refused.stderr
    trusted = [*cli, "--trust", "cairn_probe_pkg:Probe", "upgrade", ckpt, "--dry-run"]
    ok = subprocess.run(trusted, capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "cairn_probe_pkg:Probe" in ok.stdout
