"""Safety promises: light import, no pickle on load, golden checkpoints, errors as documented."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cairn
from cairn.manifest import Manifest, raw_entry, seal_manifest_body
from cairn.testing import assert_states_equal
from cairn_test_components import Tree

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

TESTS = Path(__file__).parent
GOLDEN = TESTS / "data" / "golden_format_v1"


def test_import_cairn_pulls_no_heavy_frameworks() -> None:
    code = (
        "import sys, cairn, cairn.cli, cairn.testing, cairn.manager\n"
        "bad = [m for m in ('torch', 'gymnasium', 'ray', 's3fs', 'matplotlib') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_import_cairn_is_light() -> None:
    """`import cairn` defers numpy (and everything heavier) until a checkpoint is touched."""
    code = "import sys, cairn\nprint(','.join(m for m in ('numpy', 'msgpack', 'fsspec') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_errors_derive_from_documented_bases() -> None:
    assert issubclass(cairn.CheckpointNotFoundError, FileNotFoundError)
    assert issubclass(cairn.ComponentNotFoundError, KeyError)
    for e in (cairn.CheckpointNotFoundError, cairn.CorruptCheckpointError, cairn.UnsafeCheckpointError,
              cairn.IncompatibleCheckpointError, cairn.ComponentNotFoundError):  # fmt: skip
        assert issubclass(e, cairn.CheckpointError) and issubclass(e, Exception)


def test_public_names_sorted() -> None:
    # isort style (what ruff's RUF022 enforces): CONSTANTS, then Classes, then functions.
    def key(n: str) -> tuple[int, str]:
        return (0 if n.isupper() else 1 if n[0].isupper() else 2, n)

    assert cairn.__all__ == sorted(cairn.__all__, key=key)
    for name in cairn.__all__:
        assert getattr(cairn, name) is not None


def test_default_checkpoint_loads_with_pickle_unusable(tmp_path: Path) -> None:
    t = Tree()
    t.mutate()
    path = t.save_to_path(tmp_path / "ck")
    code = f"""
import pickle, _pickle, sys
sys.path.insert(0, {str(TESTS)!r})
import torch, numpy, cairn
from cairn_test_components import Tree
def boom(*a, **k):
    raise RuntimeError("pickle was used")
for mod in (pickle, _pickle):
    mod.loads = mod.load = boom
    mod.Unpickler = boom
t = Tree.from_checkpoint({path!r})
print(t.branch.step, t.leaf.counter)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(t.branch.step), str(t.leaf.counter)]


def test_golden_checkpoint_still_loads() -> None:
    sys.path.insert(0, str(TESTS / "data"))
    try:
        from make_golden import golden_tree
    finally:
        sys.path.remove(str(TESTS / "data"))
    loaded = Tree.from_checkpoint(GOLDEN)
    assert_states_equal(loaded.get_state(), golden_tree().get_state())
    assert loaded.name == "golden" and loaded.n == 3
    assert cairn.verify_checkpoint(GOLDEN) == []


def _reseal(folder: Path) -> None:
    """Recompute the manifests from folder up to the root after an edit."""
    root = GOLDEN_COPY_ROOT[0]
    current = folder
    while True:
        data = json.loads((current / "manifest.json").read_text())
        for name in data["files"]:
            p = current / name
            b = p.read_bytes()
            data["files"][name] = raw_entry(b, format_version=data["format_version"])
        (current / "manifest.json").write_bytes(seal_manifest_body(data))
        if current == root:
            return
        current = current.parent


GOLDEN_COPY_ROOT: list[Path] = []


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    dst = tmp_path / "ck"
    shutil.copytree(GOLDEN, dst)
    GOLDEN_COPY_ROOT[:] = [dst]
    return dst


def test_format_version_from_the_future(ckpt: Path) -> None:
    meta = json.loads((ckpt / "leaf" / "metadata.json").read_text())
    meta["format_version"] = 99
    (ckpt / "leaf" / "metadata.json").write_text(json.dumps(meta))
    _reseal(ckpt / "leaf")
    with pytest.raises(cairn.IncompatibleCheckpointError, match=r"format 99.*Upgrade cairn"):
        Tree.from_checkpoint(ckpt)
    data = Manifest.from_bytes((ckpt / "manifest.json").read_bytes(), where="m")
    data.format_version = 7
    (ckpt / "manifest.json").write_bytes(data.to_bytes())
    with pytest.raises(cairn.IncompatibleCheckpointError, match=r"format 7"):
        Tree().restore_from_path(ckpt)


def test_truncated_tensor_file_named(ckpt: Path) -> None:
    f = ckpt / "branch" / "left" / "tensors.safetensors"
    f.write_bytes(f.read_bytes()[:-3])
    with pytest.raises(cairn.CorruptCheckpointError, match=r"left/tensors.safetensors.*truncated"):
        Tree().restore_from_path(ckpt)


def test_missing_file_named(ckpt: Path) -> None:
    (ckpt / "leaf" / "state.msgpack").unlink()
    with pytest.raises(cairn.CorruptCheckpointError, match=r"leaf/state.msgpack is missing"):
        Tree().restore_from_path(ckpt)


def test_missing_root_manifest_means_no_checkpoint(ckpt: Path) -> None:
    (ckpt / "manifest.json").unlink()
    with pytest.raises(cairn.CheckpointNotFoundError, match=r"no manifest.json"):
        Tree().restore_from_path(ckpt)


def test_tampered_state_with_resealed_manifest_still_decodes_safely(ckpt: Path) -> None:
    (ckpt / "leaf" / "state.msgpack").write_bytes(b"\xc1\xc1garbage")
    _reseal(ckpt / "leaf")
    with pytest.raises(cairn.CorruptCheckpointError, match=r"msgpack data is malformed"):
        Tree().restore_from_path(ckpt)


def test_failed_restore_leaves_object_untouched(ckpt: Path) -> None:
    f = ckpt / "leaf" / "tensors.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    t = Tree()
    before = t.get_state()
    with pytest.raises(cairn.CorruptCheckpointError, match=r"checksum"):
        t.restore_from_path(ckpt)
    assert_states_equal(before, t.get_state())
