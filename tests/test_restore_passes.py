"""How many times a restore reads each tensor file: once into fresh arrays, twice only into live buffers.

The bytes a process reads are counted by the kernel (``rchar`` in ``/proc/self/io``),
so these tests see the passes through the public API without timing anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")

N = 1 << 21  # 8 MB of float32 per component: far above the small files of a folder


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


class Plain(cairn.Checkpointable):
    """A user's own component: ``set_state`` copies into its arrays, like ``load_state_dict``; no buffers."""

    def __init__(self, n: int = N, seed: int = 0) -> None:
        self.n = n
        self.seed = seed
        self.w = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        self.applied = 0

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"w": self.w}

    def set_state(self, state: dict[str, Any]) -> None:
        self.w[...] = state["w"]
        self.applied += 1

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.n,), {"seed": self.seed}


class Buffered(Plain):
    """A component that offers its arrays as live buffers: its restore is in place."""

    def get_state_buffers(self) -> dict[str, Any]:
        return {"w": self.w}


class Pair(cairn.Checkpointable):
    """A live-buffered component next to a plain one."""

    def __init__(self, seed: int = 0) -> None:
        self.live = Buffered(seed=seed)
        self.plain = Plain(seed=seed + 1)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"live": self.live.get_state(), "plain": self.plain.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        for name in ("live", "plain"):
            if name in state:
                getattr(self, name).set_state(state[name])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("live", self.live), ("plain", self.plain)]


def _passes(tensor_bytes: int, fn: Any) -> float:
    before = _read_bytes()
    fn()
    return (_read_bytes() - before) / tensor_bytes


def test_plain_component_restore_reads_its_tensors_once(tmp_path: Path) -> None:
    """No buffers: the CRC is computed while the file is read, not in a pass of its own."""
    path = Plain(seed=1).save_to_path(tmp_path / "ck")
    size = (Path(path) / "tensors.safetensors").stat().st_size
    target = Plain(seed=2)
    assert _passes(size, lambda: target.restore_from_path(path)) < 1.5
    np.testing.assert_array_equal(target.w, Plain(seed=1).w)


def test_from_checkpoint_reads_tensors_once(tmp_path: Path) -> None:
    path = Buffered(seed=1).save_to_path(tmp_path / "ck")
    size = (Path(path) / "tensors.safetensors").stat().st_size
    box: list[Buffered] = []
    assert _passes(size, lambda: box.append(Buffered.from_checkpoint(path))) < 1.5
    np.testing.assert_array_equal(box[0].w, Buffered(seed=1).w)


def test_live_buffers_are_verified_before_they_are_written(tmp_path: Path) -> None:
    """Bytes that land in live tensors: verified first, then read (two passes), only for those files."""
    path = Pair(seed=1).save_to_path(tmp_path / "ck")
    live = (Path(path) / "live" / "tensors.safetensors").stat().st_size
    plain = (Path(path) / "plain" / "tensors.safetensors").stat().st_size
    target = Pair(seed=5)
    passes = _passes(live + plain, lambda: target.restore_from_path(path))
    assert 1.3 < passes < 1.7, passes  # live: 2, plain: 1
    expect = Pair(seed=1)
    np.testing.assert_array_equal(target.live.w, expect.live.w)
    np.testing.assert_array_equal(target.plain.w, expect.plain.w)


@pytest.mark.parametrize("damaged", ["live", "plain"])
def test_damage_in_any_file_leaves_every_component_untouched(tmp_path: Path, damaged: str) -> None:
    """A file read in one pass that fails its check is found before any live buffer is written."""
    path = Pair(seed=1).save_to_path(tmp_path / "ck")
    victim = Path(path) / damaged / "tensors.safetensors"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    target = Pair(seed=5)
    before = (target.live.w.copy(), target.plain.w.copy())
    with pytest.raises(cairn.CorruptCheckpointError, match=damaged):
        target.restore_from_path(path)
    np.testing.assert_array_equal(target.live.w, before[0])
    np.testing.assert_array_equal(target.plain.w, before[1])
    assert target.live.applied == target.plain.applied == 0


def test_the_restore_pipeline_has_no_hidden_channel() -> None:
    """The from_checkpoint option is a parameter of the restore, not a context variable (DESIGN)."""
    import importlib

    for name in ("_engine", "_tree", "_save", "_reader", "_restore", "_verify", "_tensorio"):
        module = importlib.import_module(f"cairn.{name}")
        assert not any(type(v).__name__ == "ContextVar" for v in vars(module).values()), name
