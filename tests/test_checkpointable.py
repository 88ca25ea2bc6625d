"""The Checkpointable API through user-defined component trees."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from cairn.testing import CheckpointableContract, assert_states_equal
from cairn_test_components import Branch, Color, Leaf, LeafConfig, Tree
from pack_helpers import metadata_of, own_file, tensor_file


class TestTreeContract(CheckpointableContract):
    def make(self) -> cairn.Checkpointable:
        return Tree()

    def mutate(self, obj: cairn.Checkpointable) -> None:
        assert isinstance(obj, Tree)
        obj.mutate()


class TestLeafContract(CheckpointableContract):
    def make(self) -> cairn.Checkpointable:
        return Leaf(LeafConfig(size=5, scale=2.0), color=Color.BLUE)

    def mutate(self, obj: cairn.Checkpointable) -> None:
        assert isinstance(obj, Leaf)
        obj.mutate(7)


def test_layout_every_folder_has_metadata_and_manifest(tmp_path: Path) -> None:
    t = Tree()
    t.mutate()
    path = Path(t.save_to_path(tmp_path / "ck"))
    for folder in [path, path / "branch", path / "branch" / "left", path / "branch" / "right", path / "leaf"]:
        assert (folder / "manifest.json").is_file()
        assert json.loads(own_file(folder, "metadata.json"))["format_version"] == cairn.FORMAT_VERSION
    meta = metadata_of(path / "branch" / "left")
    assert meta["class"] == "cairn_test_components:Leaf"
    assert meta["cairn_version"] == cairn.__version__
    assert meta["format_version"] == cairn.FORMAT_VERSION
    assert meta["frameworks"]["python"] and meta["frameworks"]["numpy"] == np.__version__
    assert meta["state_version"] == 1 and meta["uses_pickle"] is False
    assert "created" in meta


def test_save_to_path_none_uses_temp_dir() -> None:
    path = Leaf().save_to_path()
    try:
        assert os.path.isdir(path)
        assert Leaf.from_checkpoint(path).counter == 0
    finally:
        import shutil

        shutil.rmtree(path)


def test_get_state_components_and_paths() -> None:
    t = Tree()
    assert set(t.get_state()) == {"history", "branch", "leaf"}
    assert set(t.get_state(components="leaf")) == {"history", "leaf"}
    s = t.get_state(components="branch/left")
    assert set(s["branch"]) == {"step", "left"}
    s = t.get_state(not_components=["branch/right", "leaf"])
    assert "leaf" not in s and set(s["branch"]) == {"step", "left"}
    s = t.get_state(components=["branch"], not_components="branch")
    assert "branch" not in s


def test_state_argument_saves_given_state_and_skips_missing_components(tmp_path: Path) -> None:
    t = Tree()
    t.mutate()
    state = t.get_state(not_components="leaf")
    path = Path(t.save_to_path(tmp_path / "ck", state=state))
    assert not (path / "leaf").exists()
    fresh = Tree()
    fresh_leaf_before = fresh.leaf.get_state()
    fresh.restore_from_path(path)
    assert_states_equal(fresh.branch.get_state(), t.branch.get_state())
    assert_states_equal(fresh.leaf.get_state(), fresh_leaf_before)  # missing folder: left as it is


def test_partial_restore_reads_only_component_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = Tree()
    t.mutate()
    path = t.save_to_path(tmp_path / "ck")
    from cairn.storage.local import LocalStorage

    read: list[str] = []
    orig = LocalStorage.read_file

    def spy(self: LocalStorage, p: str, *, max_bytes: int | None = None) -> bytearray:
        read.append(p)
        return orig(self, p, max_bytes=max_bytes)

    monkeypatch.setattr(LocalStorage, "read_file", spy)
    fresh = Tree()
    fresh.restore_from_path(os.path.join(path, "branch", "right"), component="branch/right")
    assert read and all(p.startswith(os.path.join(path, "branch", "right")) for p in read), read
    assert_states_equal(fresh.branch.right.get_state(), t.branch.right.get_state())
    assert fresh.branch.left.counter == 0


def test_partial_restore_unknown_component_lists_known(tmp_path: Path) -> None:
    t = Tree()
    path = t.save_to_path(tmp_path / "ck")
    with pytest.raises(cairn.ComponentNotFoundError, match="branch/left, branch/right") as info:
        t.restore_from_path(os.path.join(path, "branch"), component="branch/middle")
    assert isinstance(info.value, KeyError)


def test_from_checkpoint_ctor_overrides(tmp_path: Path) -> None:
    t = Tree("orig", n=3)
    path = t.save_to_path(tmp_path / "ck")
    t2 = Tree.from_checkpoint(path, name="renamed")
    assert t2.name == "renamed" and t2.n == 3
    with pytest.raises(cairn.CheckpointError, match="not a constructor parameter"):
        Tree.from_checkpoint(path, nonsense=1)


def test_from_checkpoint_records_ctor_types(tmp_path: Path) -> None:
    leaf = Leaf(LeafConfig(size=4, scale=0.5, tags=("x", "y")), color=Color.BLUE)
    rebuilt = Leaf.from_checkpoint(leaf.save_to_path(tmp_path / "ck"))
    assert rebuilt.config == LeafConfig(size=4, scale=0.5, tags=("x", "y"))
    assert rebuilt.color is Color.BLUE


def test_from_checkpoint_wrong_class_never_falls_back(tmp_path: Path) -> None:
    path = Leaf().save_to_path(tmp_path / "ck")
    with pytest.raises(cairn.IncompatibleCheckpointError, match="cairn_test_components:Leaf"):
        Tree.from_checkpoint(path)
    # The base class accepts any recorded Checkpointable.
    assert isinstance(cairn.Checkpointable.from_checkpoint(path), Leaf)


def test_restore_into_wrong_class_refused(tmp_path: Path) -> None:
    path = Leaf().save_to_path(tmp_path / "ck")
    with pytest.raises(cairn.IncompatibleCheckpointError):
        Branch().restore_from_path(path)


def test_incompatible_shapes_raise_and_restore_is_all_or_nothing(tmp_path: Path) -> None:
    t = Tree(n=2)
    t.mutate()
    path = t.save_to_path(tmp_path / "ck")
    other = Tree(n=5)
    with pytest.raises(cairn.IncompatibleCheckpointError, match="shape"):
        other.restore_from_path(path)


class BadNames(cairn.Checkpointable):
    def __init__(self, name: str) -> None:
        self.name = name

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [(self.name, Leaf())]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.name,), {}


@pytest.mark.parametrize("name", ["..", ".", "a/b", "/abs", "x\\y", "", "manifest.json", "sp ace", "é"])
def test_unsafe_component_names_refused_on_save(tmp_path: Path, name: str) -> None:
    with pytest.raises(cairn.CheckpointError, match="component named"):
        BadNames(name).save_to_path(tmp_path / "ck")
    assert not (tmp_path / "ck").exists()


def test_failed_save_keeps_previous_checkpoint(tmp_path: Path) -> None:
    t = Tree()
    t.mutate()
    path = t.save_to_path(tmp_path / "ck")
    t.leaf.extra = {"bad": object()}
    with pytest.raises(cairn.CheckpointError, match="leaf"):
        t.save_to_path(path)
    fresh = Tree()
    fresh.restore_from_path(path)
    assert fresh.leaf.extra[None] == {"deep": (True, None)}
    assert cairn.verify_checkpoint(path) == []
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # no staging folder left behind


def test_overwrite_replaces_checkpoint(tmp_path: Path) -> None:
    t = Tree()
    path = t.save_to_path(tmp_path / "ck")
    t.mutate()
    t.save_to_path(path)
    fresh = Tree()
    fresh.restore_from_path(path)
    assert_states_equal(fresh.get_state(), t.get_state())
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_metadata_from_get_metadata(tmp_path: Path) -> None:
    class WithMeta(Leaf):
        def get_metadata(self) -> dict[str, Any]:
            return {"purpose": "test", "score": 1.5}

    path = WithMeta().save_to_path(tmp_path / "ck")
    meta = metadata_of(path)
    assert meta["purpose"] == "test" and meta["score"] == 1.5

    class Clash(Leaf):
        def get_metadata(self) -> dict[str, Any]:
            return {"class": "x"}

    with pytest.raises(cairn.CheckpointError, match="reserved"):
        Clash().save_to_path(tmp_path / "ck2")


def test_memory_filesystem_round_trip() -> None:
    t = Tree()
    t.mutate()
    uri = t.save_to_path("memory://cairn-tests/tree")
    assert uri.startswith("memory://")
    t2 = Tree.from_checkpoint(uri)
    assert_states_equal(t.get_state(), t2.get_state())
    import fsspec

    fs = fsspec.filesystem("memory")
    t3 = Tree()
    t3.restore_from_path("/cairn-tests/tree/branch/left", component="branch/left", filesystem=fs)
    assert_states_equal(t3.branch.left.get_state(), t.branch.left.get_state())


class InPlace(cairn.Checkpointable):
    """Offers its live arrays as restore buffers."""

    def __init__(self) -> None:
        self.w = np.zeros((64, 32), np.float32)
        self.b = np.zeros(7, np.int64)
        self.received: dict[str, Any] = {}

    def get_state(self, components: Any = None, *, not_components: Any = None, **kw: Any) -> dict[str, Any]:
        return {"w": self.w, "b": self.b, "meta": {"n": 1}}

    def get_state_buffers(self) -> dict[str, Any] | None:
        return {"w": self.w, "b": self.b}

    def set_state(self, state: dict[str, Any]) -> None:
        self.received = state
        if "w" in state:
            self.w[...] = state["w"]
        if "b" in state:
            self.b[...] = state["b"]

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


def test_restore_reads_into_offered_buffers(tmp_path: Path) -> None:
    src = InPlace()
    src.w[:] = np.arange(src.w.size, dtype=np.float32).reshape(src.w.shape)
    src.b[:] = 5
    path = src.save_to_path(tmp_path / "ck")
    dst = InPlace()
    w_before = dst.w
    dst.restore_from_path(path)
    assert dst.received["w"] is w_before  # the saved bytes were read straight into the live array
    assert np.array_equal(dst.w, src.w) and np.array_equal(dst.b, src.b)
    # A corrupt file never reaches the live buffers.
    f = tensor_file(path)  # packed with the folder's small files: read in place all the same
    data = bytearray(f.read_bytes())
    data[-5] ^= 0x40
    f.write_bytes(bytes(data))
    fresh = InPlace()
    with pytest.raises(cairn.CorruptCheckpointError):
        fresh.restore_from_path(path)
    assert not fresh.w.any() and not fresh.b.any()
