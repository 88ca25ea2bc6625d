"""Small checkpointable component trees for the storage tests.

Everything here is importable without torch (the crash test's child process
imports this module and must start fast); torch leaves are only built when
``with_torch=True``.

The tree of :class:`Agent`::

    agent                  own state: step, a tuple, a numpy scalar, bytes
      policy/              TorchLeaf (or ArrayLeaf without torch): weights
      stats/               ArrayLeaf: running statistics
      group/               Group: only components
        a/                 ArrayLeaf
        b/                 ArrayLeaf (its values never change: reused by incremental saves)
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

import cairn


def _rng_values(seed: int, step: int, n: int) -> np.ndarray:
    """Distinct, deterministic float32 values for a (seed, step)."""
    base = np.arange(n, dtype=np.float32) * np.float32(1e-3)
    return base + np.float32(seed * 1000 + step)


class ArrayLeaf(cairn.Checkpointable):
    """A leaf with numpy arrays and plain Python values."""

    def __init__(self, n: int = 8, seed: int = 0, frozen: bool = False) -> None:
        self.n, self.seed, self.frozen = n, seed, frozen
        self.set_step(0)

    def set_step(self, step: int) -> None:
        """Set every value to the ones of ``step`` (frozen leaves keep the values of step 0)."""
        s = 0 if self.frozen else step
        self.values = _rng_values(self.seed, s, self.n)
        self.counts = np.arange(4, dtype=np.int64) + s
        self.count = s
        self.info: dict[str, Any] = {"name": f"leaf{self.seed}", "pair": (s, float(s) / 2), "none": None}

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Own values only."""
        return {"values": self.values, "counts": self.counts, "count": self.count, "info": self.info}

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what is present."""
        if "values" in state:
            self.values = np.array(state["values"])
        if "counts" in state:
            self.counts = np.array(state["counts"])
        if "count" in state:
            self.count = state["count"]
        if "info" in state:
            self.info = state["info"]

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Rebuilt with the same size and seed."""
        return (), {"n": self.n, "seed": self.seed, "frozen": self.frozen}


class TorchLeaf(cairn.Checkpointable):
    """A leaf with torch tensors (float32, bfloat16, a non-contiguous view, shared storage)."""

    def __init__(self, n: int = 8, seed: int = 0) -> None:
        import torch

        self.n, self.seed = n, seed
        self.torch = torch
        self.set_step(0)

    def set_step(self, step: int) -> None:
        """Set every tensor to the values of ``step``."""
        torch = self.torch
        w = torch.from_numpy(_rng_values(self.seed, step, self.n * 2)).reshape(self.n, 2)
        self.weight = w
        self.weight_t = w.t()  # a non-contiguous view sharing storage
        self.half = w[:, 0].to(torch.bfloat16)
        self.step = step

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Own tensors."""
        return {"weight": self.weight, "weight_t": self.weight_t, "half": self.half, "step": self.step}

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what is present."""
        for key in ("weight", "weight_t", "half", "step"):
            if key in state:
                setattr(self, key, state[key])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Rebuilt with the same size and seed."""
        return (self.n, self.seed), {}


class Group(cairn.Checkpointable):
    """Only components: ``a`` (changes every step) and ``b`` (frozen)."""

    def __init__(self, n: int = 8) -> None:
        self.n = n
        self.a = ArrayLeaf(n, seed=3)
        self.b = ArrayLeaf(n, seed=4, frozen=True)

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        """``a`` and ``b``."""
        return [("a", self.a), ("b", self.b)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """The components' states."""
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        """Forward to the components."""
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Rebuilt with the same size."""
        return (), {"n": self.n}


class Agent(cairn.Checkpointable):
    """The root of the test tree (see the module docstring)."""

    def __init__(self, n: int = 8, with_torch: bool = False) -> None:
        self.n, self.with_torch = n, with_torch
        self.policy: cairn.Checkpointable = TorchLeaf(n, seed=1) if with_torch else ArrayLeaf(n, seed=1)
        self.stats = ArrayLeaf(n, seed=2)
        self.group = Group(n)
        self.step = 0
        self.extra: dict[str, Any] = {}
        self.set_step(0)

    def set_step(self, step: int) -> None:
        """Give the whole tree the values of ``step``."""
        self.step = step
        self.extra = {"tuple": (step, "x", None), "scalar": np.float64(step) / 3, "blob": bytes([step % 256]) * 3}
        for comp in (self.policy, self.stats, self.group.a, self.group.b):
            comp.set_step(step)  # type: ignore[attr-defined]

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        """``policy``, ``stats`` and ``group``."""
        return [("policy", self.policy), ("stats", self.stats), ("group", self.group)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Own values plus the components' states."""
        return {
            "step": self.step,
            "extra": self.extra,
            **self._get_components_state(components, not_components=not_components),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what is present."""
        if "step" in state:
            self.step = state["step"]
        if "extra" in state:
            self.extra = state["extra"]
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Rebuilt with the same size and leaf kind."""
        return (), {"n": self.n, "with_torch": self.with_torch}


class FailingLeaf(ArrayLeaf):
    """An ArrayLeaf whose ``get_state`` raises once ``fail`` is set (an interrupted save)."""

    fail = False

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Raise when asked to."""
        if self.fail:
            raise RuntimeError("get_state failed on purpose")
        return super().get_state(components, not_components=not_components)


class BadName(cairn.Checkpointable):
    """A component list with a name that cannot be a folder name."""

    def __init__(self, name: str = "..") -> None:
        self.name = name
        self.leaf = ArrayLeaf(4)

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        """One component with a hostile name."""
        return [(self.name, self.leaf)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """The component's state under its hostile name."""
        return {self.name: self.leaf.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Nothing of its own."""

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The name."""
        return (self.name,), {}


def expected_state(step: int, n: int, with_torch: bool = False) -> dict[str, Any]:
    """The full state an :class:`Agent` has at ``step``."""
    agent = Agent(n, with_torch=with_torch)
    agent.set_step(step)
    return agent.get_state()


def torch_loaded() -> bool:
    """Whether torch is imported in this process."""
    return "torch" in sys.modules
