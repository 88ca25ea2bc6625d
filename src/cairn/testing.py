"""Contract tests any ``Checkpointable`` can run, and helpers to compare states.

Mix :class:`CheckpointableContract` into a pytest test class and say how to
build your component and how to change its state::

    from cairn.testing import CheckpointableContract

    class TestMyPolicy(CheckpointableContract):
        def make(self):
            return MyPolicy(obs_dim=4)

        def mutate(self, obj):
            obj.train_one_step()

pytest then runs round-trip, ``from_checkpoint``, partial-restore,
component-selection and bad-input tests against it. The tests only need
pytest's ``tmp_path`` fixture.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from cairn._tree import component_tree, find_component
from cairn.checkpointable import Checkpointable
from cairn.errors import CheckpointNotFoundError, CorruptCheckpointError
from cairn.manifest import MANIFEST

__all__ = ["CheckpointableContract", "assert_states_equal", "states_equal"]


def _torch_tensor(v: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def _diff(a: Any, b: Any, path: str) -> str | None:
    if type(a) is not type(b):
        return f"{path}: type {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()) and set(a.keys()) != set(b.keys()):
            return f"{path}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"
        for k in a:
            d = _diff(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _diff(x, y, f"{path}/{i}")
            if d:
                return d
        return None
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        if np.ascontiguousarray(a).tobytes() != np.ascontiguousarray(b).tobytes():
            return f"{path}: array values differ"
        return None
    if _torch_tensor(a):
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
            return f"{path}: {a.dtype}{tuple(a.shape)} != {b.dtype}{tuple(b.shape)}"
        torch = sys.modules["torch"]
        ca, cb = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
        if ca.numel() and not torch.equal(ca.reshape(-1).view(torch.uint8), cb.reshape(-1).view(torch.uint8)):
            return f"{path}: tensor values differ"
        return None
    if isinstance(a, np.generic):
        return None if a.tobytes() == b.tobytes() else f"{path}: {a!r} != {b!r}"
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def states_equal(a: Any, b: Any) -> bool:
    """Whether two state trees hold the same types and bit-identical values."""
    return _diff(a, b, "") is None


def assert_states_equal(a: Any, b: Any) -> None:
    """Assert two state trees are equal in types and bits; the message names the first difference."""
    d = _diff(a, b, "")
    if d is not None:
        raise AssertionError(f"states differ at {d or '<root>'}")


class CheckpointableContract:
    """Contract tests for a ``Checkpointable``; override :meth:`make` and :meth:`mutate`."""

    #: Pass ``allow_pickle`` to saves and loads (only for components that need pickle).
    allow_pickle: bool = False

    def make(self) -> Checkpointable:
        """Return a fresh component, always built the same way."""
        raise NotImplementedError("override make() to build the component under test")

    def mutate(self, obj: Checkpointable) -> None:
        """Change ``obj``'s state (and its components') so it differs from a fresh one."""
        raise NotImplementedError("override mutate() to change the component's state")

    def state_of(self, obj: Checkpointable) -> Any:
        """The state compared by the tests; override to drop keys that are not restored."""
        return obj.get_state()

    # ------------------------------------------------------------------ tests

    def _saved(self, tmp_path: Path) -> tuple[Checkpointable, str]:
        obj = self.make()
        self.mutate(obj)
        path = obj.save_to_path(tmp_path / "ckpt", allow_pickle=self.allow_pickle)
        return obj, path

    def test_contract_mutate_changes_state(self) -> None:
        """``mutate`` must make a difference, or the other tests prove nothing."""
        a, b = self.make(), self.make()
        self.mutate(b)
        assert not states_equal(self.state_of(a), self.state_of(b)), "mutate() did not change the state"

    def test_contract_round_trip(self, tmp_path: Path) -> None:
        """save_to_path then restore_from_path into a fresh object gives the same state."""
        obj, path = self._saved(tmp_path)
        fresh = self.make()
        fresh.restore_from_path(path, allow_pickle=self.allow_pickle)
        assert_states_equal(self.state_of(obj), self.state_of(fresh))

    def test_contract_from_checkpoint(self, tmp_path: Path) -> None:
        """from_checkpoint rebuilds the same class with the same state."""
        obj, path = self._saved(tmp_path)
        rebuilt = type(obj).from_checkpoint(path, allow_pickle=self.allow_pickle)
        assert type(rebuilt) is type(obj)
        assert_states_equal(self.state_of(obj), self.state_of(rebuilt))

    def test_contract_partial_restore(self, tmp_path: Path) -> None:
        """Each component restores alone from its own folder; the rest stays as it was."""
        obj, path = self._saved(tmp_path)
        for comp in component_tree(obj):
            fresh = self.make()
            before = fresh.get_state(not_components=comp)
            fresh.restore_from_path(
                os.path.join(path, *comp.split("/")), component=comp, allow_pickle=self.allow_pickle
            )
            assert_states_equal(find_component(obj, comp).get_state(), find_component(fresh, comp).get_state())
            assert_states_equal(before, fresh.get_state(not_components=comp))

    def test_contract_component_selection(self) -> None:
        """get_state(components=...) and not_components= select top-level components."""
        obj = self.make()
        for name, _ in obj.get_checkpointable_components():
            assert name in obj.get_state(components=name)
            assert name not in obj.get_state(not_components=name)
            assert name not in obj.get_state(components=name, not_components=name)

    def test_contract_component_folders_standalone(self, tmp_path: Path) -> None:
        """Every component's folder is a complete checkpoint of that component."""
        obj, path = self._saved(tmp_path)
        for comp in component_tree(obj):
            sub = find_component(obj, comp)
            rebuilt = type(sub).from_checkpoint(os.path.join(path, *comp.split("/")), allow_pickle=self.allow_pickle)
            assert_states_equal(sub.get_state(), rebuilt.get_state())

    def test_contract_missing_checkpoint(self, tmp_path: Path) -> None:
        """A path without a checkpoint raises CheckpointNotFoundError."""
        fresh = self.make()
        try:
            fresh.restore_from_path(tmp_path / "nothing-here")
        except CheckpointNotFoundError:
            return
        raise AssertionError("restore_from_path of a missing path did not raise CheckpointNotFoundError")

    def test_contract_corruption_detected(self, tmp_path: Path) -> None:
        """A flipped byte in any file raises CorruptCheckpointError and leaves the target as it was."""
        _, path = self._saved(tmp_path)
        files = sorted(p for p in Path(path).rglob("*") if p.is_file())
        for f in files:
            data = bytearray(f.read_bytes())
            if not data:
                continue
            pos = len(data) // 2
            data[pos] ^= 0x01
            original = f.read_bytes()
            f.write_bytes(bytes(data))
            fresh = self.make()
            before = fresh.get_state()
            try:
                fresh.restore_from_path(path, allow_pickle=self.allow_pickle)
            except CorruptCheckpointError:
                pass
            else:
                raise AssertionError(f"a flipped byte in {f.relative_to(path)} went undetected")
            finally:
                f.write_bytes(original)
            assert_states_equal(before, fresh.get_state())
        assert (Path(path) / MANIFEST).exists()
