"""A checkpoint that does not fit is refused before any live memory changes (SPEC 8, issue 13's open gap).

Two guards, both through the public API: the engine reads a folder into live buffers
(``get_state_buffers``) only when every array of its file has a place there, and every
object of a restore may refuse its state in ``check_state`` before anything is read
into place or applied.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn


class Arrays(cairn.Checkpointable):
    """Named float32 arrays offered as live buffers; ``set_state`` refuses unknown keys or shapes."""

    def __init__(self, shapes: dict[str, int], fill: float = 0.0, *, offer_none: tuple[str, ...] = ()) -> None:
        self.shapes = dict(shapes)
        self.arrays = {k: np.full(n, fill, np.float32) for k, n in shapes.items()}
        self.offer_none = offer_none
        self.applied = 0

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return dict(self.arrays)

    def get_state_buffers(self) -> dict[str, Any]:
        return {k: (None if k in self.offer_none else v) for k, v in self.arrays.items()}

    def set_state(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            if k not in self.arrays or v.shape != self.arrays[k].shape:
                raise cairn.IncompatibleCheckpointError(f"array {k!r} does not fit")
        for k, v in state.items():
            if v is not self.arrays[k]:
                self.arrays[k][...] = v
        self.applied += 1

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.shapes,), {}


class Checked(Arrays):
    """Like :class:`Arrays`, and refuses in ``check_state`` what ``set_state`` would."""

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        for k, v in state.items():
            if k not in self.arrays or v.shape != self.arrays[k].shape:
                raise cairn.IncompatibleCheckpointError(f"array {k!r} does not fit")


class Tree(cairn.Checkpointable):
    def __init__(self, first: cairn.Checkpointable, second: cairn.Checkpointable) -> None:
        self.first, self.second = first, second

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("a", self.first), ("b", self.second)]


@pytest.mark.parametrize(
    ("saved", "live"),
    [({"w": 8, "extra": 4}, {"w": 8}), ({"w": 8, "v": 5}, {"w": 8, "v": 6})],
    ids=["array-with-no-live-key", "live-buffer-of-another-shape"],
)
def test_a_buffer_with_no_place_for_an_array_leaves_the_live_arrays_untouched(
    tmp_path: Path, saved: dict[str, int], live: dict[str, int]
) -> None:
    # No check_state here: the engine itself sees that the file does not fit the live buffers
    # and reads the folder into fresh arrays, so set_state refuses before 'w' changes.
    path = Arrays(saved, fill=1.0).save_to_path(tmp_path / "ck")
    target = Arrays(live)
    with pytest.raises(cairn.IncompatibleCheckpointError, match="does not fit"):
        target.restore_from_path(path)
    assert all(not a.any() for a in target.arrays.values())


def test_a_refusing_check_state_leaves_every_component_untouched(tmp_path: Path) -> None:
    # 'a' fits and is read in place; 'b' does not. Before, 'a' was applied (bottom-up) or its live
    # buffer overwritten before 'b' refused; check_state runs for the whole tree first.
    path = Tree(Checked({"w": 8}, 1.0), Checked({"w": 8, "extra": 2}, 1.0)).save_to_path(tmp_path / "ck")
    a, b = Checked({"w": 8}), Checked({"w": 8})
    with pytest.raises(cairn.IncompatibleCheckpointError, match="'extra' does not fit"):
        Tree(a, b).restore_from_path(path)
    assert not a.arrays["w"].any() and not b.arrays["w"].any()
    assert a.applied == b.applied == 0


def test_a_fitting_restore_is_still_in_place_and_a_none_buffer_takes_a_fresh_array(tmp_path: Path) -> None:
    path = Arrays({"w": 8, "n": 3}, fill=2.0).save_to_path(tmp_path / "ck")
    target = Arrays({"w": 8, "n": 3}, offer_none=("n",))
    w, n = target.arrays["w"], target.arrays["n"]
    seen: list[dict[str, Any]] = []
    original = target.set_state
    target.set_state = lambda state: (seen.append(dict(state)), original(state))[-1]  # type: ignore[method-assign]
    target.restore_from_path(path)
    assert seen[0]["w"] is w and seen[0]["n"] is not n  # 'w' read into its live buffer, 'n' fresh
    assert (w == 2).all() and (n == 2).all()
