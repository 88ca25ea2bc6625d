"""Small user-defined component trees the core tests (and the golden checkpoints) use.

A library of components, as a user writes one: it registers its classes (``@cairn.register``),
so that any program that imports it (``cairn --import cairn_test_components ...``) loads
checkpoints naming them (SPEC 8).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import numpy as np

import cairn


@cairn.register
class Color(enum.Enum):
    """An enum used as a constructor argument."""

    RED = "red"
    BLUE = "blue"


@cairn.register_type
@dataclasses.dataclass
class LeafConfig:
    """A registered dataclass used as a constructor argument."""

    size: int = 3
    scale: float = 1.0
    tags: tuple[str, ...] = ("a",)


@cairn.register
class Leaf(cairn.Checkpointable):
    """A leaf with numpy state and a dataclass config."""

    def __init__(self, config: LeafConfig | None = None, color: Color = Color.RED) -> None:
        self.config = config or LeafConfig()
        self.color = color
        self.weights = np.arange(self.config.size, dtype=np.float32) * self.config.scale
        self.counter = 0
        self.extra: dict[Any, Any] = {"t": (1, "x"), 3: None}

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"weights": self.weights, "counter": self.counter, "extra": self.extra}

    def set_state(self, state: dict[str, Any]) -> None:
        if "weights" in state:
            w = np.asarray(state["weights"])
            if w.shape != self.weights.shape:
                raise cairn.IncompatibleCheckpointError(
                    f"Leaf weights have shape {w.shape}, expected {self.weights.shape}."
                )
            self.weights = w.copy()
        self.counter = state.get("counter", self.counter)
        self.extra = state.get("extra", self.extra)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.config,), {"color": self.color}

    def mutate(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.weights = rng.standard_normal(self.weights.shape).astype(np.float32)
        self.counter += 1 + seed
        self.extra = {"t": (seed, "y"), 3: [1.5, b"\x00"], None: {"deep": (True, None)}}


@cairn.register
class Branch(cairn.Checkpointable):
    """A node with two leaves and its own state."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.left = Leaf(LeafConfig(size=n))
        self.right = Leaf(LeafConfig(size=n + 1), color=Color.BLUE)
        self.step = 0

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("left", self.left), ("right", self.right)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"step": self.step, **self._get_components_state(components, not_components=not_components)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.step = state.get("step", self.step)
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {"n": self.n}


@cairn.register
class Tree(cairn.Checkpointable):
    """A root with a branch, a leaf, and a name: three levels deep."""

    def __init__(self, name: str = "tree", n: int = 2) -> None:
        self.name = name
        self.n = n
        self.branch = Branch(n)
        self.leaf = Leaf()
        self.history: list[float] = []

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("branch", self.branch), ("leaf", self.leaf)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"history": list(self.history), **self._get_components_state(components, not_components=not_components)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.history = list(state.get("history", self.history))
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.name,), {"n": self.n}

    def mutate(self) -> None:
        self.history.append(0.5 * (len(self.history) + 1))
        self.branch.step += 10
        self.branch.left.mutate(1)
        self.branch.right.mutate(2)
        self.leaf.mutate(3)
